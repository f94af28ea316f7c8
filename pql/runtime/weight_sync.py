"""Versioned shared weights: one writer publishes a module into a flat shared buffer, readers
copy it into their local module when the version has changed.

The version is a seqlock: odd while the writer copies, even when the buffer is whole. A reader
copies only from an even version and keeps the copy only if the version did not move meanwhile,
so it never uses a half-written set of weights and never blocks the writer.
"""
from __future__ import annotations

import torch
from torch import nn


def _tensors(module: nn.Module) -> list[torch.Tensor]:
    return [t for t in list(module.parameters()) + list(module.buffers()) if t.is_floating_point()]


class SharedWeights:
    """Flat float32 buffer on `device` (shared memory on CPU, CUDA IPC on GPU) plus a version."""

    def __init__(self, template: nn.Module, device):
        numel = sum(t.numel() for t in _tensors(template))
        self.flat = torch.zeros(numel, dtype=torch.float32, device=device)
        if self.flat.device.type == "cpu":
            self.flat.share_memory_()
        self.version = torch.zeros(1, dtype=torch.int64).share_memory_()

    def current_version(self) -> int:
        return int(self.version[0]) // 2

    @torch.no_grad()
    def publish(self, module: nn.Module) -> None:
        self.version += 1
        torch.cat([t.detach().reshape(-1).float() for t in _tensors(module)], out=self.flat)
        if self.flat.is_cuda:
            torch.cuda.current_stream(self.flat.device).synchronize()
        self.version += 1

    @torch.no_grad()
    def pull(self, module: nn.Module, have_version: int = -1) -> int:
        """Copy the published weights into `module` if they are newer than `have_version`.
        -> the version now held by `module` (unchanged if there was nothing new or the copy raced)."""
        seq = int(self.version[0])
        if seq == 0 or seq % 2 == 1 or seq // 2 == have_version:
            return have_version
        staged = self.flat.clone()
        if staged.is_cuda:
            torch.cuda.current_stream(staged.device).synchronize()
        if int(self.version[0]) != seq:
            return have_version
        offset = 0
        for t in _tensors(module):
            t.copy_(staged[offset:offset + t.numel()].view_as(t))
            offset += t.numel()
        return seq // 2
