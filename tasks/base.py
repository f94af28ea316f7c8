"""The batched-env protocol every backend implements, and the checks on what users pass in.

Every tensor an env returns has leading dimension `num_envs` and lives on `env.device`:

    obs = env.reset()                                              # [N, obs_dim] float32
    obs, reward, terminated, truncated, info = env.step(actions)   # actions [N, act_dim] float32

Envs that finish are reset inside `step`: `obs` is then the new episode's first observation and
`info["final_obs"]` the observation that ended the episode (equal to `obs` elsewhere), which a
learner needs to bootstrap a truncated episode. `terminated` (the task ended: no bootstrap) and
`truncated` (the step limit cut it short: bootstrap) are never both true for one env.

The MuJoCo tasks' `info` also holds Gymnasium's per-step info entries under its names, [N]
float32 each, of the step that just ended: the reward terms (signed addends of the reward, e.g.
"reward_forward", "reward_ctrl"), the positions and velocities ("x_position", "x_velocity", ...),
as docs/tasks.md lists per task.

An env that offers the critic observations of its own (asymmetric actor-critic: Isaac Lab's and
mjlab's "critic" group, with what a simulator knows and a robot does not) returns them after the
policy's, as the last `critic_obs_dim` columns of obs (and of final_obs): the policy reads
obs[:, :policy_obs_dim], the critic obs[:, policy_obs_dim:]. The critic's columns hold everything
it reads, the policy's observations among them where it reads those too (as those groups do).

An env that can be checkpointed returns its whole state from `state_dict()`: a dict of CPU tensors,
ints, floats, strings and dicts of these (what `torch.load(weights_only=True)` reads), and an env of
the same task, size and seed continues those episodes exactly after `load_state_dict(state)`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np
import torch

# The most episode metrics an env may name: what the runtime's shared statistics hold.
MAX_EPISODE_METRICS = 4


class TaskError(ValueError):
    """A task, a size or an action that the envs cannot take; str() says what was wrong."""


@dataclass(frozen=True)
class Mirror:
    """A task's mirror symmetry (a legged robot's left and right): the mirror image of a state,
    under the mirror image of an action, is a state as likely, reaching the mirror image of the
    next state with the same reward. The image of obs [..., obs_dim] is obs[..., obs_index] *
    obs_sign, of an action [..., act_dim] action[..., action_index] * action_sign; applied twice,
    each is the identity. A learner may train on both (algo.mirror)."""

    obs_index: tuple[int, ...]
    obs_sign: tuple[float, ...]
    action_index: tuple[int, ...]
    action_sign: tuple[float, ...]


@dataclass(frozen=True)
class PolicyInterface:
    """What a program that runs an exported policy must know of the env beyond the sizes: the
    observation's parts in order, and for a robot the joints its actions drive and what an action
    means (pql/export.py writes it into the exported files). Empty where the task does not say."""

    obs_parts: tuple[tuple[str, int], ...] = ()  # (name, columns) for each part of the policy's observation
    joint_names: tuple[str, ...] = ()  # the joint each action drives, in the action's order
    default_joint_pos: tuple[float, ...] = ()  # joint position targets: the pose an action of 0 holds
    action_scale: float | None = None  # joint position targets: default_joint_pos + action_scale * action


class BatchedEnv(abc.ABC):
    """`num_envs` copies of one task stepped together; see the module docstring for the protocol."""

    num_envs: int
    device: torch.device
    obs_dim: int
    act_dim: int
    # The columns at the end of obs that only the critic reads (the module docstring); 0: none, the
    # policy and the critic read all of obs.
    critic_obs_dim: int = 0
    max_episode_steps: int
    action_low: torch.Tensor  # [act_dim] float32, device
    action_high: torch.Tensor  # [act_dim] float32, device
    # The info entries whose values at an episode's last step score the episode beside its return
    # (ShadowHandCube's "consecutive_successes"; Anymal's "lin_vel_error" and "yaw_rate_error", each
    # the episode's mean so far), at most MAX_EPISODE_METRICS: evaluations and the training log
    # report each one's mean over episodes as eval/<name> and train/<name>.
    episode_metrics: tuple[str, ...] = ()
    # The task's mirror symmetry, or None (Mirror).
    mirror: Mirror | None = None
    # Whether an env of the same task, size and seed repeats the same trajectory under the same
    # actions; `python -m pql.check_env` holds an env that says so to it.
    deterministic: bool = True
    # None: reset() starts a new episode in every env. An env that resets itself only when an
    # episode ends (rsl_rl's interface without a reset method) has [N] bool here instead, True
    # where the next step starts an episode: its reset() returns the current observations, and an
    # evaluation scores each env's first episode that starts after the evaluation does.
    episode_starts: torch.Tensor | None = None
    # What a deployment reads of the observations and actions (PolicyInterface).
    interface: PolicyInterface = PolicyInterface()
    # Simulated seconds per step where the env says (a video's frame interval), else None.
    dt: float | None = None

    @property
    def policy_obs_dim(self) -> int:
        """The columns at the start of obs that the policy reads."""
        return self.obs_dim - self.critic_obs_dim

    @abc.abstractmethod
    def reset(self) -> torch.Tensor:
        """Start a new episode in every env (see episode_starts). Returns obs [N, obs_dim] float32."""

    @abc.abstractmethod
    def step(self, actions: torch.Tensor):
        """Advance every env by one step.

        actions: [N, act_dim] float32 on `device`, finite.
        Returns obs [N, obs_dim] float32, reward [N] float32, terminated [N] bool,
        truncated [N] bool, info {"final_obs": [N, obs_dim] float32, and a task's own entries}.
        """

    def state_dict(self) -> dict:
        """Everything the next steps read, as copies on the CPU (see the module docstring).

        Raises TaskError for an env that cannot be checkpointed (this default).
        """
        raise self._cannot_checkpoint()

    def load_state_dict(self, state: dict) -> None:
        """Continue the episodes of `state` (from `state_dict` of an env of the same task, size and seed).

        Raises TaskError (a ValueError), before changing anything, if `state` is of another task,
        backend, env count, seed or layout, and for an env that cannot be checkpointed (this default).
        """
        raise self._cannot_checkpoint()

    def _cannot_checkpoint(self) -> TaskError:
        return TaskError(
            f"{type(self).__name__} cannot be checkpointed: it does not save or restore its simulator's "
            "state (the MuJoCo tasks can), so a resume starts new episodes"
        )

    def render(self, index: int = 0) -> np.ndarray:
        """Env `index`'s current scene as an RGB image [H, W, 3] uint8 (pql.play's videos).

        Raises TaskError for an env that cannot render (this default).
        """
        raise TaskError(f"{type(self).__name__} cannot render: it offers no images of its scene")

    def close(self) -> None:  # noqa: B027 (a task without a simulator to release keeps this one)
        """Release the simulator; the env cannot be used afterwards."""


def check_state_fits(state, expected, path: str = "") -> None:
    """Raises TaskError (a ValueError) naming the first entry where `state` differs from `expected`,
    a state of the env that loads it: keys, a tensor's shape or dtype, or any other value (the
    task, a size). Entries are checked in `expected`'s order, so that what the state is of comes first."""
    where = f"{path} " if path else ""
    if isinstance(expected, dict):
        if not isinstance(state, dict):
            raise TaskError(f"cannot load the env state: its {where}is a {type(state).__name__}, this env's a dict")
        for key, value in expected.items():
            entry = f"{path}.{key}" if path else key
            if key not in state:
                raise TaskError(f"cannot load the env state: it lacks {entry}, which this env has")
            check_state_fits(state[key], value, entry)
        extra = sorted(map(str, state.keys() - expected.keys()))
        if extra:
            raise TaskError(f"cannot load the env state: its {where}holds {', '.join(extra)}, which this env does not")
    elif isinstance(expected, torch.Tensor):
        if not isinstance(state, torch.Tensor) or (state.shape, state.dtype) != (expected.shape, expected.dtype):
            got = f"{tuple(state.shape)} {state.dtype}" if isinstance(state, torch.Tensor) else type(state).__name__
            raise TaskError(
                f"cannot load the env state: its {where}is {got} where this env expects "
                f"{tuple(expected.shape)} {expected.dtype}"
            )
    elif state != expected:
        raise TaskError(f"cannot load the env state: its {where}is {state!r} where this env has {expected!r}")


def check_num_envs(num_envs) -> int:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs <= 0:
        raise TaskError(f"num_envs must be an integer > 0, got {num_envs!r}")
    return num_envs


def resolve_device(device) -> torch.device:
    """torch.device for `device` ("cpu", "cuda", "cuda:1", torch.device), with the CUDA index filled in."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise TaskError(f"device must name a torch device such as 'cpu' or 'cuda:0', got {device!r}") from err
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise TaskError(f"device {device} was asked for but CUDA is not available; use device='cpu'")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type != "cpu":
        raise TaskError(f"device must be 'cpu' or a CUDA device, got {device}")
    return device


class LateRead:
    """Reads a device tensor of flags on the host without stalling the device's stream.

    On the CPU `read()` is the tensor itself. On CUDA each `read()` returns the host copy started
    by an earlier call once that copy has landed (None until then, and while it is in flight) and
    starts the next one, so a flag raised on the device is seen a few calls later.
    """

    def __init__(self, flags: torch.Tensor):
        self.flags = flags
        if flags.is_cuda:
            self._snapshot = torch.zeros_like(flags, device="cpu").pin_memory()
            self._landed = None  # torch.cuda.Event of the copy in flight

    def read(self) -> torch.Tensor | None:
        if not self.flags.is_cuda:
            return self.flags
        if self._landed is not None and not self._landed.query():
            return None
        seen = None if self._landed is None else self._snapshot.clone()
        self._snapshot.copy_(self.flags, non_blocking=True)
        self._landed = torch.cuda.Event()
        self._landed.record()
        return seen


class ActionCheck:
    """Rejects actions of the wrong shape, dtype or device, and non-finite actions.

    Shape, dtype and device are metadata, checked for free. Finiteness needs the values: on the
    CPU it is checked before the step; on CUDA a host read would stall the pipeline every step,
    so the per-env verdict is copied to pinned memory asynchronously and read at a later step,
    once the copy has landed. A non-finite action on CUDA is therefore reported one or more steps
    after it was applied, naming the env indices all the same.
    """

    def __init__(self, num_envs: int, act_dim: int, device: torch.device):
        self.shape = (num_envs, act_dim)
        self.device = device
        if device.type == "cuda":
            self._seen_bad = torch.zeros(num_envs, dtype=torch.bool, device=device)  # ORed every step
            self._late = LateRead(self._seen_bad)

    def __call__(self, actions) -> None:
        if not isinstance(actions, torch.Tensor):
            raise TaskError(f"actions must be a torch.Tensor of shape {self.shape}, got {type(actions).__name__}")
        if tuple(actions.shape) != self.shape:
            raise TaskError(f"actions must have shape {self.shape} (num_envs, act_dim), got {tuple(actions.shape)}")
        if actions.dtype != torch.float32:
            raise TaskError(f"actions must be float32, got {actions.dtype}")
        if actions.device != self.device:
            raise TaskError(f"actions must be on the env's device {self.device}, got {actions.device}")
        if self.device.type == "cpu":
            _raise_if_any(~torch.isfinite(actions).all(dim=1), "")
        else:
            self._check_later(actions)

    def _check_later(self, actions: torch.Tensor) -> None:
        self._seen_bad |= ~torch.isfinite(actions).all(dim=1)
        seen = self._late.read()
        if seen is not None:
            _raise_if_any(seen, " (reported late: on CUDA the check does not stall the step)")


class NonFiniteActions(TaskError):
    """Actions with NaN or inf: a policy gone wrong rather than a caller's mistake."""


def _raise_if_any(bad_envs: torch.Tensor, note: str) -> None:
    if bad_envs.any():
        ids = bad_envs.nonzero().flatten().tolist()
        shown = ", ".join(map(str, ids[:10])) + (", ..." if len(ids) > 10 else "")
        raise NonFiniteActions(f"actions contain NaN or inf in {len(ids)} env(s), indices [{shown}]{note}")
