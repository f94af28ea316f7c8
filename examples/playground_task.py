"""Any MuJoCo Playground task as a pql task, made as Playground's own training scripts make it:

    python train.py task=examples.playground_task:make task.kwargs.task=CartpoleBalance

`make` loads the task by its id (`mujoco_playground.registry`) with its default config, its
episode length and action repeat from Playground's PPO settings for the task, and, when asked,
the domain randomisation its training scripts apply (`domain_randomization=True`). It returns
`PlaygroundVecEnv`, an env with rsl_rl's VecEnv interface that pql's adapter
(tasks/rsl_rl_env.py) reads with no settings: the observation groups keep Playground's names,
"state" for the policy and "privileged_state" for the critic where the task has one.

What it does that Playground's own torch wrapper (`wrapper_torch.RSLRLBraxWrapper`) does not:
- **True final observations.** Playground's auto-reset (`BraxAutoResetWrapper`) overwrites a
  finished env's observation with its next episode's first one inside the jitted step. A wrapper
  placed under it (`KeepFinalObs`) keeps the observation that ended the episode in the state's
  info, and `step` hands it on as `extras["final_obs"]`, so that a truncated episode bootstraps
  from where it was cut.
- **No host round trip.** Observations, rewards and flags pass from JAX to torch and actions from
  torch to JAX by DLPack on the env's device (CPU or GPU), one jitted call a step, no per-step
  metric read to the host.
- **Any device.** "cpu" runs on JAX's CPU backend; "cuda:N" on JAX's N-th GPU, which needs a
  CUDA build of JAX (`pip install "jax[cuda13]"`, docs/own_env.md). JAX and torch then share
  the GPU: JAX allocates on demand instead of taking 75% of the GPU's memory at its first
  operation (`XLA_PYTHON_CLIENT_PREALLOCATE=false`, set here unless the environment sets it).
- **New start states on reset.** `reset()` draws new start states; between resets, a finished
  env restarts from its episode's first state, as Playground's auto-reset does.

Playground is not a requirement of pql: `pip install torch==2.13.0 -e ".[playground]"` installs
both (Python 3.11 or newer). Its locomotion and manipulation tasks download MuJoCo Menagerie
(git, network) at their first use; the DeepMind Control Suite tasks ship in the package.
"""

import os

# Read when JAX's backend starts, at its first operation: set before that; a user's setting wins.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with torch

import jax
import jax.numpy as jnp
import torch
from brax.envs.wrappers import training as brax_training
from mujoco_playground import registry, wrapper
from mujoco_playground.config import dm_control_suite_params, locomotion_params, manipulation_params

# Settings of JAX's own, unless the user's environment gives them (JAX reads them at its import).
if "JAX_DEFAULT_MATMUL_PRECISION" not in os.environ:
    # Playground's README: TF32 matmuls on GPUs make its tasks' physics unstable.
    jax.config.update("jax_default_matmul_precision", "highest")
if jax.config.jax_compilation_cache_dir is None:
    # Compiling an env's reset and step takes 20-25 s on 2 cores, for each env count; compiled
    # once, they load from this cache in later runs and in the other processes of the same run.
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser("~/.cache/pql/jax"))

FINAL_OBS = "final_obs"  # the info key KeepFinalObs writes


class KeepFinalObs(wrapper.Wrapper):
    """Keeps each step's observation in info[FINAL_OBS] before the auto-reset above it replaces
    a finished env's observation. Set in reset too: a jitted state keeps one structure."""

    def reset(self, rng):
        state = self.env.reset(rng)
        state.info[FINAL_OBS] = state.obs
        return state

    def step(self, state, action):
        state = self.env.step(state, action)
        state.info[FINAL_OBS] = state.obs
        return state


def jax_device(device: str) -> jax.Device:
    """JAX's device for pql's `device` ("cpu", "cuda", "cuda:N")."""
    where = torch.device(device)
    if where.type == "cpu":
        return jax.devices("cpu")[0]
    if where.type != "cuda":
        raise ValueError(f"Playground's envs run on a CPU or a CUDA GPU, not {device!r}")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        raise ValueError(
            f"device {device!r}: this JAX has no GPU backend; install a CUDA build of JAX beside torch's "
            '(pip install "jax[cuda13]", docs/own_env.md) or train on device=cpu'
        ) from None
    index = where.index or 0
    if index >= len(gpus):
        raise ValueError(f"device {device!r}: JAX sees {len(gpus)} GPU(s)")
    return gpus[index]


def groups(obs) -> dict[str, torch.Tensor]:
    """Playground's observations as named groups of torch tensors sharing JAX's memory: a dict's
    own keys ("state", "privileged_state"), or "state" for a task with one array."""
    if isinstance(obs, dict):
        return {name: torch.from_dlpack(value) for name, value in obs.items()}
    return {"state": torch.from_dlpack(obs)}


class PlaygroundVecEnv:
    """`num_envs` copies of Playground env `env` behind rsl_rl's VecEnv interface (module docstring).

    Each step is one jitted call of Playground's training wrappers (vmap, or the domain
    randomisation's vmap over per-env models; episodes of `episode_length` physics steps with
    `action_repeat`; KeepFinalObs; auto-reset) that returns only what pql reads."""

    def __init__(
        self, env, num_envs: int, device: str, seed: int, episode_length: int, action_repeat: int, randomizer=None
    ):
        self.num_envs, self.num_actions, self.device = num_envs, env.action_size, torch.device(device)
        self.max_episode_length = -(-episode_length // action_repeat)  # pql's steps: one per action
        self._jax_device = jax_device(device)
        with jax.default_device(self._jax_device):
            self._key, randomize = jax.random.split(jax.device_put(jax.random.PRNGKey(seed), self._jax_device))
            if randomizer is None:
                batched = brax_training.VmapWrapper(env)
            else:
                models = jax.random.split(randomize, num_envs)
                batched = wrapper.BraxDomainRandomizationVmapWrapper(env, lambda model: randomizer(model, models))
            episodes = brax_training.EpisodeWrapper(batched, episode_length, action_repeat)
            self._env = wrapper.BraxAutoResetWrapper(KeepFinalObs(episodes))
        self._reset = jax.jit(self._env.reset)
        self._obs = self.reset()
        self._step = jax.jit(self._step_outputs)
        # Compiled now, by a step whose result is dropped, not at the first step: an evaluation
        # env would otherwise compile inside pql's first evaluation.
        self._step(self._state, jax.dlpack.from_dlpack(torch.zeros(num_envs, self.num_actions, device=self.device)))

    def _step_outputs(self, state, actions):
        state = self._env.step(state, jnp.clip(actions, -1.0, 1.0))
        return state, (state.obs, state.reward, state.done, state.info["truncation"], state.info[FINAL_OBS])

    def reset(self) -> dict[str, torch.Tensor]:
        """New start states for every env."""
        self._key, key = jax.random.split(self._key)
        self._state = self._reset(jax.random.split(key, self.num_envs))
        self._obs = groups(self._state.obs)
        return self._obs

    def get_observations(self) -> dict[str, torch.Tensor]:
        return self._obs

    def step(self, actions: torch.Tensor):
        self._state, (obs, reward, done, truncation, final_obs) = self._step(
            self._state, jax.dlpack.from_dlpack(actions.detach().contiguous())
        )
        self._obs = groups(obs)
        extras = {"time_outs": torch.from_dlpack(truncation), FINAL_OBS: groups(final_obs)}
        return self._obs, torch.from_dlpack(reward), torch.from_dlpack(done), extras


def ppo_params(task: str):
    """Playground's PPO settings for `task`, where its training scripts take the episode length
    and the action repeat from."""
    for suite, params in (
        (registry.dm_control_suite, dm_control_suite_params),
        (registry.locomotion, locomotion_params),
        (registry.manipulation, manipulation_params),
    ):
        if task in suite.ALL_ENVS:
            return params.brax_ppo_config(task)
    raise ValueError(f"unknown Playground task {task!r}; Playground has {', '.join(sorted(registry.ALL_ENVS))}")


def make(
    num_envs: int,
    device: str,
    seed: int,
    task: str = "CartpoleBalance",
    impl: str = "jax",
    domain_randomization: bool = False,
) -> PlaygroundVecEnv:
    """`num_envs` envs of Playground task `task` (an id of `mujoco_playground.registry.ALL_ENVS`) on
    `device`. `impl`: MJX's "jax" (the default of Playground's training scripts) or "warp"
    (MuJoCo Warp's kernels, the tasks' own default, for a GPU). `domain_randomization`: the
    task's randomiser, as Playground's `--domain_randomization` flag."""
    params = ppo_params(task)
    if impl not in ("jax", "warp"):
        raise ValueError(f"impl={impl!r}: MJX's implementations are 'jax' and 'warp'")
    randomizer = registry.get_domain_randomizer(task) if domain_randomization else None
    if domain_randomization and randomizer is None:
        raise ValueError(f"Playground has no domain randomiser for {task!r}; leave domain_randomization false")
    with jax.default_device(jax_device(device)):  # the model goes where the envs step
        env = registry.load(task, config_overrides={"impl": impl})
    return PlaygroundVecEnv(env, num_envs, device, seed, params.episode_length, params.action_repeat, randomizer)
