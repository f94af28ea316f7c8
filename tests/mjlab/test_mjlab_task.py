"""mjlab's envs as they come (examples/mjlab_task.py), in the environment that holds both mjlab
1.6 and pql (`pip install torch==2.13.0 mjlab==1.6.0 -e .`): the terminal observations that the
example's wrapper hands on, the env contract, and pql learning Mjlab-Cartpole-Balance on the CPU.

These tests need mjlab, which pins MuJoCo 3.11: they are a tier of their own (tests/run.sh
--mjlab), run by .ci/run in a second environment."""

import torch
from mjlab.envs import ManagerBasedRlEnv
from mjlab.tasks.registry import load_env_cfg

import tasks
from bench.learning import STEP_BUDGET
from examples.mjlab_task import FinalObsVecEnv
from pql.check_env import main as check_env_main
from pql.runtime import train
from tasks.rsl_rl_env import RslRlEnv

TASK = "examples.mjlab_task:make"


def cartpole(num_envs: int, episode_steps: int) -> FinalObsVecEnv:
    """Mjlab-Cartpole-Balance through the example's wrapper, its episodes `episode_steps` long."""
    cfg = load_env_cfg("Mjlab-Cartpole-Balance")
    cfg.scene.num_envs, cfg.seed, cfg.auto_reset = num_envs, 0, False
    cfg.episode_length_s = episode_steps * cfg.decimation * cfg.sim.mujoco.timestep
    return FinalObsVecEnv(ManagerBasedRlEnv(cfg=cfg, device="cpu"))


def test_a_finished_episode_hands_on_its_last_observation_and_the_env_starts_a_new_one():
    env = cartpole(num_envs=3, episode_steps=4)
    env.reset()
    push = torch.ones(3, 1)
    for _ in range(3):
        _, _, dones, extras = env.step(push)
        assert not dones.any() and "final_obs" not in extras  # none kept from an earlier step
    obs, _, dones, extras = env.step(push)
    assert dones.all() and extras["time_outs"].all()
    final, first = extras["final_obs"]["critic"], obs["critic"]
    # The critic's group holds [cart position, cos and sin of the pole angle, cart velocity, pole
    # velocity], without noise: four steps of full push leave the cart moving, and a new episode
    # starts all but still (velocities drawn within ±0.01).
    assert (final[:, 3].abs() > 0.1).all()
    assert (first[:, 3].abs() <= 0.01 + 1e-6).all()
    assert (env.unwrapped.episode_length_buf == 0).all()
    _, _, dones, extras = env.step(push)  # the reset envs step on at once
    assert not dones.any() and "final_obs" not in extras
    env.close()


def test_the_adapter_reads_the_actor_and_critic_groups_and_the_given_final_observations():
    env = tasks.make(TASK, 4, "cpu", seed=0)
    assert isinstance(env, RslRlEnv)
    assert (env.policy_obs_dim, env.critic_obs_dim, env.act_dim, env.max_episode_steps) == (5, 5, 1, 1000)
    env.reset()
    for _ in range(3):
        env.step(torch.zeros(4, 1))
    assert not env.final_obs_given  # given at the steps where an env finishes
    env.vec_env.unwrapped.episode_length_buf[:] = env.max_episode_steps - 1
    _, _, terminated, truncated, info = env.step(torch.zeros(4, 1))
    assert truncated.all() and not terminated.any() and env.final_obs_given
    assert not torch.equal(info["final_obs"], env._obs)
    env.close()


def test_the_env_contract_holds_for_an_mjlab_task(capsys):
    assert check_env_main([TASK, "--num-envs", "4", "--steps", "20"]) == 0, capsys.readouterr()


def test_pql_learns_mjlab_cartpole_balance_on_the_cpu(make_config):
    """Holding still (zero force) earns 27–31 of a balanced pole's 50 (eight envs, seed 0: the
    reward is scaled by the step's 0.05 s, 1,000 steps an episode); the policy must beat it. Seed
    0 ended at 43.4 (an evaluation at 10k env steps had 29.4). One evaluation, at the end: each
    steps 1,000 times through mjlab's managers, about 25 s on 2 cores."""
    cfg = make_config(
        [
            f"task={TASK}",
            "task.num_envs=32",
            "task.eval_envs=4",
            *STEP_BUDGET,
            "runtime.max_env_steps=20000",
            "runtime.eval_every=1000000",
            "runtime.seed=0",
        ]
    )
    final = train(cfg)
    assert final["eval/return"] > 35, final
