"""MuJoCo Playground's envs as they come (examples/playground_task.py), in the environment that
holds both Playground and pql (`pip install torch==2.13.0 -e ".[playground]"`): the true final
observations the example's wrapper hands on, the groups pql takes with no setting, an evaluation
that compiles nothing, the env contract, and pql learning CartpoleBalance on the CPU.

CartpoleBalance is one of the DeepMind Control Suite tasks whose models ship inside Playground's
package; its locomotion and manipulation tasks fetch MuJoCo Menagerie with git at their first
use, which a machine without a network cannot. These tests need Playground (Python 3.11 or
newer, JAX), so they are a tier of their own (tests/run.sh --playground), run by .ci/run in a
third environment."""

import jax
import jax.numpy as jnp
import pytest
import torch

import tasks
from bench.learning import STEP_BUDGET
from examples.playground_task import PlaygroundVecEnv, groups, make
from pql.check_env import main as check_env_main
from pql.evaluate import evaluate
from pql.runtime import train
from tasks.rsl_rl_env import RslRlEnv

TASK = "examples.playground_task:make"


@pytest.fixture(scope="module")
def env() -> RslRlEnv:
    """Four CartpoleBalance envs through the adapter, as pql makes them: their reset and step
    compile once for the module (20-25 s on 2 cores)."""
    made = tasks.make(TASK, 4, "cpu", seed=0)
    yield made
    made.close()


def jump_to_the_step_limit(vec_env: PlaygroundVecEnv) -> None:
    """Every env's episode one step before its 1,000-step limit: Playground's episode counter
    (brax's EpisodeWrapper, info["steps"]) set, the physics left where it is."""
    steps = vec_env._state.info["steps"]
    vec_env._state.info["steps"] = jnp.full_like(steps, vec_env.max_episode_length - 1)


def test_the_adapter_takes_playgrounds_state_group_with_no_setting(env):
    assert isinstance(env.vec_env, PlaygroundVecEnv)
    assert (env.policy_obs_dim, env.critic_obs_dim, env.act_dim, env.max_episode_steps) == (5, 0, 1, 1000)
    assert set(env.vec_env.get_observations()) == {"state"}  # Playground's name, not pql's


def test_a_cut_episode_hands_on_its_last_observation_and_restarts(env):
    first = env.reset().clone()
    push = torch.ones(4, 1)
    for _ in range(20):
        obs, _, terminated, truncated, info = env.step(push)
        assert not (terminated | truncated).any()
        assert torch.equal(info["final_obs"], obs)
    jump_to_the_step_limit(env.vec_env)
    obs, _, terminated, truncated, info = env.step(push)
    assert truncated.all() and not terminated.any() and env.final_obs_given
    # CartpoleBalance's observations: cart position, cos and sin of the pole angle, cart and pole
    # velocities. 21 steps of full push leave the cart moving; each env then restarts from its
    # episode's first state (Playground's auto-reset), all but still.
    final = info["final_obs"]
    assert (final[:, 3].abs() > 0.5).all(), final
    assert torch.allclose(obs, first), (obs, first)
    obs, _, terminated, truncated, info = env.step(push)  # the restarted envs step on at once
    assert not (terminated | truncated).any() and torch.equal(info["final_obs"], obs)


def test_observations_reach_torch_without_a_copy():
    """DLPack: the torch tensors are JAX's buffers (on a GPU too: the same call, another device)."""
    state = jnp.arange(12.0).reshape(4, 3)
    given = groups({"state": state, "privileged_state": state + 1})
    assert given["state"].data_ptr() == state.unsafe_buffer_pointer()
    assert torch.equal(given["privileged_state"], torch.arange(1.0, 13.0).reshape(4, 3))
    assert groups(state)["state"].data_ptr() == state.unsafe_buffer_pointer()  # one array: "state"


def test_reset_draws_new_start_states():
    vec_env = make(4, "cpu", seed=0)
    first = vec_env.get_observations()["state"].clone()
    again = vec_env.reset()["state"]
    assert not torch.equal(first, again)
    assert torch.equal(make(4, "cpu", seed=0).get_observations()["state"], first)  # seeded


def test_an_evaluation_compiles_nothing(env):
    """The env compiles its reset and step when made: pql's first evaluation does not pay for it.
    Holding still earns 689-700 of 1,000 (32 envs, seed 0); each episode runs to the limit."""
    compiles = []  # JAX's tracing, compiling and compilation-cache events

    def listen(event: str, seconds: float, **_) -> None:
        if "compil" in event:
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        scores = evaluate(env, lambda obs: torch.zeros(obs.shape[0], 1), torch.nn.Identity())
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiles == []
    assert scores["eval/length"] == 1000 and 650 < scores["eval/return"] < 720, scores


def test_bad_arguments_are_refused_in_one_line():
    with pytest.raises(tasks.TaskError, match="unknown Playground task 'CartPoleBalance'; Playground has .*Cartpole"):
        tasks.make(TASK, 4, "cpu", seed=0, kwargs={"task": "CartPoleBalance"})
    with pytest.raises(tasks.TaskError, match="impl='mjx': MJX's implementations are 'jax' and 'warp'"):
        tasks.make(TASK, 4, "cpu", seed=0, kwargs={"impl": "mjx"})
    with pytest.raises(tasks.TaskError, match="no domain randomiser for 'CartpoleBalance'"):
        tasks.make(TASK, 4, "cpu", seed=0, kwargs={"domain_randomization": True})
    with pytest.raises(ValueError, match=r"device 'cuda:99': (this JAX has no GPU backend|JAX sees \d+ GPU)"):
        make(4, "cuda:99", seed=0)


def test_the_env_contract_holds_for_a_playground_task(capsys):
    assert check_env_main([TASK, "--num-envs", "4", "--steps", "20"]) == 0, capsys.readouterr()


def test_pql_learns_playground_cartpole_balance_on_the_cpu(make_config):
    """Holding still earns 689-700 of a balanced pole's 1,000, uniform random actions 252-478 (32
    envs, seed 0); the policy must beat both. Seed 0 reached 881 at 12k env steps and 994 at
    30k. One evaluation, at the end, on four envs."""
    cfg = make_config(
        [
            f"task={TASK}",
            "task.num_envs=32",
            "task.eval_envs=4",
            *STEP_BUDGET,
            "runtime.max_env_steps=16000",
            "runtime.eval_every=1000000",
            "runtime.seed=0",
        ]
    )
    final = train(cfg)
    assert final["eval/return"] > 850, final
