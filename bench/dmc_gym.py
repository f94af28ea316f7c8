"""dm_control's own environment of a dmc/ task as a Gymnasium env, for peers that take one
(bench/sb3_sac.py): observations flattened in the task's key order (pql's layout), float32;
actions in dm_control's box; `action_repeat` control steps per step, their rewards summed;
truncated at dm_control's time limit, never terminated. A thin wrapper with no shimmy in between.
"""

from __future__ import annotations

import os
import sys

import gymnasium as gym
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tasks.dmc import DMC_TASKS


class DmcGymEnv(gym.Env):
    def __init__(self, task: str, action_repeat: int = 1):
        if task not in DMC_TASKS:
            raise ValueError(f"unknown dmc task {task!r}; known: {', '.join(DMC_TASKS)}")
        if action_repeat < 1:
            raise ValueError(f"action_repeat must be >= 1, got {action_repeat}")
        self._env = DMC_TASKS[task].load_suite()
        self._repeat = action_repeat
        spec = self._env.action_spec()
        self.action_space = gym.spaces.Box(spec.minimum.astype(np.float32), spec.maximum.astype(np.float32))
        size = sum(int(np.prod(s.shape)) for s in self._env.observation_spec().values())
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    @staticmethod
    def _flat(observation) -> np.ndarray:
        return np.concatenate([np.asarray(v, dtype=np.float32).ravel() for v in observation.values()])

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        # dm_control's Task takes its RandomState at construction only: reseeded from Gymnasium's.
        self._env.task._random = np.random.RandomState(self.np_random.integers(2**31))
        return self._flat(self._env.reset().observation), {}

    def step(self, action):
        reward = 0.0
        for _ in range(self._repeat):
            step = self._env.step(action)
            reward += step.reward
            if step.last():
                break
        return self._flat(step.observation), reward, False, step.last(), {}
