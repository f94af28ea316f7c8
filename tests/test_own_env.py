"""The user's own envs: `task=<module>:<factory>` returning a pql BatchedEnv (examples/own_env.py)
or an env with rsl_rl's VecEnv interface (examples/rsl_rl_task.py, a real subclass of rsl-rl-lib's
VecEnv), the refusals, and the command line's forms."""

import math
import os
import subprocess
import sys

import pytest
import torch
from conftest import NO_EXPORT, ONE_THREAD, ROOT
from tensordict import TensorDict

import tasks
from bench.learning import OFF_POLICY, PENDULUM, STEP_BUDGET
from examples.own_env import PointMass
from pql import check_env
from pql.checkpoint import load_checkpoint
from pql.cli import expand_task_forms
from pql.config import ConfigError
from pql.evaluate import evaluate
from pql.runtime import train
from tasks.rsl_rl_env import RslRlEnv

RSL_RL_TASK = "examples.rsl_rl_task:make_env"
MODULE_LAMBDA = lambda num_envs, device, seed: None  # refused: a role process could not import it


def test_a_factory_gets_its_keyword_arguments_and_its_envs_follow_the_protocol():
    env = tasks.make("examples.own_env:make_env", 4, "cpu", seed=3, kwargs={"arena": 2.0})
    assert env.arena == 2.0 and env.num_envs == 4
    obs = env.reset()
    assert obs.shape == (4, env.obs_dim) and obs.dtype == torch.float32


@pytest.mark.parametrize(
    "spec, why",
    [
        ("no_such_module_here:make", "cannot import module 'no_such_module_here'"),
        ("examples.own_env:no_such_factory", "has no 'no_such_factory'"),
        ("examples.own_env:PointMass.obs_dim", "is not callable"),
        ("test_own_env:MODULE_LAMBDA", "lambda or a local function"),
        ("examples.own_env", "unknown task"),
    ],
)
def test_a_factory_that_cannot_be_used_is_refused_with_the_reason(spec, why):
    with pytest.raises(tasks.TaskError, match=why) as err:
        tasks.make(spec, 2, "cpu")
    assert "\n" not in str(err.value)


def test_a_factory_that_raises_or_returns_something_else_is_refused():
    with pytest.raises(tasks.TaskError, match=r"factory raised TypeError.*factory\(num_envs=\.\.\., device"):
        tasks.make("examples.own_env:make_env", 2, "cpu", kwargs={"no_such_argument": 1})
    with pytest.raises(tasks.TaskError, match="neither a pql BatchedEnv.*lacks num_envs, num_actions"):
        tasks.make("collections:OrderedDict", 2, "cpu")


def env_of(final_obs: bool, num_envs: int = 4) -> RslRlEnv:
    env = tasks.make(RSL_RL_TASK, num_envs, "cpu", seed=0, kwargs={"final_obs": final_obs})
    assert isinstance(env, RslRlEnv)
    return env


def test_rsl_rl_envs_keep_termination_and_truncation_apart_and_give_the_final_observation():
    """InvertedPendulum falls (terminated) within a few steps under full pushes; the wrapped task
    reports the observation that ended each episode only with final_obs=True."""
    shown, hidden = env_of(final_obs=True), env_of(final_obs=False)
    assert (shown.reset() == hidden.reset()).all() and shown.obs_dim == 4 and shown.max_episode_steps == 1000
    push = torch.ones(4, 1)
    for _ in range(100):
        before = hidden._obs.clone()
        obs, reward, terminated, truncated, info = shown.step(push)
        obs_h, reward_h, terminated_h, truncated_h, info_h = hidden.step(push)
        assert (obs == obs_h).all() and (reward == reward_h).all() and (terminated == terminated_h).all()
        assert not (terminated & truncated).any()
        if terminated.any():
            break
    assert terminated.all(), "a full push topples the pole within 100 steps"
    assert shown.final_obs_given and not hidden.final_obs_given
    assert not torch.equal(info["final_obs"], obs)  # the last observation of the old episode
    assert torch.equal(info_h["final_obs"], before)  # the stand-in: the observation before the last step


class GroupsOnly:
    """rsl_rl's interface with observation groups "critic" and "extra", and no policy group."""

    num_envs, num_actions, max_episode_length, device = 2, 1, 10, "cpu"

    def get_observations(self):
        return TensorDict({"critic": torch.zeros(2, 3), "extra": torch.ones(2, 5)}, batch_size=[2])

    def step(self, actions):
        return self.get_observations(), torch.zeros(2), torch.zeros(2), {}


class ActorAndCritic(GroupsOnly):
    """mjlab's groups: "actor" (2 numbers) and "critic" (3)."""

    def get_observations(self):
        return TensorDict({"actor": torch.ones(2, 2), "critic": torch.zeros(2, 3)}, batch_size=[2])


def test_the_policy_sees_the_named_group_else_policy_else_actor():
    assert RslRlEnv(ActorAndCritic()).policy_obs_dim == 2  # mjlab's "actor"
    assert RslRlEnv(GroupsOnly(), policy_group="extra").policy_obs_dim == 5
    assert RslRlEnv(ActorAndCritic(), policy_group="critic").policy_obs_dim == 3


class StateAndPrivilegedState(GroupsOnly):
    """MuJoCo Playground's groups: "state" (2 numbers) and "privileged_state" (4)."""

    def get_observations(self):
        return {"state": torch.ones(2, 2), "privileged_state": torch.zeros(2, 4, 1)}


class MjlabAndPlaygroundGroups(GroupsOnly):
    def get_observations(self):
        return {**StateAndPrivilegedState().get_observations(), **ActorAndCritic().get_observations()}


def test_playgrounds_groups_are_taken_with_no_setting_after_isaac_labs_and_mjlabs():
    env = RslRlEnv(StateAndPrivilegedState())
    assert (env.policy_obs_dim, env.critic_obs_dim) == (2, 4)
    env = RslRlEnv(MjlabAndPlaygroundGroups())  # "actor" (2) and "critic" (3) win
    assert (env.policy_obs_dim, env.critic_obs_dim) == (2, 3)


def test_an_rsl_rl_env_without_the_policys_group_is_refused_naming_its_groups():
    with pytest.raises(tasks.TaskError, match="critic, extra and neither 'policy' nor 'actor' nor 'state'; name"):
        RslRlEnv(GroupsOnly())
    with pytest.raises(tasks.TaskError, match="groups actor, critic and no 'proprio' group \\(task.policy_group\\)"):
        RslRlEnv(ActorAndCritic(), policy_group="proprio")


def test_the_critic_sees_its_group_after_the_policy_s():
    """mjlab's and Isaac Lab's "critic" group, else the named one, follows the policy's columns; the
    policy's own group adds none."""
    env = RslRlEnv(ActorAndCritic())
    assert (env.obs_dim, env.critic_obs_dim, env.policy_obs_dim) == (5, 3, 2)
    assert torch.equal(env.reset(), torch.tensor([[1.0, 1, 0, 0, 0]] * 2))
    assert RslRlEnv(ActorAndCritic(), critic_group="actor").critic_obs_dim == 0
    assert RslRlEnv(GroupsOnly(), policy_group="extra").critic_obs_dim == 3
    named = RslRlEnv(GroupsOnly(), policy_group="critic", critic_group="extra")
    assert (named.policy_obs_dim, named.critic_obs_dim) == (3, 5)
    assert RslRlEnv(TensorObs()).critic_obs_dim == 0


def test_a_critic_group_the_env_lacks_is_refused_naming_its_groups():
    with pytest.raises(tasks.TaskError, match="groups actor, critic and no 'privileged' group \\(task.critic_group\\)"):
        RslRlEnv(ActorAndCritic(), critic_group="privileged")


@pytest.mark.parametrize("setting", ["policy_group", "critic_group"])
def test_a_named_group_is_refused_where_the_env_has_no_groups(setting):
    with pytest.raises(tasks.TaskError, match=f"task.{setting}=actor names an observation group, but .* Tensor"):
        RslRlEnv(TensorObs(), **{setting: "actor"})
    with pytest.raises(tasks.TaskError, match=f"task.{setting}=actor names .* returned a pql BatchedEnv"):
        tasks.make("examples.own_env:make_env", 2, "cpu", **{setting: "actor"})
    with pytest.raises(tasks.TaskError, match=f"{setting} names an observation group of a <module>:<factory> env"):
        tasks.make("InvertedPendulum", 2, "cpu", **{setting: "actor"})


class FinalGroups(ActorAndCritic):
    """Env 0 finishes at every step; extras["final_obs"] as groups, or the policy's tensor alone."""

    def __init__(self, as_groups: bool):
        self.as_groups = as_groups

    def step(self, actions):
        final = TensorDict({"actor": torch.full((2, 2), 7.0), "critic": torch.full((2, 3), 8.0)}, batch_size=[2])
        extras = {"final_obs": final if self.as_groups else final["actor"]}
        return self.get_observations(), torch.zeros(2), torch.tensor([1.0, 0.0]), extras


def test_the_final_observation_carries_the_critic_s_group_too():
    obs, _, terminated, _, info = RslRlEnv(FinalGroups(as_groups=True)).step(torch.zeros(2, 1))
    assert terminated.tolist() == [True, False]
    assert info["final_obs"][0].tolist() == [7.0, 7, 8, 8, 8] and torch.equal(info["final_obs"][1], obs[1])
    with pytest.raises(tasks.TaskError, match="extras\\['final_obs'\\] gives 2 columns where the observations give 5"):
        RslRlEnv(FinalGroups(as_groups=False)).step(torch.zeros(2, 1))


class TensorObs(GroupsOnly):
    """rsl_rl's interface with observations as a plain tensor and no "time_outs"."""

    def get_observations(self):
        return torch.ones(2, 3)


def test_an_env_without_time_outs_has_no_truncations_and_its_actions_are_checked():
    env = RslRlEnv(TensorObs())
    env.reset()
    _, _, terminated, truncated, _ = env.step(torch.zeros(2, 1))
    assert not terminated.any() and not truncated.any()
    with pytest.raises(tasks.TaskError, match="shape"):
        env.step(torch.zeros(2, 2))


class Countdown(GroupsOnly):
    """rsl_rl's interface without reset(): episodes of 5 and 3 steps, reward 1 a step."""

    lengths = torch.tensor([5, 3])
    max_episode_length = 5

    def __init__(self):
        self.t, self.steps = torch.zeros(2, dtype=torch.long), 0

    def get_observations(self):
        return self.t[:, None].float()

    def step(self, actions):
        self.t += 1
        self.steps += 1
        done = self.t == self.lengths
        self.t[done] = 0
        return self.get_observations(), torch.ones(2), done.long(), {"time_outs": done}


def test_an_evaluation_scores_whole_episodes_of_an_env_that_cannot_reset_on_demand():
    """Each env's episode under way is stepped through unscored; one that has just begun is scored."""
    vec_env = Countdown()
    env = RslRlEnv(vec_env)
    assert env.episode_starts.all()
    for _ in range(4):  # env 0 is 4 steps into its first episode, env 1 one step into its second
        env.step(torch.zeros(2, 1))
    policy, normalizer = (lambda obs: torch.zeros(2, 1)), (lambda obs: obs)
    assert evaluate(env, policy, normalizer) == {"eval/return": 4.0, "eval/length": 4.0}  # (5 + 3) / 2
    assert vec_env.steps == 4 + 6  # env 0: 1 step unscored, 5 scored; env 1: 2 unscored, 3 scored
    assert env.episode_starts.tolist() == [True, False]  # env 0 ended at the last step, env 1 went on
    assert evaluate(env, policy, normalizer) == {"eval/return": 4.0, "eval/length": 4.0}
    assert vec_env.steps == 10 + 5  # env 0 scored from the first step; env 1: 2 unscored, 3 scored


def test_the_command_line_writes_each_form_as_its_group_option_and_name():
    assert expand_task_forms(["task=gym:Pendulum-v1", "task.kwargs.g=9.5"]) == [
        "task=gym",
        "task.name=gym:Pendulum-v1",
        "++task.kwargs.g=9.5",
    ]
    assert expand_task_forms(["task=my_envs.arm:make_env"]) == ["task=factory", "task.name=my_envs.arm:make_env"]
    with pytest.raises(ConfigError, match="choices of one form"):
        expand_task_forms(["-m", "task=gym:Pendulum-v1,Ant"])


def test_kwargs_import_module_and_observation_groups_are_refused_where_they_do_not_apply(make_config):
    with pytest.raises(ConfigError, match="task.kwargs"):
        make_config(["task=Ant", "++task.kwargs.x=1"])
    with pytest.raises(ConfigError, match="task.import_module"):
        make_config(["task=examples.own_env:make_env", "task.import_module=gymnasium_robotics"])
    with pytest.raises(ConfigError, match="task.policy_group"):
        make_config(["task=gym:Pendulum-v1", "task.policy_group=actor"])
    with pytest.raises(ConfigError, match="task.critic_group"):
        make_config(["task=Ant", "task.critic_group=critic"])
    assert make_config([f"task={RSL_RL_TASK}", "task.policy_group=actor"]).task.policy_group == "actor"


def test_a_task_refused_leaves_no_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    for task in ("no_such_module_here:make", "examples.own_env:no_such_factory"):
        result = subprocess.run(
            [sys.executable, "train.py", f"task={task}", f"hydra.run.dir={run_dir}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and f"task {task}" in result.stderr, result.stderr
        assert not os.path.exists(run_dir)


class Float64PointMass(PointMass):
    """Breaks the protocol: float64 observations."""

    def reset(self):
        return super().reset().double()


def make_broken_env(num_envs, device, seed):
    return Float64PointMass(num_envs, device, seed)


def make_wrong_size(num_envs, device, seed):
    return PointMass(num_envs + 1, device, seed)


def test_a_factory_whose_envs_are_not_what_was_asked_for_is_refused():
    with pytest.raises(tasks.TaskError, match="asked for 2 envs and made 3"):
        tasks.make("test_own_env:make_wrong_size", 2, "cpu")


def first_layer_inputs(state: dict) -> int:
    """The inputs of a network's first layer, of its state dict."""
    return next(t for t in state.values() if t.dim() == 2).shape[1]


@pytest.mark.parametrize(
    "algo,privileged", [("pql", True), ("pql_d", True), ("sac", True), ("sac", False), ("ppo", True), ("impala", True)]
)
def test_every_algorithm_trains_evaluates_and_tests_a_factory_s_env_with_a_privileged_critic(
    make_config, tmp_path, algo, privileged
):
    """A short sequential run per algorithm on examples/own_env.py's env whose critic has a group of
    its own (7 columns after the policy's 6), then test=true on its checkpoint: the critic and its
    target read the 7 (with task.privileged_critic=false the policy's 6), the policy and the
    normaliser it is delivered with the policy's 6, the actor's normaliser all 13."""
    run = [
        "task=examples.own_env:make_env",
        "task.kwargs.privileged=true",
        f"task.privileged_critic={str(privileged).lower()}",
        "task.num_envs=4",
        "task.eval_envs=2",
        f"algo={algo}",
        "runtime.mode=sequential",
        "runtime.max_env_steps=800",
        "runtime.eval_every=400",
        "algo.net.actor_hidden=[16]",
        "algo.net.critic_hidden=[16]",
        *(["algo.batch_size=32"] if algo in ("pql", "pql_d", "sac") else []),
    ]
    final = train(make_config(run))
    assert "eval/return" in final and (tmp_path / "checkpoint.pt").exists()
    state = load_checkpoint(tmp_path / "checkpoint.pt")
    critic_obs = 7 if privileged else 6
    if algo in ("ppo", "impala"):
        learner = state["roles"]["learner"]
        assert first_layer_inputs(learner["critic"]) == critic_obs and first_layer_inputs(learner["policy"]) == 6
        assert learner["normalizer"]["mean"].shape == (13,)
    else:
        v_learner, act_dim = state["roles"]["v_learner"], 2
        for critic in (v_learner["critic"], v_learner["target_critic"], state["roles"]["actor"]["critic"] or {}):
            assert not critic or first_layer_inputs(critic) == critic_obs + act_dim
        assert state["roles"]["actor"]["normalizer"]["mean"].shape == (13,)
    assert first_layer_inputs(state["policy"]) == 6 and state["normalizer"]["mean"].shape == (6,)
    tested = train(make_config([*run, "test=true", f"checkpoint={tmp_path / 'checkpoint.pt'}"], tmp_path / "test"))
    assert math.isfinite(tested["eval/return"]), tested


def test_an_env_that_breaks_the_protocol_stops_the_run_in_one_line_before_any_role_starts(tmp_path):
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "train.py", "task=test_own_env:make_broken_env", f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "tests")},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "breaks the env protocol: dtypes" in result.stderr and "python -m pql.check_env" in result.stderr
    assert "roles started" not in result.stdout and not os.path.exists(run_dir)


@pytest.mark.slow
def test_pql_learns_inverted_pendulum_through_rsl_rl_s_interface(make_config):
    """End to end, sequential, within the learning tests' env-step budget: rsl_rl's semantics (no
    final observation; pql bootstraps a truncated episode from the observation before its last step)."""
    overrides = [o for o in PENDULUM if not o.startswith("task=")]
    cfg = make_config([f"task={RSL_RL_TASK}", *overrides, *OFF_POLICY, *STEP_BUDGET, "runtime.max_env_steps=40000"])
    final = train(cfg)
    assert final["eval/return"] >= 900, final


@pytest.mark.slow
def test_a_factory_trains_in_process_mode(make_config, tmp_path):
    """The actor's process imports the factory by its name and builds its own envs there."""
    cfg = make_config(
        [
            "task=examples.own_env:make_env",
            "task.num_envs=8",
            "runtime.mode=process",
            "runtime.max_env_steps=1500",
            "runtime.eval_every=1000000",
            "algo.batch_size=64",
            "algo.net.actor_hidden=[32]",
            "algo.net.critic_hidden=[32]",
        ]
    )
    final = train(cfg)
    assert "eval/return" in final and (tmp_path / "checkpoint.pt").exists()


@pytest.mark.slow
def test_pql_learns_gymnasium_s_pendulum_with_its_copies_in_the_actor_s_subprocesses(make_config, capfd):
    """task=gym:Pendulum-v1 in process mode: the actor's Gymnasium copies run in subprocesses of
    its own (async), and every copy is closed before its process exits (else each prints a broken
    pipe's traceback). The bar is learning, not solving: a zero, uniform or full-torque policy's
    mean over ten episodes is -1,230 to -1,460, -1,099 at best in twenty tries. A run learns past
    -700 within three evaluations (6,000 steps; eight seeds and one CI run); -400, which most runs
    pass by 4,096 steps, took one seed 12,160, and the CI run did not reach it in 120 s."""
    cfg = make_config(
        [
            "task=gym:Pendulum-v1",
            "runtime.mode=process",
            "runtime.max_time_s=120",
            "runtime.eval_every=2000",
            "runtime.eval_max_share=1",
            "runtime.stop_at_return=-700",
            *OFF_POLICY,
        ]
    )
    final = train(cfg)
    assert final["eval/return"] >= -700, final
    err = capfd.readouterr().err
    assert "Traceback" not in err and "leaked" not in err, err[-3000:]


@pytest.mark.slow
def test_train_py_trains_a_gymnasium_robotics_env_and_resumes_it_with_new_episodes(tmp_path):
    """A goal env with Dict observations, through the command line; its envs cannot be saved, which
    the first checkpoint says, and a resume continues the counters with new episodes."""
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "train.py",
        NO_EXPORT,
        ONE_THREAD,
        "task=gym:PointMaze_UMaze-v3",
        "task.import_module=gymnasium_robotics",
        "task.num_envs=4",
        "task.eval_envs=2",
        "task.vectorization=sync",
        "task.kwargs.max_episode_steps=50",
        "runtime.mode=sequential",
        "runtime.eval_every=1000000",
        "algo.batch_size=64",
        "algo.net.actor_hidden=[32,32]",
        "algo.net.critic_hidden=[32,32]",
        "checkpoint=auto",
        f"hydra.run.dir={run_dir}",
    ]
    for steps in (400, 800):
        result = subprocess.run(
            [*command, f"runtime.max_env_steps={steps}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "TMPDIR": str(tmp_path)},  # each maze leaves an XML file in the temporary folder
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"pql: done: {steps:,} env steps" in result.stdout, result.stdout[-3000:]
    assert "checkpoints hold no envs: gym:PointMaze_UMaze-v3 cannot be checkpointed" in result.stdout
    assert "resuming from" in result.stdout


@pytest.mark.parametrize(
    "task, overrides",
    [
        ("gym:Pendulum-v1", ["task.vectorization=sync"]),
        ("examples.own_env:make_env", ["task.kwargs.arena=2.0"]),
        (RSL_RL_TASK, []),
    ],
)
def test_check_env_passes_each_form_of_task(capsys, task, overrides):
    assert check_env.main([task, *overrides, "--steps", "50"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "FAIL" not in out and "steps/s" in out, out
