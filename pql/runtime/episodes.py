"""Returns and lengths of the training episodes, accumulated on the device."""

from __future__ import annotations

import torch

from pql.runtime.device import host_values


class EpisodeStats:
    """Each env's running return and length, and sums over the episodes that finished since the
    last `pop`. `track` stays on the device; `pop` reads it back (a host sync on CUDA)."""

    def __init__(self, num_envs: int, device, episodes: int = 0):
        self.ep_return = torch.zeros(num_envs, device=device)
        self.ep_length = torch.zeros(num_envs, device=device)
        self.finished = torch.zeros(3, device=device)  # return sum, length sum, count
        self.episodes = episodes  # finished episodes popped so far (a resumed run starts from its count)

    def track(self, reward: torch.Tensor, done: torch.Tensor) -> None:
        """reward [N] of this step, done [N] bool (terminated | truncated)."""
        self.ep_return += reward
        self.ep_length += 1
        d = done.float()
        self.finished += torch.stack([(self.ep_return * d).sum(), (self.ep_length * d).sum(), d.sum()])
        self.ep_return *= 1 - d
        self.ep_length *= 1 - d

    def pop(self) -> dict:
        """Mean return and length of the episodes finished since the last call (absent if none
        did), and the count of all so far: {"train/return", "train/length", "train/episodes"}."""
        ret, length, count = host_values(*self.finished.unbind())
        self.finished.zero_()
        self.episodes += int(count)
        means = {"train/return": ret / count, "train/length": length / count} if count else {}
        return {**means, "train/episodes": self.episodes}

    def report(self, shared) -> None:
        """Pop into the shared statistics (shared.stats.train_return, train_length) and the shared
        episode count, where the main process reads them."""
        stats = self.pop()
        if "train/return" in stats:
            shared.stats.train_return, shared.stats.train_length = stats["train/return"], stats["train/length"]
        shared.counters.episodes = stats["train/episodes"]
