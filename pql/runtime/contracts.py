"""What the parts of a run promise each other: the names they share across processes, what a
runner supplies to `train` (and the monitor it is given), and what a role supplies to the loop it
runs in. Every runner and every role subclasses its Protocol, so mypy checks it where it is
defined; this module imports none of them.

The role names are the config's (`pql.config.ROLE_NAMES`: runtime.<role>_device places them).
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import torch
from torch import nn

# The shared weights (pql.runtime.weight_sync.SharedWeights), each named once: the P-learner's
# policy, the V-learner's critic, the actor's observation statistics, the P-learner's average
# policy (algo.policy_average), which the run then delivers instead of "policy", and the actor's
# return statistics (algo.return_scaling), whose scale the V-learner divides its rewards by.
POLICY = "policy"
CRITIC = "critic"
NORMALIZER = "normalizer"
DELIVERED = "delivered"
RETURN_SCALE = "return_scale"


class RunMonitor(Protocol):
    """What a runner's loop calls on the main process's schedule (pql/runtime/run.py `Monitor`)."""

    def stop_code(self) -> int:
        """The stop code this replica asks its actors for (pql/runtime/stopping.py), read between
        two steps."""

    def tick(self, final: bool = False) -> None:
        """Evaluate, checkpoint and log whatever is due at the current env step count."""


class Runner(Protocol):
    """What a runner supplies to `train`: `__init__(settings, device, obs, act_dim, resume)`
    builds its roles from its settings (pql.runtime.settings), restored from `resume` (the
    checkpoint's state, or None), and these. obs: which observations the policy and the critic
    read (pql.envs.ObsLayout)."""

    @staticmethod
    def make_policy(algo, obs_dim: int, act_dim: int) -> nn.Module:
        """An untrained policy module of this algorithm reading obs_dim observations, from its
        section of the config (test=true loads the checkpoint's into it)."""

    @property
    def trains_elsewhere(self) -> bool:
        """Whether run() leaves the main thread free, its roles training in processes of their own:
        evaluations then run on a thread beside it instead of in turn with training."""

    def run(self, monitor: RunMonitor) -> None:
        """Train until the env-step budget is spent or the replicas agree on monitor.stop_code(),
        calling monitor.tick() as it goes and monitor.tick(final=True) last, while the roles still
        run."""

    def finished_by(self) -> int:
        """The stop code the replicas agreed on when they finished early (pql/runtime/stopping.py;
        0: they did not, or not yet)."""

    def counts(self) -> dict[str, int]:
        """{"env_steps": n, role: updates of that role, ...}, for the rates."""

    def scalars(self) -> dict[str, float]:
        """The latest losses and training-episode statistics."""

    def policy_version(self) -> int:
        """The version of the newest policy (0: none made yet, nothing to evaluate)."""

    def latest_policy(self) -> tuple[nn.Module, nn.Module, int]:
        """(policy module, normalizer of the policy's observations, version) of the newest policy,
        for evaluation."""

    # Whether each replica's state differs from rank 0's in what a resume needs (a replay, envs
    # where they stand): then every replica writes its own part of each checkpoint
    # (pql/runtime/shards.py); else rank 0's state serves every replica.
    keeps_replica_state: ClassVar[bool] = False

    def checkpoint_ready(self, wanted: bool) -> bool:
        """Whether to take a checkpoint now: `wanted` (one is due), where every replica's state
        here is one every other replica takes at the same step. A runner whose replicas reach
        that only by agreeing on a step to hold at asks for one when `wanted`, and says True
        once they hold there, wanted here or not."""
        return wanted

    def checkpoint(self) -> dict:
        """{"counters", "policy", "normalizer", "roles"} of the checkpoint layout (run.py); the
        normalizer's statistics are of the policy's observations only, as the policy is delivered."""

    def close(self) -> None:
        """Release what run() started (processes, envs); called however the run ends."""


class Role(Protocol):
    """One of PQL's three roles (pql/runtime/off_policy): the loop it runs in (roles.serve, or
    sequential.interleave) steps it whenever the ratio controller lets it."""

    name: str
    device: torch.device

    def ready(self) -> bool:
        """Whether the ratios (and the ring) let this role make its next step now."""

    def step(self) -> None:
        """One actor step (num_envs env steps staged in the ring) or one learner update."""

    def idle(self) -> None:
        """What the role does while it may not step: count its copies that have landed."""

    def state_dict(self) -> dict:
        """What a checkpoint keeps of this role (its networks, optimisers, generator)."""

    def load_state_dict(self, state: dict) -> None:
        """Restore state_dict()'s value, and publish the networks this role owns."""
