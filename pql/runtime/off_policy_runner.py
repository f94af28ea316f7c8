"""`train_off_policy(cfg)`: one run of an off-policy algorithm (pql, pql_d, sac) on the three-role
runtime, end to end."""
from __future__ import annotations


import torch

from pql.algos import make_off_policy
from pql.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from pql.config import apply_device_defaults, to_dict
from pql.envs import make_env
from pql.evaluate import evaluate, report_checkpoint_evaluation
from pql.nets import ObsNormalizer
from pql.runtime.control import C
from pql.runtime.device import use_device
from pql.runtime.launch import run_processes
from pql.runtime.monitor import Monitor, make_logger
from pql.runtime.sequential import run_sequential
from pql.runtime.shared import make_shared_state

STAGING_SLOTS_EXTRA = 2  # slots beyond max_lag so a learner copying a slot never blocks the actor


def evaluate_checkpoint(cfg, eval_env, algo, device, state: dict) -> tuple[float, float]:
    policy = algo.make_policy().to(device)
    policy.load_state_dict(state["p_learner"]["policy"])
    normalizer = ObsNormalizer(eval_env.obs_dim).to(device)
    normalizer.load_state_dict(state["actor"]["normalizer"])
    return evaluate(eval_env, policy, normalizer)


def train_off_policy(cfg) -> dict:
    """Train (or, with cfg.test, evaluate a checkpoint). -> the final scalars."""
    device = use_device(apply_device_defaults(cfg))
    torch.manual_seed(cfg.runtime.seed)
    eval_env = make_env(cfg.task, cfg.task.eval_envs, device, cfg.runtime.seed + 10_000)
    obs_dim, act_dim = eval_env.obs_dim, eval_env.act_dim
    algo = make_off_policy(cfg.algo, obs_dim, act_dim)
    resume = load_checkpoint(cfg.checkpoint) if cfg.checkpoint else None
    if cfg.test:
        return report_checkpoint_evaluation(cfg, *evaluate_checkpoint(cfg, eval_env, algo, device, resume))

    policy, critic = algo.make_policy(), algo.make_critic()
    ctx = None
    if cfg.runtime.mode == "process":
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
    shared = make_shared_state(cfg.task.num_envs, obs_dim, act_dim, device, cfg.runtime.max_lag + STAGING_SLOTS_EXTRA,
                               policy, critic, ObsNormalizer(obs_dim), ctx)
    c = shared.counters
    if resume is not None:
        c.copy_(resume["counters"])
        c[C.ACTOR_DONE] = c[C.STOP] = c[C.CKPT_REQUEST] = 0
        set_rng_state(resume["rng"])
        print(f"pql: resuming from {cfg.checkpoint} at {int(c[C.ENV_STEPS]):,} env steps", flush=True)
    c[C.A0], c[C.V0], c[C.P0] = c[C.ACTOR_STEPS], c[C.CRITIC_UPDATES], c[C.POLICY_UPDATES]
    c[C.CONSUMED_V] = c[C.CONSUMED_P] = c[C.ACTOR_STEPS]
    c[C.WARMUP] = max(cfg.algo.warmup_steps, 1)

    def save(path: str, parts: dict, counters: torch.Tensor) -> None:
        save_checkpoint(path, {**parts, "counters": counters, "rng": rng_state(), "config": to_dict(cfg)})

    logger = make_logger(cfg)
    monitor = Monitor(cfg, shared, eval_env, algo, logger, device, save_checkpoint=None)
    try:
        if cfg.runtime.mode == "sequential":
            run_sequential(cfg, shared, monitor, algo, obs_dim, act_dim, resume, save)
        else:
            run_processes(cfg, shared, monitor, obs_dim, act_dim, resume, save)
    finally:
        logger.close()
    return monitor.report_done(int(c[C.ENV_STEPS]), {**monitor.scalars(), **monitor.last_eval})
