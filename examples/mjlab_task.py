"""Any mjlab task as a pql task, made as mjlab's own train script makes it:

    python train.py task=examples.mjlab_task:make task.kwargs.task=Mjlab-Cartpole-Balance

`make` loads the task's config by its id (`mjlab.tasks.registry.load_env_cfg`), sizes and seeds it,
builds `ManagerBasedRlEnv` on the device pql asks for (Warp's CPU device for "cpu") and wraps it
in `mjlab.rl.RslRlVecEnvWrapper`, the rsl_rl VecEnv that pql's adapter (tasks/rsl_rl_env.py)
reads: the policy sees the "actor" group, `extras["time_outs"]` marks the step limit.

The one change to mjlab's path, with `final_obs=True` (the default): mjlab resets a finished env
inside `step` and returns the new episode's first observation, the last one lost. Made with
`auto_reset=False`, its `step` returns the observation that ended each episode instead, and
`FinalObsVecEnv.step` then resets those envs by id (`reset(env_ids=...)`, mjlab's reset path: the
same events and command timers as its auto-reset) and hands the ended episodes' observations on
as `extras["final_obs"]`, Isaac Lab's key, which the adapter bootstraps truncated episodes from.
`final_obs=False` keeps mjlab's auto-reset: pql then bootstraps from the observation one step
before the cut, as rsl_rl's PPO does.

mjlab is not a requirement of pql: `pip install torch==2.13.0 mjlab==1.6.0 -e .` installs both
(docs/own_env.md, "mjlab").
"""

import torch
from mjlab.envs import ManagerBasedRlEnv
from mjlab.rl import RslRlVecEnvWrapper
from mjlab.tasks.registry import list_tasks, load_env_cfg
from tensordict import TensorDict


class FinalObsVecEnv(RslRlVecEnvWrapper):
    """mjlab's rsl_rl wrapper over an env made with auto_reset=False: finished envs are reset here,
    after their last observation is kept as extras["final_obs"] (module docstring)."""

    def step(self, actions: torch.Tensor):
        obs, reward, dones, extras = super().step(actions)
        extras = dict(extras)  # the env's own dict, which it keeps from step to step
        finished = dones.nonzero().flatten()  # a host read, as mjlab's own step makes for its resets
        if len(finished):
            extras["final_obs"] = obs.clone()
            new_obs, _ = self.unwrapped.reset(env_ids=finished)
            obs = TensorDict(new_obs, batch_size=[self.num_envs])
        return obs, reward, dones, extras


def make(num_envs: int, device: str, seed: int, task: str = "Mjlab-Cartpole-Balance", final_obs: bool = True):
    """`num_envs` envs of mjlab task `task` (an id of `mjlab.tasks.registry.list_tasks()`) on `device`."""
    if task not in list_tasks():
        raise ValueError(f"unknown mjlab task {task!r}; mjlab has {', '.join(sorted(list_tasks()))}")
    cfg = load_env_cfg(task)
    cfg.scene.num_envs = num_envs
    cfg.seed = seed
    cfg.auto_reset = not final_obs
    env = ManagerBasedRlEnv(cfg=cfg, device=device)
    return FinalObsVecEnv(env) if final_obs else RslRlVecEnvWrapper(env)
