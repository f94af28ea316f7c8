"""Mirror augmentation: each sampled batch joined by its mirror image (the task's symmetry,
tasks.base.Mirror), as rsl_rl and FastSAC augment legged robots' batches. A transition's image is
as valid a transition, under the same reward and discount, so the critic and the policy learn
from both at the cost of a batch twice as large."""

from __future__ import annotations

import torch

from tasks.base import Mirror

OBSERVATIONS = ("obs", "next_obs", "next_obs1")  # the stored observations of pql.replay.nstep's specs


class MirrorAugment:
    """Doubles replay batches with their mirror images, on `device`."""

    def __init__(self, mirror: Mirror, device: torch.device):
        self.obs_index = torch.tensor(mirror.obs_index, device=device)
        self.obs_sign = torch.tensor(mirror.obs_sign, dtype=torch.float32, device=device)
        self.action_index = torch.tensor(mirror.action_index, device=device)
        self.action_sign = torch.tensor(mirror.action_sign, dtype=torch.float32, device=device)

    def __call__(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """batch {field: [B, ...]} (raw observations, before normalization) -> {field: [2B, ...]}:
        the batch, then its images: observations and actions mirrored, every other field repeated."""
        return {name: torch.cat([value, self._image(name, value)]) for name, value in batch.items()}

    def _image(self, name: str, value: torch.Tensor) -> torch.Tensor:
        if name in OBSERVATIONS:
            return value.index_select(1, self.obs_index) * self.obs_sign
        if name == "action":
            return value.index_select(1, self.action_index) * self.action_sign
        return value
