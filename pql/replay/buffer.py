"""Device-resident replay: a ring over a dict of tensors (storage) plus a sampler (which items
to draw). Storage and sampling are separate so uniform and prioritized replay share the ring."""

from __future__ import annotations

import torch


def replay_layout(capacity: int, spec: dict, sampler_kind: str) -> dict:
    """What a saved replay must match to load into another: capacity, fields, sampler kind."""
    return {
        "capacity": capacity,
        "fields": {k: [list(shape), str(dtype).removeprefix("torch.")] for k, (shape, dtype) in spec.items()},
        "sampler": sampler_kind,
    }


class UniformSampler:
    """Uniform sampling with replacement; importance weights are all 1."""

    kind = "uniform"

    def __init__(self, device: torch.device):
        self.device = torch.device(device)

    def on_add(self, indices: torch.Tensor, td_abs: torch.Tensor | None = None) -> None:
        return None

    def sample(self, batch_size: int, size: int, generator: torch.Generator | None = None):
        """-> indices [B] long, weights [B] float32, both on the sampler's device."""
        indices = torch.randint(0, size, (batch_size,), device=self.device, generator=generator)
        return indices, torch.ones(batch_size, device=self.device)

    def update(self, indices: torch.Tensor, td_abs: torch.Tensor) -> None:
        return None

    def state(self) -> tuple[dict, dict[str, torch.Tensor]]:
        return {}, {}

    def state_targets(self, small: dict) -> dict[str, torch.Tensor]:
        return {}

    def load_state(self, small: dict) -> None:
        return None


class ReplayBuffer:
    """Fixed-capacity ring of transitions on `device`.

    spec: {field: (shape, dtype)}; every stored field has shape [capacity, *shape].
    Memory per transition is the sum of the fields' sizes; for PQL's transition
    (obs, action, reward, next_obs, discount) that is 4·(2·obs_dim + act_dim + 2) bytes, and
    4·(obs_dim + 2) more with algo.greedy_nstep's first step.
    """

    def __init__(self, capacity: int, spec: dict, device, sampler=None, generator: torch.Generator | None = None):
        if capacity <= 0:
            raise ValueError(f"replay capacity must be > 0, got {capacity}")
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.storage = {
            k: torch.empty((self.capacity, *shape), dtype=dtype, device=self.device)
            for k, (shape, dtype) in spec.items()
        }
        self.sampler = sampler if sampler is not None else UniformSampler(self.device)
        self.generator = generator
        self.cursor = 0  # next slot to write
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def add(self, batch: dict, td_abs: torch.Tensor | None = None) -> torch.Tensor:
        """batch: {field: [B, *shape]} on any device; td_abs: [B] initial |TD errors| for a
        prioritized sampler (None: it uses its own rule). -> the ring indices written, [B] long."""
        n = next(iter(batch.values())).shape[0]
        if n > self.capacity:  # only the newest `capacity` items can survive anyway
            batch = {k: v[-self.capacity :] for k, v in batch.items()}
            td_abs = None if td_abs is None else td_abs[-self.capacity :]
            n = self.capacity
        indices = (self.cursor + torch.arange(n, device=self.device)) % self.capacity
        # Asynchronous only into device memory: a non-blocking copy into host memory may be read
        # here before it has landed.
        non_blocking = self.device.type != "cpu"
        for k, store in self.storage.items():
            store[indices] = batch[k].to(self.device, store.dtype, non_blocking=non_blocking)
        self.cursor = (self.cursor + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.sampler.on_add(indices, None if td_abs is None else td_abs.to(self.device))
        return indices

    def sample(self, batch_size: int):
        """-> (batch {field: [B, *shape]}, indices [B] long, weights [B] float32)."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        indices, weights = self.sampler.sample(batch_size, self.size, self.generator)
        return {k: v[indices] for k, v in self.storage.items()}, indices, weights

    def update_priorities(self, indices: torch.Tensor, td_abs: torch.Tensor) -> None:
        self.sampler.update(indices, td_abs)

    def layout(self) -> dict:
        """What a saved replay must match to load here: capacity, fields and sampler."""
        spec = {k: (tuple(v.shape[1:]), v.dtype) for k, v in self.storage.items()}
        return replay_layout(self.capacity, spec, self.sampler.kind)

    def state(self) -> tuple[dict, dict[str, torch.Tensor]]:
        """(plain state: layout, write position, size and the sampler's scalars; the tensors to
        save in bulk: the filled rows of every field and the sampler's priorities)."""
        sampler_small, sampler_bulk = self.sampler.state()
        bulk = {f"storage.{k}": v[: self.size] for k, v in self.storage.items()}
        bulk.update({f"sampler.{k}": t for k, t in sampler_bulk.items()})
        return {"layout": self.layout(), "cursor": self.cursor, "size": self.size, "sampler": sampler_small}, bulk

    def load_targets(self, small: dict) -> dict[str, torch.Tensor]:
        """The tensors that a saved state's bulk is read into, in the order `state` listed them
        (the storage's rows in place; nothing is allocated twice). Raises ValueError if the saved
        layout is not this replay's."""
        if small["layout"] != self.layout():
            raise ValueError(f"a replay of layout {small['layout']} cannot load into one of {self.layout()}")
        targets = {f"storage.{k}": v[: small["size"]] for k, v in self.storage.items()}
        targets.update({f"sampler.{k}": t for k, t in self.sampler.state_targets(small["sampler"]).items()})
        return targets

    def load_state(self, small: dict) -> None:
        """Take the write position and size of a saved state whose bulk `load_targets` received."""
        self.cursor, self.size = small["cursor"], small["size"]
        self.sampler.load_state(small["sampler"])
