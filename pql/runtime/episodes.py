"""Returns and lengths of the training episodes, accumulated on the device."""

from __future__ import annotations

import math

import torch

from pql.runtime.device import host_values
from pql.runtime.shared import RunStats
from tasks.base import MAX_EPISODE_METRICS


def episode_metric_key(index: int) -> str:
    """The runners' key for the mean of the env's index-th episode metric over the training
    episodes; the main process logs it as train/<that metric's name> (pql.runtime.run.Monitor)."""
    return f"train/episode_metric/{index}"


class EpisodeStats:
    """Each env's running return and length, and sums over the episodes that finished since the
    last `pop` (with the env's episode metrics at their last step). `track` stays on the device;
    `pop` reads it back (a host sync on CUDA)."""

    def __init__(self, num_envs: int, device, episodes: int = 0, metrics: tuple[str, ...] = ()):
        self.ep_return = torch.zeros(num_envs, device=device)
        self.ep_length = torch.zeros(num_envs, device=device)
        self.finished = torch.zeros(3, device=device)  # return sum, length sum, count
        self.finished_metrics = torch.zeros(len(metrics), device=device)  # sums (not checkpointed: logging only)
        self.episodes = episodes  # finished episodes popped so far (a resumed run starts from its count)
        self.metrics = metrics

    def track(self, reward: torch.Tensor, done: torch.Tensor, info: dict) -> None:
        """reward [N] of this step, done [N] bool (terminated | truncated), info the step's."""
        self.ep_return += reward
        self.ep_length += 1
        d = done.float()
        self.finished += torch.stack([(self.ep_return * d).sum(), (self.ep_length * d).sum(), d.sum()])
        if self.metrics:
            self.finished_metrics += torch.stack([info[name] for name in self.metrics]) @ d
        self.ep_return *= 1 - d
        self.ep_length *= 1 - d

    def pop(self) -> dict:
        """Mean return and length (and of each episode metric, under episode_metric_key) of the
        episodes finished since the last call (absent if none did), and the count of all so far:
        {"train/return", "train/length", episode_metric_key(i)..., "train/episodes"}."""
        ret, length, count, *metrics = host_values(*self.finished.unbind(), *self.finished_metrics.unbind())
        self.finished.zero_()
        self.finished_metrics.zero_()
        self.episodes += int(count)
        means = {"train/return": ret / count, "train/length": length / count} if count else {}
        if count:
            means.update({episode_metric_key(i): total / count for i, total in enumerate(metrics)})
        return {**means, "train/episodes": self.episodes}

    def report(self, shared) -> None:
        """Pop into the shared statistics (shared.stats.train_return, train_length, train_metrics)
        and the shared episode count, where the main process reads them."""
        stats = self.pop()
        if "train/return" in stats:
            shared.stats.train_return, shared.stats.train_length = stats["train/return"], stats["train/length"]
            means = [stats[episode_metric_key(i)] for i in range(len(self.metrics))]
            shared.stats.train_metrics[: len(means)] = torch.tensor(means, dtype=shared.stats.train_metrics.dtype)
        shared.counters.episodes = stats["train/episodes"]


def latest_episode_scalars(stats: RunStats) -> dict:
    """{"train/return", "train/length", episode_metric_key(i) for every slot of
    stats.train_metrics} of a runner's shared statistics, empty until an episode of this launch
    has finished: metrics.csv then leaves the cells empty instead of logging a return of 0. The
    main process keeps the slots of the env's metrics and drops the rest."""
    if math.isnan(stats.train_return):
        return {}
    means = stats.train_metrics.tolist()
    return {
        "train/return": stats.train_return,
        "train/length": stats.train_length,
        **{episode_metric_key(i): means[i] for i in range(MAX_EPISODE_METRICS)},
    }
