"""IsaacGymEnvs tasks behind the batched-env protocol: `tasks.make("isaacgym/Ant", ...)`.

What an IsaacGymEnvs VecTask does (IsaacGymEnvs 1.5.1: tasks/base/vec_task.py, tasks/ant.py), and
what the adapter does about it:

- **Late reset.** `step` runs the physics, then the task's `post_physics_step`: progress_buf += 1,
  `reset_idx` of the envs whose reset_buf the *previous* step set, `compute_observations`,
  `compute_reward` (which sets reset_buf). An env whose episode ends at step t is reset only
  inside step t+1: that step's action is spent on the finished episode and its reward belongs to
  neither episode. The adapter resets the finished envs itself, right after the step that ended
  them and in the task's own order (`reset_idx`, then `compute_observations`), so that `obs` is
  the new episode's first observation, `info["final_obs"]` the last one of the old, and no
  transition spans two episodes. The task's next step finds their reset_buf cleared.
- **reset() returns zeros.** VecTask.reset only hands back obs_buf, all zeros before the first
  step (reset_buf starts at ones, so that first step resets every env). The adapter's reset()
  resets every env and computes their observations.
- **In-place buffers.** `step` returns rew_buf and reset_buf themselves, rewritten by the next
  step (obs is clamped into a new tensor each step); the adapter hands out copies, so a caller
  may keep what it gets (the actor's n-step window keeps n steps of rewards).
- `extras["time_outs"]` marks the envs whose episode hit the step limit: `truncated`; the rest
  of reset_buf is `terminated`.

Resetting from outside `step` is right only for tasks whose post_physics_step has the order
above: SUPPORTED_TASKS. The others reset in pre_physics_step (ShadowHand, AllegroHand,
Quadcopter, BallBalance, Ingenuity, Trifinger: they also clear controller state there) or
reward and reset before they observe (AnymalTerrain).

Isaac Gym Preview 4 supports Python 3.6-3.8 and pql needs Python >= 3.10, so this path cannot
run in one environment with pql; tests/test_isaacgym_adapter.py runs it against a fake VecTask
that reproduces the behaviour above.
"""

from __future__ import annotations

import os

import torch

from .base import ActionCheck, BatchedEnv, TaskError

# IsaacGymEnvs tasks whose post_physics_step is `progress_buf += 1; reset_idx(finished);
# compute_observations(); compute_reward()` (read in IsaacGymEnvs 1.5.1).
SUPPORTED_TASKS = ("Ant", "Anymal", "Cartpole", "FrankaCabinet", "FrankaCubeStack", "Humanoid")

INSTALL_HINT = (
    "Isaac Gym is not installed (Isaac Gym Preview 4 from NVIDIA: `pip install -e isaacgym/python`, "
    "then `pip install -e` a clone of IsaacGymEnvs); note that Isaac Gym Preview 4 supports "
    "Python 3.6-3.8 only and pql needs Python >= 3.10"
)

# IsaacGymEnvs gives every VecTask of a process one simulation (vec_task.py: _create_sim_once),
# so a second task would add envs to a simulation that is already running.
_task_in_this_process: str | None = None


class IsaacGymEnv(BatchedEnv):
    """The protocol over an IsaacGymEnvs VecTask `vec_task` of a task in SUPPORTED_TASKS,
    simulated and learned on one device; tensors [N, ...] on the task's rl_device."""

    def __init__(self, vec_task):
        self.vec_task = vec_task
        self.num_envs = vec_task.num_envs
        self.device = torch.device(vec_task.rl_device)
        self.obs_dim = vec_task.num_obs
        self.act_dim = vec_task.num_actions
        # A task times an episode out at progress_buf >= max_episode_length - 1 (VecTask's
        # timeout_buf), and progress_buf counts the steps since the adapter's reset.
        self.max_episode_steps = int(vec_task.max_episode_length) - 1
        self.clip_obs = float(vec_task.clip_obs)
        space = vec_task.action_space
        self.action_low = torch.as_tensor(space.low, dtype=torch.float32, device=self.device)
        self.action_high = torch.as_tensor(space.high, dtype=torch.float32, device=self.device)
        self._check_actions = ActionCheck(self.num_envs, self.act_dim, self.device)

    def reset(self) -> torch.Tensor:
        return self._reset_envs(torch.arange(self.num_envs, device=self.device))

    def step(self, actions: torch.Tensor):
        self._check_actions(actions)
        obs_dict, reward, reset_buf, extras = self.vec_task.step(actions)
        final_obs = obs_dict["obs"]  # a new tensor each step: VecTask clamps obs_buf into it
        reward = reward.to(torch.float32, copy=True)  # rew_buf itself, rewritten by the next step
        done = reset_buf != 0
        truncated = done & extras["time_outs"].bool()
        terminated = done & ~truncated
        # reset_idx takes env indices, so this reads the done flags on the host. The task's own
        # step has just done the same (post_physics_step: len(reset_buf.nonzero()) > 0).
        done_ids = done.nonzero().flatten()
        obs = final_obs
        if done_ids.numel():
            obs = torch.where(done[:, None], self._reset_envs(done_ids), final_obs)
        return obs, reward, terminated, truncated, {"final_obs": final_obs}

    def _reset_envs(self, env_ids: torch.Tensor) -> torch.Tensor:
        """Start new episodes in envs `env_ids` [K] int64. -> obs [N, obs_dim], new in those envs."""
        self.vec_task.reset_idx(env_ids)
        # Anymal's reset_idx sets reset_buf to 1 and relies on its compute_reward to overwrite it;
        # left set, the task's next step would reset these envs a second time.
        self.vec_task.reset_buf[env_ids] = 0
        self.vec_task.compute_observations()
        return torch.clamp(self.vec_task.obs_buf, -self.clip_obs, self.clip_obs).to(self.device, torch.float32)

    def close(self) -> None:
        if hasattr(self.vec_task, "close"):
            self.vec_task.close()


def _check_supported(task: str) -> None:
    if task not in SUPPORTED_TASKS:
        raise TaskError(
            f"task isaacgym/{task} is not supported; supported: "
            f"{', '.join('isaacgym/' + t for t in SUPPORTED_TASKS)} (see tasks/isaacgym.py)"
        )


def check_isaacgym_installed(task: str) -> None:
    """Raise TaskError (INSTALL_HINT) unless Isaac Gym and IsaacGymEnvs can be imported, and for
    a task outside SUPPORTED_TASKS; imports neither."""
    import importlib.util

    _check_supported(task)
    if any(importlib.util.find_spec(name) is None for name in ("isaacgym", "isaacgymenvs")):
        raise TaskError(f"task isaacgym/{task}: {INSTALL_HINT}")


def make_isaacgym_env(task: str, num_envs: int, device: torch.device, seed: int) -> IsaacGymEnv:
    """IsaacGymEnvs' task `task` (e.g. "Ant"), headless, simulated and learned on `device`.

    `seed` is passed on, but IsaacGymEnvs' make() does not use it: the tasks draw their reset
    noise from torch's global generator.
    Raises TaskError for a task outside SUPPORTED_TASKS, a second Isaac Gym task in this process,
    or an Isaac Gym that is missing or was imported after torch.
    """
    global _task_in_this_process
    _check_supported(task)
    if _task_in_this_process is not None:
        raise TaskError(
            f"task isaacgym/{task}: this process already simulates isaacgym/{_task_in_this_process} "
            "and Isaac Gym runs one simulation per process; training and evaluation envs need "
            "processes of their own: runtime.mode=process with algo pql, pql_d, sac or impala"
        )
    try:
        import isaacgym  # noqa: F401  (train.py imported it before torch; this finds it loaded)
        import isaacgymenvs
    except ImportError as err:
        missing = isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] in (
            "isaacgym",
            "isaacgymenvs",
        )
        why = (
            INSTALL_HINT
            if missing
            else (
                f"importing Isaac Gym failed: {' '.join(str(err).split())} (Isaac Gym must be imported before "
                "torch: train.py does so for task=isaacgym/<Task>, a script of your own must do the same)"
            )
        )
        raise TaskError(f"task isaacgym/{task}: {why}") from None
    config_dir = os.path.join(os.path.dirname(isaacgymenvs.__file__), "cfg")
    cfg = isaacgymenvs_config(config_dir, task, num_envs, device, seed)
    vec_task = isaacgymenvs.make(
        seed=seed,
        task=task,
        num_envs=num_envs,
        sim_device=str(device),
        rl_device=str(device),
        graphics_device_id=device.index or 0,
        headless=True,
        cfg=cfg,
    )
    _task_in_this_process = task
    return IsaacGymEnv(vec_task)


def isaacgymenvs_config(config_dir: str, task: str, num_envs: int, device: torch.device, seed: int):
    """IsaacGymEnvs' own composed config (its cfg/ in `config_dir`) for `task` on `device`: a DictConfig.

    isaacgymenvs.make(cfg=None) would compose it, but inside pql's @hydra.main it takes the task
    from the running app's choices (pql's "isaacgym") and clears the app's GlobalHydra. So the
    config is composed here, with pql's app set aside meanwhile and put back afterwards.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = [
        f"task={task}",
        f"num_envs={num_envs}",
        f"seed={seed}",
        f"sim_device={device}",
        f"rl_device={device}",
        f"pipeline={'gpu' if device.type == 'cuda' else 'cpu'}",
        "headless=True",
    ]
    app = GlobalHydra.instance().hydra
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            return compose("config", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()
        if app is not None:
            GlobalHydra.instance().initialize(app)
