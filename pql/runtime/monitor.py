"""The main process's view of a run: rates, measured ratios, evaluation, logging and the
checkpoint schedule. Used identically by the process and the sequential runtime."""
from __future__ import annotations

import os
import time

import torch

from pql.config import to_dict
from pql.evaluate import evaluate
from pql.logging import RunLogger, WandbSettings
from pql.nets import ObsNormalizer
from pql.runtime.control import C, S
from pql.runtime.weight_sync import WeightsReader


def make_logger(cfg) -> RunLogger:
    """The run's CSV, TensorBoard, wandb and console logger, in cfg.run_dir."""
    return RunLogger(cfg.run_dir, to_dict(cfg), cfg.runtime.max_env_steps,
                     wandb=WandbSettings(**vars(cfg.wandb)) if cfg.wandb.activate else None,
                     progress_every_s=cfg.runtime.log_every_s, max_time_s=cfg.runtime.max_time_s)


class RunSchedule:
    """What every runner's monitor shares: the wall clock, when to stop (runtime.max_time_s, or
    solved: an evaluation reached runtime.stop_at_return), whether the final evaluation is due,
    the checkpoint path and the Ctrl-C checkpoint. save_checkpoint(path) writes a checkpoint."""

    def __init__(self, cfg, save_checkpoint):
        self.cfg, self.save_checkpoint = cfg, save_checkpoint
        self.start = time.monotonic()
        self.solved = False
        self.last_eval_version = -1  # the policy version evaluated last

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def should_stop(self) -> bool:
        limit = self.cfg.runtime.max_time_s
        return self.solved or (limit is not None and self.elapsed() >= limit)

    def final_eval_due(self, final: bool, policy_version: int) -> bool:
        """The final evaluation is of the final policy, unless that one was just evaluated. A run
        stopped as solved reports the evaluation that solved it, even if a learner made an update
        or two more before it stopped."""
        return final and not self.solved and policy_version != self.last_eval_version

    def evaluated(self, policy_version: int, eval_return: float) -> None:
        self.last_eval_version = policy_version
        target = self.cfg.runtime.stop_at_return
        if target is not None and eval_return >= target:
            self.solved = True

    def checkpoint_path(self) -> str:
        return os.path.join(self.cfg.run_dir, "checkpoint.pt")

    def report_done(self, env_steps: int, final: dict) -> dict:
        """Print the run's last line. -> final, the run's final scalars."""
        print(f"pql: done: {env_steps:,} env steps in {self.elapsed():.0f}s, "
              f"eval return {final.get('eval/return', float('nan')):.2f}; run dir {self.cfg.run_dir}", flush=True)
        return final

    def save_interrupted(self) -> None:
        """Ctrl-C: write a checkpoint of where the run stands, to resume from."""
        path = self.checkpoint_path()
        print(f"\npql: interrupted; writing {path}", flush=True)
        self.save_checkpoint(path)


class Monitor(RunSchedule):
    def __init__(self, cfg, shared, eval_env, algo, logger, device, save_checkpoint):
        """save_checkpoint(path) -> None writes a complete checkpoint (mode-specific)."""
        super().__init__(cfg, save_checkpoint)
        self.shared, self.eval_env, self.logger = shared, eval_env, logger
        self.policy = algo.make_policy().to(device).requires_grad_(False)
        self.normalizer = ObsNormalizer(eval_env.obs_dim).to(device)
        self.policy_reader = WeightsReader(shared.policy, self.policy)
        self.normalizer_reader = WeightsReader(shared.normalizer, self.normalizer)
        c = shared.counters
        self.next_eval = int(c[C.ENV_STEPS]) + cfg.runtime.eval_every
        self.next_checkpoint = int(c[C.ENV_STEPS]) + cfg.runtime.checkpoint_every
        self.last_log_time = self.start
        self.last_counts = self._counts()
        self.last_eval: dict = {}

    def _counts(self) -> torch.Tensor:
        c = self.shared.counters
        return torch.stack([c[C.ENV_STEPS], c[C.CRITIC_UPDATES], c[C.POLICY_UPDATES], c[C.ACTOR_STEPS]]).double()

    def scalars(self) -> dict:
        c, s = self.shared.counters, self.shared.stats
        now = time.monotonic()
        counts = self._counts()
        rates = (counts - self.last_counts) / max(now - self.last_log_time, 1e-9)
        self.last_counts, self.last_log_time = counts, now
        actor_steps = int(c[C.ACTOR_STEPS] - c[C.A0] - c[C.WARMUP])
        critic = int(c[C.CRITIC_UPDATES] - c[C.V0])
        policy = int(c[C.POLICY_UPDATES] - c[C.P0])
        out = {
            "perf/env_steps_per_s": float(rates[0]),
            "updates_per_s/actor": float(rates[3]),
            "updates_per_s/v_learner": float(rates[1]),
            "updates_per_s/p_learner": float(rates[2]),
            "ratio/beta_av": critic / actor_steps if actor_steps > 0 else 0.0,
            "ratio/beta_pv": critic / policy if policy > 0 else 0.0,
            "loss/critic": float(s[S.CRITIC_LOSS]),
            "loss/policy": float(s[S.POLICY_LOSS]),
            "critic/q": float(s[S.Q_MEAN]),
            "policy/version_lag": float(s[S.POLICY_VERSION_LAG]),
            "train/return": float(s[S.TRAIN_RETURN]),
            "train/length": float(s[S.TRAIN_LENGTH]),
            "train/episodes": float(c[C.EPISODES]),
            "time/elapsed_s": self.elapsed(),
        }
        return out

    def run_eval(self) -> dict:
        """Evaluate the newest published policy (waiting for a whole copy of it, never an older
        one) with the newest observation statistics; the version evaluated is logged."""
        version = self.policy_reader.pull_latest()
        self.normalizer_reader.pull_latest()
        ret, length = evaluate(self.eval_env, self.policy, self.normalizer)
        self.evaluated(version, ret)
        self.last_eval = {"eval/return": ret, "eval/length": length, "eval/policy_version": version}
        return self.last_eval

    def tick(self, final: bool = False) -> None:
        """Evaluate, checkpoint and log whatever is due at the current env step count."""
        env_steps = int(self.shared.counters[C.ENV_STEPS])
        version = self.shared.policy.current_version()  # 0 until the P-learner has published once
        if version and (env_steps >= self.next_eval or self.final_eval_due(final, version)):
            self.logger.log(env_steps, self.run_eval())
            self.next_eval = env_steps + self.cfg.runtime.eval_every
        if env_steps >= self.next_checkpoint or final:
            self.save_checkpoint(self.checkpoint_path())
            self.next_checkpoint = env_steps + self.cfg.runtime.checkpoint_every
        if time.monotonic() - self.last_log_time >= self.cfg.runtime.log_every_s or final:
            scalars = self.scalars()
            self.logger.log(env_steps, scalars)
            self.logger.progress(env_steps, scalars)

