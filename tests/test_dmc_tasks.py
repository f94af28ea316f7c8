"""dmc/ tasks as a user meets them: naming them, repeating actions, saving and restoring their
envs, and a short training run from the command line."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import NO_EXPORT, ONE_THREAD

import tasks
from pql.cli import expand_task_forms
from pql.config import ConfigError
from tasks import DMC_TASK_NAMES, TaskError
from tasks.dmc import DMC_TASKS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_command_line_form_is_the_dmc_option_and_the_name():
    assert expand_task_forms(["task=dmc/cheetah-run", "runtime.seed=1"]) == [
        "task=dmc",
        "task.name=dmc/cheetah-run",
        "runtime.seed=1",
    ]
    assert expand_task_forms(["task=dmc/cheetah-run,dmc/walker-run"])[1] == "task.name=dmc/cheetah-run,dmc/walker-run"


def test_unknown_names_and_misplaced_action_repeat_are_refused(make_config):
    with pytest.raises(ConfigError, match="dmc/cheetah-run"):
        make_config(["task=dmc", "task.name=dmc/cheetah-walk"])
    with pytest.raises(ConfigError, match="task.action_repeat"):
        make_config(["task=Ant", "task.action_repeat=2"])
    with pytest.raises(ConfigError, match="task.action_repeat"):
        make_config(["task=dmc", "task.action_repeat=0"])
    with pytest.raises(TaskError, match="known: dmc/"):
        tasks.make("dmc/cheetah-walk", 1)
    with pytest.raises(TaskError, match="action_repeat"):
        tasks.make("Ant", 1, action_repeat=2)


def test_a_dm_control_older_than_mujoco_4s_is_refused_beside_it(monkeypatch):
    """dm-control up to 1.0.50 reads MjModel fields that MuJoCo 4 dropped: a pip that kept such a
    pin beside MuJoCo 4 gets one line naming both versions, not an AttributeError inside the suite."""
    from tasks.dmc import suite

    real = suite.importlib.metadata.version
    older = lambda name: "1.0.50" if name == "dm-control" else real(name)
    monkeypatch.setattr(suite.importlib.metadata, "version", older)
    monkeypatch.setattr(suite.mujoco, "__version__", "4.0.1")
    suite._import_suite.cache_clear()  # the check runs with the suite's first import in a process
    with pytest.raises(TaskError, match=r"dm-control 1\.0\.50 does not run on MuJoCo 4\.0\.1.*>= 1\.0\.52"):
        tasks.make("dmc/cartpole-balance", 2, "cpu", backend="mujoco")
    monkeypatch.setattr(suite.mujoco, "__version__", "3.11.0")  # where 1.0.44 to 1.0.50 belong
    assert tasks.make("dmc/cartpole-balance", 2, "cpu", backend="mujoco").num_envs == 2


def test_every_suite_task_of_the_issue_is_there():
    benchmarking = {f"dmc/{domain}-{task}" for domain, task in _suite_benchmarking()}
    extra = {f"dmc/quadruped-{t}" for t in ("walk", "run")} | {f"dmc/dog-{t}" for t in ("stand", "walk", "trot", "run")}
    assert benchmarking | extra == set(DMC_TASK_NAMES)


def _suite_benchmarking():
    from tasks.dmc.suite import _import_suite

    return _import_suite().BENCHMARKING


def test_action_repeat_applies_each_action_for_that_many_steps_and_sums_rewards():
    once = tasks.make("dmc/cheetah-run", 2, seed=3, backend="mujoco")
    twice = tasks.make("dmc/cheetah-run", 2, seed=3, backend="mujoco", action_repeat=2)
    assert (once.max_episode_steps, twice.max_episode_steps) == (1000, 500)
    torch.testing.assert_close(once.reset(), twice.reset())
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        action = torch.rand(2, once.act_dim, generator=generator) * 2 - 1
        _, r1, *_ = once.step(action)
        obs_once, r2, *_ = once.step(action)
        obs_twice, reward, *_ = twice.step(action)
        torch.testing.assert_close(obs_twice, obs_once, rtol=0, atol=0)
        torch.testing.assert_close(reward, r1 + r2)


def test_episodes_truncate_at_the_time_limit_and_restart_at_new_random_starts():
    env = tasks.make("dmc/cheetah-run", 2, seed=0, backend="mujoco", action_repeat=4)
    first = env.reset()
    action = torch.zeros(2, env.act_dim)
    for step in range(1, 251):
        obs, _, terminated, truncated, info = env.step(action)
        assert not terminated.any()
        assert truncated.all() == (step == 250)
    assert not torch.equal(obs, info["final_obs"])  # restarted inside step
    assert not torch.equal(obs, first)  # a start of its own, not the first one again
    assert not torch.equal(obs[0], obs[1])


@pytest.mark.parametrize("backend", ["mujoco", "mjwarp"])
def test_a_saved_env_continues_to_the_bit_across_a_restart(backend):
    """Saved mid-episode, a restored env gives the saved one's steps, its next random starts and
    its targets (reacher's, kept per env) included."""

    def steps(env, n):
        generator = torch.Generator().manual_seed(1)
        out = []
        for _ in range(n):
            obs, reward, _, truncated, _ = env.step(torch.rand(3, env.act_dim, generator=generator) * 2 - 1)
            out.append((obs, reward, truncated))
        return out

    env = tasks.make("dmc/reacher-hard", 3, seed=5, backend=backend, action_repeat=50)
    steps(env, 12)
    state = env.state_dict()
    expected = steps(env, 16)  # past the restart at 20 steps
    restored = tasks.make("dmc/reacher-hard", 3, seed=5, backend=backend, action_repeat=50)
    restored.load_state_dict(state)
    for (obs, reward, truncated), (obs2, reward2, truncated2) in zip(expected, steps(restored, 16)):
        assert torch.equal(obs, obs2) and torch.equal(reward, reward2) and torch.equal(truncated, truncated2)
    assert any(t.any() for _, _, t in expected)


def test_train_py_runs_a_suite_task_into_a_run_directory_named_after_it(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "train.py"),
            NO_EXPORT,
            ONE_THREAD,
            "task=dmc/cartpole-balance",
            "task.num_envs=4",
            "task.eval_envs=1",
            "task.action_repeat=8",
            "algo.batch_size=64",
            "algo.net.actor_hidden=[32,32]",
            "algo.net.critic_hidden=[32,32]",
            "runtime.mode=sequential",
            "runtime.device=cpu",
            "runtime.max_env_steps=160",
            "algo.warmup_steps=8",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run_dir,) = os.listdir(tmp_path / "runs")
    assert run_dir.endswith("_dmc-cartpole-balance_pql"), run_dir
    assert "eval return" in proc.stdout


@pytest.mark.parametrize("name", DMC_TASK_NAMES)
def test_buffer_sizes_hold_what_mujoco_c_needs(name):
    """A task's nconmax and njmax hold the contacts and constraint rows of dm_control's own
    environment (MuJoCo C) from its random starts under bang-bang actions, with room to spare."""
    task_cls = DMC_TASKS[name]
    env = task_cls.load_suite()
    spec = env.action_spec()
    rng = np.random.default_rng(0)
    most_contacts = most_rows = 0
    for episode in range(2):
        env.task._random = np.random.RandomState(episode)
        env.reset()
        for step in range(100):
            if step % 10 == 0:  # held for a while: large motions and falls
                action = np.where(rng.random(spec.shape) < 0.5, spec.minimum, spec.maximum)
            env.step(action)
            data = env.physics.data
            most_contacts, most_rows = max(most_contacts, data.ncon), max(most_rows, data.nefc)
    assert most_contacts * 1.5 <= task_cls.nconmax and most_rows * 1.5 <= task_cls.njmax
