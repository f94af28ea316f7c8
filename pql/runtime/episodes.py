"""Returns and lengths of the training episodes, accumulated on the device."""

from __future__ import annotations

import math

import torch

from pql.runtime.device import host_values
from pql.runtime.shared import RunStats

# The runners' key for the mean episode metric of the training episodes; the main process logs it
# as train/<the env's episode_metric> (pql.runtime.run.Monitor), and not at all for envs without one.
TRAIN_EPISODE_METRIC = "train/episode_metric"


class EpisodeStats:
    """Each env's running return and length, and sums over the episodes that finished since the
    last `pop` (with the env's episode_metric at their last step, for an env that has one).
    `track` stays on the device; `pop` reads it back (a host sync on CUDA)."""

    def __init__(self, num_envs: int, device, episodes: int = 0, metric: str | None = None):
        self.ep_return = torch.zeros(num_envs, device=device)
        self.ep_length = torch.zeros(num_envs, device=device)
        self.finished = torch.zeros(3, device=device)  # return sum, length sum, count
        self.finished_metric = torch.zeros((), device=device)  # metric sum (not checkpointed: logging only)
        self.episodes = episodes  # finished episodes popped so far (a resumed run starts from its count)
        self.metric = metric

    def track(self, reward: torch.Tensor, done: torch.Tensor, info: dict) -> None:
        """reward [N] of this step, done [N] bool (terminated | truncated), info the step's."""
        self.ep_return += reward
        self.ep_length += 1
        d = done.float()
        self.finished += torch.stack([(self.ep_return * d).sum(), (self.ep_length * d).sum(), d.sum()])
        if self.metric is not None:
            self.finished_metric += (info[self.metric] * d).sum()
        self.ep_return *= 1 - d
        self.ep_length *= 1 - d

    def pop(self) -> dict:
        """Mean return and length (and episode metric) of the episodes finished since the last call
        (absent if none did), and the count of all so far: {"train/return", "train/length",
        ("train/episode_metric",) "train/episodes"}."""
        ret, length, count, metric = host_values(*self.finished.unbind(), self.finished_metric)
        self.finished.zero_()
        self.finished_metric.zero_()
        self.episodes += int(count)
        means = {"train/return": ret / count, "train/length": length / count} if count else {}
        if count and self.metric is not None:
            means[TRAIN_EPISODE_METRIC] = metric / count
        return {**means, "train/episodes": self.episodes}

    def report(self, shared) -> None:
        """Pop into the shared statistics (shared.stats.train_return, train_length, train_metric)
        and the shared episode count, where the main process reads them."""
        stats = self.pop()
        if "train/return" in stats:
            shared.stats.train_return, shared.stats.train_length = stats["train/return"], stats["train/length"]
        if TRAIN_EPISODE_METRIC in stats:
            shared.stats.train_metric = stats[TRAIN_EPISODE_METRIC]
        shared.counters.episodes = stats["train/episodes"]


def latest_episode_scalars(stats: RunStats) -> dict:
    """{"train/return", "train/length", TRAIN_EPISODE_METRIC} of a runner's shared statistics,
    empty until an episode of this launch has finished: metrics.csv then leaves the cells empty
    instead of logging a return of 0."""
    if math.isnan(stats.train_return):
        return {}
    return {
        "train/return": stats.train_return,
        "train/length": stats.train_length,
        TRAIN_EPISODE_METRIC: stats.train_metric,
    }
