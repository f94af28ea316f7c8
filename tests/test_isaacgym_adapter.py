"""The Isaac Gym path (adapter, config, train.py) against a fake VecTask: Isaac Gym cannot be installed here.

FakeVecTask reproduces what IsaacGymEnvs' VecTask and Ant do (IsaacGymEnvs 1.5.1, vec_task.py and
ant.py) in every respect the adapter depends on; `fake_isaacgym` writes an `isaacgym` and an
`isaacgymenvs` package around it that behave like the real ones at import and in make().
"""

import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest
import torch
from conftest import NO_EXPORT
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig

import tasks
import tasks.isaacgym
from pql.cli import expand_task_forms
from pql.config import ConfigError
from pql.replay.nstep import NStepWindow
from tasks import TaskError
from tasks.isaacgym import IsaacGymEnv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.dirname(os.path.abspath(__file__))


def fake_config(num_envs=3, episode_length=5, fall_after=(2, 0, 0), clip_obs=1000.0) -> dict:
    """The task config of FakeVecTask, in IsaacGymEnvs' layout. fall_after[i]: env i falls after
    that many steps of each episode (0: never; it times out instead)."""
    return {
        "name": "Ant",
        "env": {
            "numEnvs": num_envs,
            "episodeLength": episode_length,
            "clipObservations": clip_obs,
            "clipActions": 1.0,
            "fallAfter": list(fall_after),
        },
        "sim": {"use_gpu_pipeline": False},
    }


class FakeVecTask:
    """IsaacGymEnvs' VecTask with Ant's post_physics_step, its physics replaced by a counter.

    As in IsaacGymEnvs: obs_buf, rew_buf and reset_buf are written in place; reset_buf starts at
    ones; reset() returns clamp(obs_buf), zeros before the first step; step() is pre_physics_step,
    the simulation, post_physics_step (progress_buf += 1, reset_idx of the envs that reset_buf
    marked in the previous step, compute_observations, compute_reward), then timeout_buf,
    extras["time_outs"] and clamp(obs_buf), and returns the same obs_dict, rew_buf, reset_buf and
    extras objects every step.

    The "simulation": env i holds (episode id, steps since its reset, sum of its actions); every
    reset starts a new episode id (1, 2, ...). obs = [episode, steps, action sum, 1]; reward =
    100 * episode + steps. anymal=True: reset_idx sets reset_buf to 1 and compute_reward
    overwrites reset_buf, as IsaacGymEnvs' Anymal does.
    """

    num_actions = 2
    num_obs = 4

    def __init__(
        self,
        config,
        rl_device="cpu",
        sim_device="cpu",
        graphics_device_id=-1,
        headless=True,
        virtual_screen_capture=False,
        force_render=False,
        anymal=False,
    ):
        env = config["env"]
        self.cfg, self.anymal = config, anymal
        self.num_envs = env["numEnvs"]
        self.max_episode_length = env["episodeLength"]
        self.clip_obs, self.clip_actions = env["clipObservations"], env["clipActions"]
        self.device = sim_device if config["sim"]["use_gpu_pipeline"] else "cpu"
        self.rl_device = rl_device
        fall = torch.zeros(self.num_envs, dtype=torch.long)
        fall[: len(env["fallAfter"])] = torch.tensor(env["fallAfter"][: self.num_envs])
        self.fall_after = fall.to(self.device)
        self.action_space = types.SimpleNamespace(
            low=-np.ones(self.num_actions, np.float32), high=np.ones(self.num_actions, np.float32)
        )
        self.obs_buf = torch.zeros(self.num_envs, self.num_obs, device=self.device)
        self.rew_buf = torch.zeros(self.num_envs, device=self.device)
        self.reset_buf = torch.ones(self.num_envs, dtype=torch.long, device=self.device)
        self.timeout_buf = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.progress_buf = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.extras, self.obs_dict = {}, {}
        self.sim_state = torch.zeros(self.num_envs, 3, device=self.device)  # episode, steps, action sum
        self.episodes_started = 0
        self.closed = False

    def reset(self):
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)
        return self.obs_dict

    def step(self, actions):
        self.pre_physics_step(torch.clamp(actions, -self.clip_actions, self.clip_actions))
        self.sim_state[:, 1] += 1
        self.sim_state[:, 2] += self.actions.sum(dim=1)
        self.post_physics_step()
        self.timeout_buf = (self.progress_buf >= self.max_episode_length - 1) & (self.reset_buf != 0)
        self.extras["time_outs"] = self.timeout_buf.to(self.rl_device)
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)
        return self.obs_dict, self.rew_buf.to(self.rl_device), self.reset_buf.to(self.rl_device), self.extras

    def pre_physics_step(self, actions):
        self.actions = actions.clone().to(self.device)

    def post_physics_step(self):
        self.progress_buf += 1
        env_ids = self.reset_buf.nonzero(as_tuple=False).flatten()
        if len(env_ids) > 0:
            self.reset_idx(env_ids)
        self.compute_observations()
        self.compute_reward()

    def reset_idx(self, env_ids):
        self.sim_state[env_ids] = 0.0
        self.sim_state[env_ids, 0] = self.episodes_started + 1 + torch.arange(len(env_ids), device=self.device).float()
        self.episodes_started += len(env_ids)
        self.progress_buf[env_ids] = 0
        self.reset_buf[env_ids] = 1 if self.anymal else 0

    def compute_observations(self):
        self.obs_buf[:, :3] = self.sim_state
        self.obs_buf[:, 3] = 1.0

    def compute_reward(self):
        self.rew_buf[:] = 100 * self.sim_state[:, 0] + self.sim_state[:, 1]
        fell = (self.fall_after > 0) & (self.sim_state[:, 1] >= self.fall_after)
        timed_out = self.progress_buf >= self.max_episode_length - 1
        if self.anymal:
            self.reset_buf[:] = (fell | timed_out).long()
        else:
            reset = torch.where(fell, torch.ones_like(self.reset_buf), self.reset_buf)
            self.reset_buf[:] = torch.where(timed_out, torch.ones_like(self.reset_buf), reset)

    def close(self):
        self.closed = True


def test_fake_vec_task_resets_late_writes_in_place_and_starts_from_zeros():
    """The VecTask behaviour the adapter exists for, pinned on the fake."""
    vec_task = FakeVecTask(fake_config())
    assert torch.all(vec_task.reset()["obs"] == 0)
    obs_dict, reward, reset_buf, _ = vec_task.step(torch.zeros(3, 2))
    assert reward is vec_task.rew_buf and reset_buf is vec_task.reset_buf
    assert torch.equal(obs_dict["obs"][:, :2], torch.tensor([[1.0, 0], [2, 0], [3, 0]]))  # step 1 reset every env
    vec_task.step(torch.zeros(3, 2))
    obs_dict, reward2, reset_buf, _ = vec_task.step(torch.zeros(3, 2))
    assert reward2 is reward and reset_buf.tolist() == [1, 0, 0]  # env 0 fell: episode 1, step 2
    assert obs_dict["obs"][0, :2].tolist() == [1.0, 2.0]
    obs_dict, _, reset_buf, _ = vec_task.step(torch.ones(3, 2))
    assert obs_dict["obs"][0].tolist() == [4.0, 0.0, 0.0, 1.0]  # reset one step late, the action lost
    assert reset_buf.tolist() == [0, 0, 0]


def _run(env, steps, actions=None):
    """Step env from reset; -> [(obs before, action, obs, reward, terminated, truncated, final_obs)]."""
    obs = env.reset()
    out = []
    for t in range(steps):
        action = torch.full((env.num_envs, env.act_dim), 0.25 * (t % 3)) if actions is None else actions
        nxt, reward, terminated, truncated, info = env.step(action)
        out.append((obs, action, nxt, reward, terminated, truncated, info["final_obs"]))
        obs = nxt
    return out


@pytest.mark.parametrize("anymal", [False, True])
def test_episodes_follow_the_protocol(anymal):
    env = IsaacGymEnv(FakeVecTask(fake_config(num_envs=3, episode_length=5, fall_after=(2, 0, 3)), anymal=anymal))
    assert (env.num_envs, env.obs_dim, env.act_dim, env.max_episode_steps) == (3, 4, 2, 4)
    first = env.reset()
    assert torch.all(first[:, 1] == 0) and torch.all(first[:, 0] >= 1)  # real first observations, not zeros
    lengths, seen_episodes = {0: [], 1: [], 2: []}, set(first[:, 0].tolist())
    for obs, action, nxt, reward, terminated, truncated, final_obs in _run(env, 13):
        # One transition, one episode: the action moved the episode it was chosen in, one step on.
        assert torch.equal(final_obs[:, 0], obs[:, 0]) and torch.equal(final_obs[:, 1], obs[:, 1] + 1)
        assert torch.equal(final_obs[:, 2], obs[:, 2] + action.sum(dim=1))
        assert torch.equal(reward, 100 * final_obs[:, 0] + final_obs[:, 1])
        assert not (terminated & truncated).any()
        done = terminated | truncated
        assert torch.equal(nxt[~done], final_obs[~done])
        assert torch.all(nxt[done, 1] == 0) and not seen_episodes & set(nxt[done, 0].tolist())
        seen_episodes |= set(nxt[done, 0].tolist())
        for i in done.nonzero().flatten().tolist():
            lengths[i].append((int(final_obs[i, 1]), "terminated" if terminated[i] else "truncated"))
    assert lengths[0] == [(2, "terminated")] * 6
    assert lengths[1] == [(4, "truncated")] * 3
    assert lengths[2] == [(3, "terminated")] * 4


def test_kept_rewards_and_observations_stay_as_returned():
    env = IsaacGymEnv(FakeVecTask(fake_config()))
    steps = _run(env, 6)
    for *_, reward, _, _, final_obs in steps:
        assert torch.equal(reward, 100 * final_obs[:, 0] + final_obs[:, 1])
    # Rewards of consecutive steps differ; with rew_buf handed out they would all be the last one.
    assert len({tuple(s[3].tolist()) for s in steps}) == len(steps)


def test_nstep_window_folds_the_rewards_of_each_step():
    gamma = 0.5
    env = IsaacGymEnv(FakeVecTask(fake_config(num_envs=2, episode_length=50, fall_after=(0, 0))))
    window = NStepWindow(nstep=3, gamma=gamma)
    folded = []
    for obs, action, _, reward, terminated, truncated, final_obs in _run(env, 5):
        transition = window.push(obs, action, reward, terminated, truncated, final_obs)
        if transition is not None:
            folded.append(transition)
    assert len(folded) == 3
    for k, transition in enumerate(folded):
        # Episode e's reward at its step s is 100 e + s; the window's oldest step is step k + 1.
        episode = transition["obs"][:, 0]
        expected = sum(gamma**j * (100 * episode + k + 1 + j) for j in range(3))
        assert torch.allclose(transition["reward"], expected)


def test_actions_are_checked_and_close_reaches_the_task():
    vec_task = FakeVecTask(fake_config())
    env = IsaacGymEnv(vec_task)
    env.reset()
    with pytest.raises(TaskError, match="shape"):
        env.step(torch.zeros(3, 3))
    bad = torch.zeros(3, 2)
    bad[2, 0] = float("nan")
    with pytest.raises(TaskError, match=r"indices \[2\]"):
        env.step(bad)
    env.close()
    assert vec_task.closed


def test_the_adapter_cannot_be_checkpointed():
    """Isaac Gym's simulator state cannot be read back, so the adapter says so instead of saving part of it."""
    env = IsaacGymEnv(FakeVecTask(fake_config()))
    env.reset()
    with pytest.raises(TaskError, match="IsaacGymEnv cannot be checkpointed"):
        env.state_dict()
    with pytest.raises(TaskError, match="IsaacGymEnv cannot be checkpointed"):
        env.load_state_dict({})


FAKE_ISAACGYM = '''"""Stands in for Isaac Gym: refuses to load after torch, as isaacgym/gymdeps.py does."""
import os
import sys

with open(os.environ["FAKE_ISAACGYM_LOG"], "a") as log:
    log.write(f"{os.getpid()} torch_first={'torch' in sys.modules}\\n")
if "torch" in sys.modules:
    raise ImportError("PyTorch was imported before isaacgym modules.  Please import torch after isaacgym modules.")
'''

FAKE_ISAACGYMENVS = '''"""Stands in for IsaacGymEnvs: make() as in isaacgymenvs/__init__.py, the task a FakeVecTask."""
import hydra
from hydra import compose, initialize
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

OmegaConf.register_new_resolver("eq", lambda x, y: x.lower() == y.lower(), replace=True)  # replace: tests re-import
OmegaConf.register_new_resolver("resolve_default", lambda default, arg: default if arg == "" else arg, replace=True)


def make(seed, task, num_envs, sim_device, rl_device, graphics_device_id=-1, headless=False, multi_gpu=False,
         virtual_screen_capture=False, force_render=True, cfg=None):
    from test_isaacgym_adapter import FakeVecTask

    if cfg is None:
        if HydraConfig.initialized():
            task = HydraConfig.get().runtime.choices["task"]
            hydra.core.global_hydra.GlobalHydra.instance().clear()
        with initialize(config_path="./cfg"):
            cfg = compose(config_name="config", overrides=[f"task={task}"])
            cfg_dict = OmegaConf.to_container(cfg.task, resolve=True)
            cfg_dict["env"]["numEnvs"] = num_envs
    else:
        cfg_dict = OmegaConf.to_container(cfg.task, resolve=True)
    return FakeVecTask(cfg_dict, rl_device=rl_device, sim_device=sim_device, graphics_device_id=graphics_device_id,
                       headless=headless, virtual_screen_capture=virtual_screen_capture, force_render=force_render)
'''

FAKE_CONFIG = """task_name: ${task.name}
num_envs: ''
seed: 42
physics_engine: physx
pipeline: gpu
sim_device: cuda:0
rl_device: cuda:0
graphics_device_id: 0
headless: False
defaults:
  - task: Ant
  - _self_
"""

FAKE_ANT = """name: Ant
physics_engine: ${..physics_engine}
env:
  numEnvs: ${resolve_default:4096,${...num_envs}}
  episodeLength: 6
  clipObservations: 1000.0
  clipActions: 1.0
  fallAfter: [2, 0, 3]
sim:
  use_gpu_pipeline: ${eq:${...pipeline},"gpu"}
"""


@pytest.fixture
def fake_isaacgym(tmp_path, monkeypatch):
    """Fake isaacgym and isaacgymenvs packages in a directory; -> (that directory, import log)."""
    root = tmp_path / "fake_isaacgym"
    (root / "isaacgym").mkdir(parents=True)
    (root / "isaacgym" / "__init__.py").write_text(FAKE_ISAACGYM)
    (root / "isaacgymenvs" / "cfg" / "task").mkdir(parents=True)
    (root / "isaacgymenvs" / "__init__.py").write_text(FAKE_ISAACGYMENVS)
    (root / "isaacgymenvs" / "cfg" / "config.yaml").write_text(FAKE_CONFIG)
    (root / "isaacgymenvs" / "cfg" / "task" / "Ant.yaml").write_text(FAKE_ANT)
    log = tmp_path / "isaacgym_imports.log"
    log.touch()
    monkeypatch.setenv("FAKE_ISAACGYM_LOG", str(log))
    monkeypatch.setattr(tasks.isaacgym, "_task_in_this_process", None)
    yield root, log
    for name in ("isaacgym", "isaacgymenvs"):
        sys.modules.pop(name, None)


@pytest.fixture
def fake_isaacgym_loaded(fake_isaacgym, monkeypatch):
    """The fake packages importable in this process, isaacgym as if train.py had loaded it before torch."""
    monkeypatch.syspath_prepend(str(fake_isaacgym[0]))
    monkeypatch.setitem(sys.modules, "isaacgym", types.ModuleType("isaacgym"))
    return fake_isaacgym


def test_make_composes_isaacgymenvs_config_beside_a_running_hydra_app(fake_isaacgym_loaded):
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=os.path.join(ROOT, "cfg"), version_base=None):
            # As inside train.py's @hydra.main, where isaacgymenvs.make(cfg=None) would compose
            # IsaacGymEnvs' task "isaacgym" (pql's choice) and clear pql's GlobalHydra.
            app_cfg = compose("config", overrides=["task=isaacgym", "task.name=isaacgym/Ant"], return_hydra_config=True)
            HydraConfig.instance().set_config(app_cfg)
            env = tasks.make("isaacgym/Ant", 4, "cpu", seed=3)
            assert compose("config", overrides=["task=Hopper"]).task.name == "Hopper"  # pql's app still works
            assert HydraConfig.get().runtime.choices["task"] == "isaacgym"
    finally:
        HydraConfig.instance().cfg = None
        GlobalHydra.instance().clear()
    # num_envs and the CPU pipeline reached the task through IsaacGymEnvs' own interpolations.
    assert env.num_envs == 4 and env.vec_task.device == "cpu" and env.max_episode_steps == 5
    assert env.vec_task.fall_after.tolist() == [2, 0, 3, 0]
    assert env.reset().shape == (4, 4)


def test_one_isaacgym_task_per_process(fake_isaacgym_loaded):
    tasks.make("isaacgym/Ant", 2, "cpu")
    with pytest.raises(TaskError, match="one simulation per process.*runtime.mode=process"):
        tasks.make("isaacgym/Ant", 2, "cpu")


def test_unsupported_task_names_the_supported_ones():
    with pytest.raises(TaskError, match="isaacgym/ShadowHand is not supported; supported: isaacgym/Ant, "):
        tasks.make("isaacgym/ShadowHand", 2, "cpu")


def test_isaacgym_imported_after_torch_says_so(fake_isaacgym, monkeypatch):
    monkeypatch.syspath_prepend(str(fake_isaacgym[0]))
    with pytest.raises(TaskError, match="PyTorch was imported before isaacgym modules.*before torch") as err:
        tasks.make("isaacgym/Ant", 2, "cpu")
    assert "\n" not in str(err.value)


def test_cli_writes_isaacgym_tasks_as_the_group_option_and_name():
    assert expand_task_forms(["task=isaacgym/Ant", "algo=sac"]) == [
        "task=isaacgym",
        "task.name=isaacgym/Ant",
        "algo=sac",
    ]
    assert expand_task_forms(["-m", "task=isaacgym/Ant,isaacgym/Humanoid"]) == [
        "-m",
        "task=isaacgym",
        "task.name=isaacgym/Ant,isaacgym/Humanoid",
    ]
    assert expand_task_forms(["task=Ant", "task.num_envs=8"]) == ["task=Ant", "task.num_envs=8"]
    with pytest.raises(ConfigError, match="task='Ant,isaacgym/Humanoid'"):
        expand_task_forms(["task=Ant,isaacgym/Humanoid"])


def test_train_py_without_isaacgym_exits_2_with_one_line(tmp_path):
    try:
        import isaacgym  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("Isaac Gym is installed here")
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "train.py", "task=isaacgym/Ant", f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pql: task isaacgym/Ant: Isaac Gym is not installed"), proc.stderr
    assert "Python 3.6-3.8" in lines[0]
    assert not run_dir.exists()  # refused before Hydra made it


@pytest.mark.slow
def test_train_py_runs_an_isaacgym_task_in_process_mode(fake_isaacgym, tmp_path):
    """Every process of the run (main and the spawned roles) loads isaacgym before torch."""
    root, log = fake_isaacgym
    paths = [str(root), TESTS, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    cmd = [
        sys.executable,
        "train.py",
        NO_EXPORT,
        "task=isaacgym/Ant",
        "task.num_envs=4",
        "task.eval_envs=2",
        "runtime.mode=process",
        "runtime.device=cpu",
        "runtime.max_env_steps=400",
        "runtime.eval_every=200",
        "algo.batch_size=32",
        "algo.warmup_steps=4",
        "algo.net.actor_hidden=[16]",
        "algo.net.critic_hidden=[16]",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "pql: done" in proc.stdout
    roles = re.search(r"roles started: (.*)", proc.stdout).group(1)  # "actor=PID v_learner=PID ..."
    imports = dict(line.split() for line in log.read_text().splitlines())
    role_pids = set(re.findall(r"=(\d+)", roles))
    assert role_pids < set(imports) and len(imports) == len(role_pids) + 1, (roles, imports)  # + the main process
    assert set(imports.values()) == {"torch_first=False"}, imports
