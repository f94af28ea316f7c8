"""One run, start to finish, the same for every algorithm:

    settings line, device, seed → evaluation envs → resume state (checked against algo and task)
    → test=true: evaluate the checkpoint's policy, done
    → runner → logger → runner.run(monitor) → final evaluation and checkpoint → done line

A runner supplies only what differs (see `Runner`); `Monitor` decides, for all of them, when to
evaluate, checkpoint, log and stop. Every checkpoint has one layout:

    {"algo": name, "task": name, "config": the resolved config, "counters": {name: int},
     "rng": this process's RNG streams, "policy": state_dict, "normalizer": state_dict,
     "roles": {role: that role's training state}}

"policy" and "normalizer" are what an evaluation (test=true) or a deployment needs; "roles" is
what a resume needs beyond them.
"""
from __future__ import annotations

import os
import time
from typing import Protocol

import torch
from torch import nn

from pql.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from pql.config import ALGORITHMS, ConfigError, apply_device_defaults, to_dict
from pql.envs import build_env
from pql.evaluate import evaluate
from pql.logging import RunLogger, WandbSettings
from pql.nets import ObsNormalizer
from pql.runtime.device import use_device

EVAL_SEED_OFFSET = 10_000  # evaluation envs draw other initial states than the training envs


class Runner(Protocol):
    """What a runner supplies to `train`: `__init__(cfg, device, obs_dim, act_dim, resume)` builds
    its roles, restored from `resume` (the checkpoint's state, or None), and these."""

    @staticmethod
    def make_policy(cfg, obs_dim: int, act_dim: int) -> nn.Module:
        """An untrained policy module of this algorithm (test=true loads the checkpoint's into it)."""

    def run(self, monitor: "Monitor") -> None:
        """Train until the env-step budget is spent or monitor.should_stop(), calling
        monitor.tick() as it goes and monitor.tick(final=True) last, while the roles still run."""

    def counts(self) -> dict:
        """{"env_steps": n, role: updates of that role, ...}, for the rates."""

    def scalars(self) -> dict:
        """The latest losses and training-episode statistics."""

    def policy_version(self) -> int:
        """The version of the newest policy (0: none made yet, nothing to evaluate)."""

    def latest_policy(self) -> tuple:
        """(policy module, normalizer, version) of the newest policy, for evaluation."""

    def checkpoint(self) -> dict:
        """{"counters", "policy", "normalizer", "roles"} of the checkpoint layout above."""

    def close(self) -> None:
        """Release what run() started (processes, envs); called however the run ends."""


def train(cfg) -> dict:
    """Train (or, with cfg.test, evaluate cfg.checkpoint) with the runner of cfg.algo.
    -> the final scalars ("eval/return" included)."""
    runner_cls = ALGORITHMS[cfg.algo.name].load_runner()
    device = use_device(apply_device_defaults(cfg))  # prints the settings line
    if cfg.runtime.torch_threads:
        torch.set_num_threads(cfg.runtime.torch_threads)
    torch.manual_seed(cfg.runtime.seed)
    eval_env = build_env(cfg.task, cfg.task.eval_envs, device, cfg.runtime.seed + EVAL_SEED_OFFSET)
    obs_dim, act_dim = eval_env.obs_dim, eval_env.act_dim
    resume = load_resume(cfg)
    if cfg.test:
        return evaluate_checkpoint(cfg, eval_env, runner_cls.make_policy(cfg, obs_dim, act_dim), resume, device)
    runner = runner_cls(cfg, device, obs_dim, act_dim, resume)
    if resume is not None:
        set_rng_state(resume["rng"])  # after the networks are built: building them draws from it
        print(f"pql: resuming from {cfg.checkpoint} at {resume['counters']['env_steps']:,} env steps", flush=True)
    logger = RunLogger(cfg.run_dir, to_dict(cfg), cfg.runtime.max_env_steps,
                       wandb=WandbSettings(**vars(cfg.wandb)) if cfg.wandb.activate else None,
                       progress_every_s=cfg.runtime.log_every_s, max_time_s=cfg.runtime.max_time_s)
    monitor = Monitor(cfg, runner, eval_env, logger)
    try:
        runner.run(monitor)
    except KeyboardInterrupt:
        monitor.save_interrupted()  # the roles ignore SIGINT, so they can still hand in their states
        raise
    finally:
        runner.close()
        logger.close()
    return monitor.report_done()


def load_resume(cfg) -> dict | None:
    """The state of cfg.checkpoint (None without one). A checkpoint resumes only the algorithm
    and task that wrote it: anything else is a config error, before a network is built."""
    if not cfg.checkpoint:
        return None
    state = load_checkpoint(cfg.checkpoint)
    for key, current in (("algo", cfg.algo.name), ("task", cfg.task.name)):
        if state[key] != current:
            raise ConfigError(key, current, f"{state[key]}: {cfg.checkpoint} was written by algo={state['algo']} "
                                            f"task={state['task']}")
    return state


def evaluate_checkpoint(cfg, eval_env, policy: nn.Module, state: dict, device) -> dict:
    """test=true: evaluate the checkpoint's policy and print what it scored. -> the eval scalars."""
    policy = policy.to(device)
    policy.load_state_dict(state["policy"])
    normalizer = ObsNormalizer(eval_env.obs_dim).to(device)
    normalizer.load_state_dict(state["normalizer"])
    ret, length = evaluate(eval_env, policy, normalizer)
    print(f"pql: evaluated {cfg.checkpoint} on {cfg.task.eval_envs} {cfg.task.name} envs: "
          f"mean return {ret:.2f}, mean length {length:.1f}", flush=True)
    return {"eval/return": ret, "eval/length": length}


class Monitor:
    """The main process's schedule for every runner: evaluations every runtime.eval_every env
    steps, checkpoints every runtime.checkpoint_every, a logged line every runtime.log_every_s,
    and when to stop (runtime.max_time_s, or solved: an evaluation reached runtime.stop_at_return)."""

    def __init__(self, cfg, runner: Runner, eval_env, logger: RunLogger):
        self.cfg, self.runner, self.eval_env, self.logger = cfg, runner, eval_env, logger
        self.start = time.monotonic()
        self.solved = False
        self.last_eval_version = -1  # the policy version evaluated last
        counts = runner.counts()
        self.next_eval = counts["env_steps"] + cfg.runtime.eval_every
        self.next_checkpoint = counts["env_steps"] + cfg.runtime.checkpoint_every
        self.last_counts, self.last_log_time = counts, self.start
        self.latest: dict = {}  # the latest value of every scalar logged: the run's result

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def should_stop(self) -> bool:
        limit = self.cfg.runtime.max_time_s
        return self.solved or (limit is not None and self.elapsed() >= limit)

    def tick(self, final: bool = False) -> None:
        """Evaluate, checkpoint and log whatever is due at the current env step count. The final
        evaluation is of the final policy, unless that one was just evaluated; a run stopped as
        solved reports the evaluation that solved it."""
        counts = self.runner.counts()
        env_steps = counts["env_steps"]
        version = self.runner.policy_version()
        final_eval_due = final and not self.solved and version != self.last_eval_version
        if version and (env_steps >= self.next_eval or final_eval_due):
            self._log(env_steps, self._evaluate())
            self.next_eval = env_steps + self.cfg.runtime.eval_every
        if env_steps >= self.next_checkpoint or final:
            self.save_checkpoint(self.checkpoint_path())
            self.next_checkpoint = env_steps + self.cfg.runtime.checkpoint_every
        now = time.monotonic()
        if now - self.last_log_time >= self.cfg.runtime.log_every_s or final:
            dt = max(now - self.last_log_time, 1e-9)
            rates = {("perf/env_steps_per_s" if k == "env_steps" else f"updates_per_s/{k}"): (v - self.last_counts[k]) / dt
                     for k, v in counts.items()}
            self.last_counts, self.last_log_time = counts, now
            self._log(env_steps, {**rates, **self.runner.scalars(), "time/elapsed_s": self.elapsed()})
            self.logger.progress(env_steps, self.latest)

    def _log(self, env_steps: int, scalars: dict) -> None:
        scalars = {k: float(v) for k, v in scalars.items()}
        self.logger.log(env_steps, scalars)
        self.latest.update(scalars)

    def _evaluate(self) -> dict:
        """Evaluate the newest policy with the newest observation statistics."""
        policy, normalizer, version = self.runner.latest_policy()
        ret, length = evaluate(self.eval_env, policy, normalizer)
        self.last_eval_version = version
        target = self.cfg.runtime.stop_at_return
        if target is not None and ret >= target:
            self.solved = True
        return {"eval/return": ret, "eval/length": length, "eval/policy_version": version}

    def checkpoint_path(self) -> str:
        return os.path.join(self.cfg.run_dir, "checkpoint.pt")

    def save_checkpoint(self, path: str) -> None:
        cfg = self.cfg
        save_checkpoint(path, {"algo": cfg.algo.name, "task": cfg.task.name, "config": to_dict(cfg),
                               "rng": rng_state(), **self.runner.checkpoint()})

    def save_interrupted(self) -> None:
        """Ctrl-C: write a checkpoint of where the run stands, to resume from."""
        path = self.checkpoint_path()
        print(f"\npql: interrupted; writing {path}", flush=True)
        self.save_checkpoint(path)

    def report_done(self) -> dict:
        """Print the run's last line. -> the run's final scalars."""
        print(f"pql: done: {self.last_counts['env_steps']:,} env steps in {self.elapsed():.0f}s, "
              f"eval return {self.latest.get('eval/return', float('nan')):.2f}; run dir {self.cfg.run_dir}", flush=True)
        return self.latest
