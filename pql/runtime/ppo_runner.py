"""`train_ppo(cfg)`: one PPO run, end to end, in one process; and the pieces every on-policy
runner shares (the IMPALA runner uses them too): the rollout worker that steps the envs with a
Gaussian policy, the trajectory layout it fills, and the evaluate/checkpoint/log schedule."""
from __future__ import annotations

import time
from typing import Callable

import torch

from pql.algos.ppo import PPO
from pql.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from pql.config import ConfigError, apply_device_defaults, to_dict
from pql.envs import make_env, to_env_action
from pql.evaluate import evaluate, report_checkpoint_evaluation
from pql.logging import RunLogger
from pql.nets import GaussianActor, ObsNormalizer
from pql.runtime.device import use_device
from pql.runtime.episodes import EpisodeStats
from pql.runtime.monitor import RunSchedule, make_logger

EVAL_SEED_OFFSET = 10_000  # eval envs draw other initial states than the training envs


def trajectory_spec(obs_dim: int, act_dim: int) -> dict:
    """What a rollout records per env step. obs and final_obs are normalised as the policy saw them;
    final_obs is info["final_obs"] (s_{t+1} of the same episode, the bootstrap state)."""
    return {"obs": ((obs_dim,), torch.float32), "action": ((act_dim,), torch.float32),
            "log_prob": ((), torch.float32), "reward": ((), torch.float32),
            "terminated": ((), torch.bool), "truncated": ((), torch.bool),
            "final_obs": ((obs_dim,), torch.float32)}


def alloc_trajectories(spec: dict, leading: tuple, device) -> dict:
    """Zeroed tensors {field: [*leading, *shape]} on `device` (leading: (T, N) or (slots, T, N))."""
    return {k: torch.zeros((*leading, *shape), dtype=dtype, device=device) for k, (shape, dtype) in spec.items()}


class RolloutWorker:
    """Steps the training envs with a Gaussian policy and records T-step trajectories. Owns the
    envs' current observations, the observation normaliser (updated with every observation, as
    in rsl_rl) and the statistics of the training episodes."""

    def __init__(self, env, normalizer: ObsNormalizer):
        self.env, self.normalizer = env, normalizer
        self.obs = env.reset()
        self.episodes = EpisodeStats(env.num_envs, env.device)

    @torch.no_grad()
    def collect(self, policy: GaussianActor, out: dict) -> None:
        """Fill every out[field][t] (out: `trajectory_spec` tensors [T, N, ...]) with the next T steps."""
        for t in range(out["reward"].shape[0]):
            self.normalizer.update(self.obs)
            obs = self.normalizer(self.obs)
            dist = policy.distribution(obs)
            action = dist.sample()
            # The envs get the sample clipped to the action box; the log-prob is of the raw sample.
            next_obs, reward, terminated, truncated, info = self.env.step(to_env_action(action.clamp(-1.0, 1.0), self.env))
            out["obs"][t] = obs
            out["action"][t] = action
            out["log_prob"][t] = dist.log_prob(action).sum(-1)
            out["reward"][t] = reward
            out["terminated"][t] = terminated
            out["truncated"][t] = truncated
            out["final_obs"][t] = self.normalizer(info["final_obs"])
            self.episodes.track(reward, terminated | truncated)
            self.obs = next_obs


def evaluate_policy(eval_env, policy: GaussianActor, normalizer: ObsNormalizer) -> dict:
    """Deterministic evaluation of the mean action, clipped to the box as in training."""
    ret, length = evaluate(eval_env, lambda obs: policy(obs).clamp(-1.0, 1.0), normalizer)
    return {"eval/return": ret, "eval/length": length}


class OnPolicyMonitor(RunSchedule):
    """When an on-policy run evaluates, checkpoints, logs and stops (out of wall time, or solved:
    runtime.max_time_s, runtime.stop_at_return). The runner calls `tick` after every update;
    policy and normaliser are read at evaluation time."""

    def __init__(self, cfg, logger: RunLogger, eval_env, policy, normalizer, save: Callable[[str], None],
                 env_steps: int, updates: int):
        super().__init__(cfg, save)
        self.logger, self.eval_env = logger, eval_env
        self.policy, self.normalizer = policy, normalizer
        self.last_log_time = self.start
        self.next_eval = env_steps + cfg.runtime.eval_every
        self.next_checkpoint = env_steps + cfg.runtime.checkpoint_every
        self.last_counts = (env_steps, updates)
        self.latest: dict = {}

    def tick(self, env_steps: int, updates: int, scalars: Callable[[], dict], final: bool = False) -> None:
        """Evaluate, checkpoint and log what is due. scalars() -> the runner's latest scalars (called
        only when a log line is due: reading tensors is a host sync)."""
        # The learner's update count is its policy's version.
        if env_steps >= self.next_eval or self.final_eval_due(final, updates):
            evaluation = evaluate_policy(self.eval_env, self.policy, self.normalizer)
            self.logger.log(env_steps, evaluation)
            self.latest.update(evaluation)
            self.next_eval = env_steps + self.cfg.runtime.eval_every
            self.evaluated(updates, evaluation["eval/return"])
        if env_steps >= self.next_checkpoint or final:
            self.save_checkpoint(self.checkpoint_path())
            self.next_checkpoint = env_steps + self.cfg.runtime.checkpoint_every
        now = time.monotonic()
        if now - self.last_log_time >= self.cfg.runtime.log_every_s or final:
            dt = max(now - self.last_log_time, 1e-9)
            values = {"perf/env_steps_per_s": (env_steps - self.last_counts[0]) / dt,
                      "updates_per_s/learner": (updates - self.last_counts[1]) / dt,
                      "time/elapsed_s": self.elapsed(),
                      **{k: float(v) for k, v in scalars().items()}}
            self.last_log_time, self.last_counts = now, (env_steps, updates)
            self.logger.log(env_steps, values)
            self.latest.update(values)
            self.logger.progress(env_steps, self.latest)


def setup_run(cfg, algo_cls):
    """What every on-policy run starts with: the device, the seed, the eval envs, the algorithm and
    the observation normaliser, restored from cfg.checkpoint if one is given.
    -> (device, eval_env, algo, normalizer, checkpoint state or None)."""
    device = use_device(apply_device_defaults(cfg))
    if cfg.runtime.torch_threads:
        torch.set_num_threads(cfg.runtime.torch_threads)
    torch.manual_seed(cfg.runtime.seed)
    eval_env = make_env(cfg.task, cfg.task.eval_envs, device, cfg.runtime.seed + EVAL_SEED_OFFSET)
    algo = algo_cls(cfg.algo, eval_env.obs_dim, eval_env.act_dim, device)
    normalizer = ObsNormalizer(eval_env.obs_dim).to(device)
    state = None
    if cfg.checkpoint:
        state = load_checkpoint(cfg.checkpoint)
        written_by = state.get("config", {}).get("algo", {}).get("name")
        if written_by != cfg.algo.name:
            raise ConfigError("checkpoint", cfg.checkpoint,
                              f"a checkpoint written by algo={cfg.algo.name} (this one is from algo={written_by})")
        algo.load_state_dict(state["algo"])
        normalizer.load_state_dict(state["normalizer"])
        set_rng_state(state["rng"])
        if not cfg.test:
            print(f"pql: resuming from {cfg.checkpoint} at {state['env_steps']:,} env steps", flush=True)
    return device, eval_env, algo, normalizer, state


def evaluate_checkpoint(cfg, eval_env, algo, normalizer) -> dict:
    """test=true: evaluate the restored policy and report."""
    result = evaluate_policy(eval_env, algo.policy, normalizer)
    return report_checkpoint_evaluation(cfg, result["eval/return"], result["eval/length"])


def checkpoint_state(cfg, algo, normalizer: ObsNormalizer, env_steps: int, updates: int) -> dict:
    """The checkpoint of an on-policy run (read back by `setup_run`)."""
    return {"algo": algo.state_dict(), "normalizer": normalizer.state_dict(), "env_steps": env_steps,
            "updates": updates, "rng": rng_state(), "config": to_dict(cfg)}


def train_ppo(cfg) -> dict:
    """Train PPO (or, with cfg.test, evaluate cfg.checkpoint). -> the final scalars, "eval/return" included."""
    device, eval_env, ppo, normalizer, resume = setup_run(cfg, PPO)
    if cfg.test:
        return evaluate_checkpoint(cfg, eval_env, ppo, normalizer)
    T, N = cfg.algo.horizon, cfg.task.num_envs
    if cfg.algo.minibatches > T * N:
        raise ConfigError("algo.minibatches", cfg.algo.minibatches,
                          f"at most algo.horizon * task.num_envs = {T * N} (one sample per minibatch at least)")
    env = make_env(cfg.task, N, device, cfg.runtime.seed)
    worker = RolloutWorker(env, normalizer)
    rollout = alloc_trajectories(trajectory_spec(env.obs_dim, env.act_dim), (T, N), device)
    env_steps, updates = (resume["env_steps"], resume["updates"]) if resume else (0, 0)
    logger = make_logger(cfg)
    monitor = OnPolicyMonitor(cfg, logger, eval_env, ppo.policy, normalizer,
                              lambda path: save_checkpoint(path, checkpoint_state(cfg, ppo, normalizer, env_steps, updates)),
                              env_steps, updates)
    info: dict = {}

    def scalars() -> dict:
        return {**info, **worker.episodes.pop()}

    try:
        while env_steps < cfg.runtime.max_env_steps and not monitor.should_stop():
            worker.collect(ppo.policy, rollout)
            info = ppo.update(rollout)
            env_steps += T * N
            updates += cfg.algo.epochs * cfg.algo.minibatches
            monitor.tick(env_steps, updates, scalars)
        monitor.tick(env_steps, updates, scalars, final=True)
    except KeyboardInterrupt:
        monitor.save_interrupted()
        raise
    finally:
        logger.close()
        env.close()
    return monitor.report_done(env_steps, monitor.latest)
