"""The main process's view of a run: rates, measured ratios, evaluation, logging and the
checkpoint schedule. Used identically by the process and the sequential runtime."""
from __future__ import annotations

import time

import torch

from pql.config import to_dict
from pql.evaluate import evaluate
from pql.logging import RunLogger, WandbSettings
from pql.nets import ObsNormalizer
from pql.runtime.control import C, S


def save_interrupted(path: str, save) -> None:
    """Ctrl-C: write a checkpoint of where the run stands (save(path)), to resume from."""
    print(f"\npql: interrupted; writing {path}", flush=True)
    save(path)


def make_logger(cfg) -> RunLogger:
    """The run's CSV, TensorBoard, wandb and console logger, in cfg.run_dir."""
    return RunLogger(cfg.run_dir, to_dict(cfg), cfg.runtime.max_env_steps,
                     wandb=WandbSettings(**vars(cfg.wandb)) if cfg.wandb.activate else None,
                     progress_every_s=cfg.runtime.log_every_s, max_time_s=cfg.runtime.max_time_s)


class Monitor:
    def __init__(self, cfg, shared, eval_env, algo, logger, device, save_checkpoint):
        """save_checkpoint(path) -> None writes a complete checkpoint (mode-specific)."""
        self.cfg, self.shared, self.eval_env, self.logger = cfg, shared, eval_env, logger
        self.save_checkpoint = save_checkpoint
        self.policy = algo.make_policy().to(device).requires_grad_(False)
        self.normalizer = ObsNormalizer(eval_env.obs_dim).to(device)
        self.start = time.monotonic()
        c = shared.counters
        self.next_eval = int(c[C.ENV_STEPS]) + cfg.runtime.eval_every
        self.next_checkpoint = int(c[C.ENV_STEPS]) + cfg.runtime.checkpoint_every
        self.last_log_time = self.start
        self.last_counts = self._counts()
        self.last_eval: dict = {}
        self.last_eval_version = -1  # the policy version evaluated last
        self.solved = False  # an evaluation reached runtime.stop_at_return

    def _counts(self) -> torch.Tensor:
        c = self.shared.counters
        return torch.stack([c[C.ENV_STEPS], c[C.CRITIC_UPDATES], c[C.POLICY_UPDATES], c[C.ACTOR_STEPS]]).double()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def should_stop(self) -> bool:
        """Out of wall time, or solved (runtime.max_time_s, runtime.stop_at_return)."""
        limit = self.cfg.runtime.max_time_s
        return self.solved or (limit is not None and self.elapsed() >= limit)

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
        self.last_eval_version = self.shared.policy.pull(self.policy, self.last_eval_version)
        self.shared.normalizer.pull(self.normalizer)
        ret, length = evaluate(self.eval_env, self.policy, self.normalizer)
        self.last_eval = {"eval/return": ret, "eval/length": length}
        return self.last_eval

    def tick(self, final: bool = False) -> None:
        """Evaluate, checkpoint and log whatever is due at the current env step count."""
        env_steps = int(self.shared.counters[C.ENV_STEPS])
        # The final evaluation is of the final policy, unless that one was just evaluated. A run
        # stopped as solved reports the evaluation that solved it, even if the P-learner made an
        # update or two more before it stopped.
        final_due = final and not self.solved and self.shared.policy.current_version() != self.last_eval_version
        if env_steps >= self.next_eval or final_due:
            self.logger.log(env_steps, self.run_eval())
            self.next_eval = env_steps + self.cfg.runtime.eval_every
            target = self.cfg.runtime.stop_at_return
            if target is not None and self.last_eval["eval/return"] >= target:
                self.solved = True
        if env_steps >= self.next_checkpoint or final:
            self.save_checkpoint(self.checkpoint_path())
            self.next_checkpoint = env_steps + self.cfg.runtime.checkpoint_every
        if time.monotonic() - self.last_log_time >= self.cfg.runtime.log_every_s or final:
            scalars = self.scalars()
            self.logger.log(env_steps, scalars)
            self.logger.progress(env_steps, scalars)

    def save_interrupted(self) -> None:
        save_interrupted(self.checkpoint_path(), self.save_checkpoint)

    def checkpoint_path(self) -> str:
        return f"{self.cfg.run_dir}/checkpoint.pt"
