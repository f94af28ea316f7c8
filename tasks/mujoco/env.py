"""The batched env over a task and a physics backend: stepping, auto-reset, time limit, checks.

Everything here is batched torch over all envs; resets are masked rather than indexed so that the
GPU path never reads a tensor back to the host.
"""

from __future__ import annotations

import mujoco
import numpy as np
import torch

from ..base import ActionCheck, BatchedEnv, TaskError, check_state_fits
from .task import Task


class MujocoEnv(BatchedEnv):
    """`num_envs` copies of `task_cls` on `physics_cls` (MujocoPhysics or MjwarpPhysics).

    Tensors are [N, ...] on `device`; see tasks.base for the protocol. `model` replaces the task's
    own MJCF model (the parity tests pass one with edited solver options). `action_repeat` > 1
    applies each action for that many of the task's steps, sums their rewards and counts the
    time limit in the steps taken (ceil(limit / action_repeat)); only a task that cannot
    terminate takes it.
    """

    def __init__(
        self,
        task_cls: type[Task],
        num_envs: int,
        device: torch.device,
        seed: int,
        physics_cls,
        model: mujoco.MjModel | None = None,
        action_repeat: int = 1,
    ):
        model = model or task_cls.load_model()
        self.task = task_cls(model, physics_cls.dtype, device)
        if action_repeat != 1 and (self.task.can_terminate or action_repeat < 1):
            raise TaskError(
                f"action_repeat must be 1 for {self.task.name}, got {action_repeat}: only tasks whose episodes "
                f"cannot terminate (the DeepMind Control Suite's) repeat actions"
                if action_repeat > 1
                else f"action_repeat must be an integer >= 1, got {action_repeat}"
            )
        self.action_repeat = action_repeat
        self.dt = self.task.dt * action_repeat
        self.task.start(num_envs, seed)
        self.physics = physics_cls(model, num_envs, device, self.task, seed)
        self.episode_metrics = self.task.episode_metrics
        self.mirror = self.task.mirror
        self.interface = self.task.interface(model)
        self._model = model
        self._scene: Scene | None = None  # made at the first render
        self.num_envs = num_envs
        self.device = device
        self._seed = seed
        self.obs_dim = self.task.obs_dim
        self.max_episode_steps = -(-self.task.max_episode_steps // action_repeat)
        low, high = self.task.action_range(model)
        self.act_dim = int(low.shape[0])  # the task's actions, which `control` maps onto the model.nu controls
        self.action_low, self.action_high = low.to(device, torch.float32), high.to(device, torch.float32)
        self._check_actions = ActionCheck(num_envs, self.act_dim, device)
        self._elapsed = torch.zeros(num_envs, dtype=torch.int64, device=device)
        self._position = None  # the task's tracked position before the step, [N, k]
        self.reset()

    def reset(self) -> torch.Tensor:
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        return self._restart(everyone, torch.empty(self.num_envs, self.obs_dim, device=self.device))

    def step(self, actions: torch.Tensor):
        self._check_actions(actions)
        reward: torch.Tensor | None = None
        for _ in range(self.action_repeat):
            self.physics.step(self.task.control(actions, self.physics.state), self.task.frame_skip)
            state = self.physics.state
            position = self.task.position(state)
            velocity = None
            if position is not None:
                velocity = (position - self._position) / self.task.dt
                self._position = position.clone()
            step_reward, terminated, terms = self.task.reward_and_termination(state, velocity, actions)
            reward = step_reward if reward is None else reward + step_reward
        obs = self.task.observe(state).float()  # after: a goal reached there is replaced by the next
        if velocity is not None:
            terms.update(zip(("x_velocity", "y_velocity"), velocity.unbind(1)))
        # One stacked copy (one kernel, not one per entry): an entry may be a view of the physics
        # state, which the restart below overwrites.
        info = dict(zip(terms, torch.stack(list(terms.values())).to(torch.float32).unbind())) if terms else {}
        self._elapsed += 1
        truncated = (self._elapsed >= self.max_episode_steps) & ~terminated
        info["final_obs"] = obs
        obs_after_reset = self._restart(terminated | truncated, obs)
        assert reward is not None
        return obs_after_reset, reward.float(), terminated, truncated, info

    def reset_to(
        self, qpos: torch.Tensor, qvel: torch.Tensor, mask: torch.Tensor | None = None, act: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Start new episodes at given states (fixed evaluation starts; parity tests against Gymnasium
        and dm_control).

        qpos [N, nq], qvel [N, nv] on `device`; mask [N] bool picks the envs (default: all), the
        others keep their episode; act [N, na] the actuators' activations (default: the reset's
        zeros). Returns obs [N, obs_dim] float32.
        """
        if mask is None:
            mask = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        dtype = self.physics.dtype
        given = (qpos, qvel) if act is None else (qpos, qvel, act)
        return self._restart(mask, self._last_obs, tuple(t.to(self.device, dtype) for t in given))

    def state_dict(self) -> dict:
        """The state of every env, copies on the CPU:

        "task", "backend" (str), "num_envs", "seed" (int) and "layout" ({"nq", "nv", ...}: int) say
        what it is of; "physics" is the backend's (its integration state, the reset noise's counters
        and the task's derived fields); "elapsed" [N] int64 the steps of each episode so far;
        "last_obs" [N, obs_dim] float32; "position" [N, k] the task's tracked position (tasks with one);
        "task_state" what the task keeps per env (tasks that keep any: Task.state_dict).
        """
        state = {
            "task": self.task.name,
            "backend": self.physics.backend,
            "num_envs": self.num_envs,
            "seed": self._seed,
            "layout": dict(self.physics.layout),
            "physics": self.physics.state_dict(),
            "elapsed": self._elapsed.to("cpu", copy=True),
            "last_obs": self._last_obs.to("cpu", copy=True),
        }
        if self._position is not None:
            state["position"] = self._position.to("cpu", copy=True)
        task_state = self.task.state_dict()
        if task_state:
            state["task_state"] = task_state
        return state

    def load_state_dict(self, state: dict) -> None:
        """Continue the episodes of `state` (from `state_dict`): the next steps give what the saved
        env's would, to the bit. Raises TaskError (a ValueError), before changing anything, if the
        state is of another task, backend, env count, seed or layout."""
        check_state_fits(state, self.state_dict())
        self.physics.load_state_dict(state["physics"])
        self._elapsed.copy_(state["elapsed"])
        self._last_obs = state["last_obs"].to(self.device, copy=True)
        if self._position is not None:
            self._position = state["position"].to(self.device, copy=True)
        if "task_state" in state:
            self.task.load_state_dict(state["task_state"])

    def _restart(self, mask: torch.Tensor, obs: torch.Tensor, initial=None) -> torch.Tensor:
        """Start new episodes where mask [N] is true, at `initial` (qpos, qvel[, act]) or at random
        (the task's draw_starts, or the physics' Task.add_reset_noise, drawn only for those envs);
        obs [N, obs_dim] is kept elsewhere."""
        if initial is None:
            initial = self.task.draw_starts(mask)
        self.physics.reset(mask, initial)
        state = self.physics.state
        self.task.restart(mask, state)
        fresh = self.task.observe(state).float()
        position = self.task.position(state)
        if position is not None:
            self._position = (
                position.clone() if self._position is None else torch.where(mask[:, None], position, self._position)
            )
        self._elapsed.masked_fill_(mask, 0)
        self._last_obs = torch.where(mask[:, None], fresh, obs)
        return self._last_obs

    def render(self, index: int = 0) -> np.ndarray:
        """Env `index`'s bodies where its joints put them (both backends: the positions are set into
        a data of the renderer's own), seen by the camera Scene picks."""
        if self._scene is None:
            self._scene = Scene(self._model)
        return self._scene.render(self.physics.state["qpos"][index].cpu().numpy())

    def close(self) -> None:
        if self._scene is not None:
            self._scene.close()
        self.physics.close()


class Scene:
    """Images of a model at given joint positions, RGB [height, width, 3] uint8, from MuJoCo's
    renderer (headless with MUJOCO_GL=egl or osmesa). A model whose first joint moves its root
    (a walker's free or sliding joint) is followed by a tracking camera; any other is seen whole
    from MuJoCo's default free camera."""

    def __init__(self, model: mujoco.MjModel, height: int = 240, width: int = 320):
        self.model, self.data = model, mujoco.MjData(model)
        try:
            self.renderer = mujoco.Renderer(model, height, width)
        except Exception as e:  # no OpenGL: MuJoCo names the backend it tried
            raise TaskError(
                f"MuJoCo cannot render ({type(e).__name__}: {e}); without a display, set MUJOCO_GL=egl "
                "(or osmesa) before starting Python"
            ) from e
        # Without shadows and reflections Mesa's software OpenGL (EGL on a machine without a GPU)
        # draws a frame four times as fast: Anymal at 320x240 on 2 cores, 164 ms -> 40 ms.
        self.renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
        self.renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
        self.camera = mujoco.MjvCamera()
        mujoco.mjv_defaultFreeCamera(model, self.camera)
        walks = model.njnt > 0 and int(model.jnt_type[0]) in (
            int(mujoco.mjtJoint.mjJNT_FREE),
            int(mujoco.mjtJoint.mjJNT_SLIDE),
        )
        if walks:  # followed from 2 m beyond twice its reach: the floor would put a free camera far away
            root = int(model.jnt_bodyid[0])
            mujoco.mj_forward(model, self.data)
            body = model.body_rootid == model.body_rootid[root]
            reach = float(np.linalg.norm(self.data.xpos[body] - self.data.xpos[root], axis=1).max())
            self.camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
            self.camera.trackbodyid = root
            self.camera.distance = 2.0 + 2.0 * reach
            self.camera.elevation = -20.0

    def render(self, qpos: np.ndarray) -> np.ndarray:
        self.data.qpos[:] = qpos
        mujoco.mj_forward(self.model, self.data)
        self.renderer.update_scene(self.data, self.camera)
        return self.renderer.render()

    def close(self) -> None:
        self.renderer.close()
