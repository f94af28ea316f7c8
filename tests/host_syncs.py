"""Counting the operations that make the host wait for the device: a scalar read (`item`,
`bool(t)`, `int(t)`), `nonzero`, and the other ops whose output shape depends on the data. On a
CPU nothing waits, but the same calls are made, so a CPU test can catch what would break a CUDA
graph's capture or stall a CUDA stream."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
SYNCING = {
    aten._local_scalar_dense.default,
    aten.is_nonzero.default,
    aten.item.default,
    aten.equal.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
}


class HostSyncs(TorchDispatchMode):
    """Within `with HostSyncs() as syncs:`, `syncs.calls` lists the syncing ops called."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in SYNCING:
            self.calls.append(str(func))
        return func(*args, **(kwargs or {}))
