"""Learning tests: seeded, on CPU, in a few minutes. InvertedPendulum's return is capped at
1000 (one per step alive); a random policy falls within a few steps (return < 20)."""

import numpy as np
import pytest
import torch

from pql.checkpoint import load_checkpoint
from pql.envs import build_env, to_env_action
from pql.logging import EVAL_RETURN, METRICS_CSV, read_metrics
from pql.nets import ObsNormalizer
from pql.runtime import train
from pql.runtime.off_policy.roles import make_rules
from pql.runtime.settings import EVAL_SEED_OFFSET

# runtime.eval_max_share=1: an evaluation every eval_every env steps, however long it takes, so
# that a run stops at the first that solves it (the default spacing by time would let it go on).
PENDULUM = [
    "task=InvertedPendulum",
    "task.num_envs=16",
    "runtime.max_env_steps=2000000",
    "runtime.max_time_s=170",
    "runtime.eval_every=2000",
    "runtime.eval_max_share=1",
    "runtime.stop_at_return=900",
    "runtime.log_every_s=15",
    "runtime.checkpoint_every=1000000000",
    "algo.net.actor_hidden=[64,64]",
    "algo.net.critic_hidden=[64,64]",
]
OFF_POLICY = ["algo.batch_size=256", "algo.beta_av=8"]  # the on-policy algorithms have neither


# A budget of env steps rather than wall time where the run is sequential: a seed then learns the
# same curve however fast the machine, as the InvertedDoublePendulum test below found, and one
# thread, so that other work on the CPU cannot slow the updates. Seeds 0, 1 and 2 on this project's
# 2-core VM first scored >= 900 at 8k, 8k, 8k env steps (pql), 8k, 10k, 10k (pql_d), 12k, 8k, 10k
# (proportional priorities), 10k, 18k, 8k (rank-based) and 88k, 31k, 111k (SAC, whose seed 0 took
# 161 s there: CI's 170-s wall budget failed it on a slower day).
STEP_BUDGET = ["runtime.mode=sequential", "runtime.torch_threads=1", "runtime.max_time_s=900"]


def solve_pendulum(make_config, overrides, max_env_steps=None):
    """Train until an evaluation reaches 900 (of 1000): within max_env_steps in sequential mode,
    else within 170 s; -> the final scalars."""
    algo = next((o.split("=", 1)[1] for o in overrides if o.startswith("algo=")), "pql")
    budget = [] if max_env_steps is None else STEP_BUDGET + [f"runtime.max_env_steps={max_env_steps}"]
    cfg = make_config(PENDULUM + (OFF_POLICY if algo in ("pql", "pql_d", "sac") else []) + budget + overrides)
    final = train(cfg)
    assert final["eval/return"] >= 900, final
    return final


@pytest.mark.slow
def test_pql_solves_inverted_pendulum(make_config):
    solve_pendulum(make_config, [], max_env_steps=40_000)


@pytest.mark.slow
def test_pql_solves_inverted_pendulum_with_its_roles_in_processes(make_config):
    solve_pendulum(make_config, ["runtime.mode=process"])


@pytest.mark.slow
@pytest.mark.parametrize("priority_mode", ["proportional", "rank"])
def test_pql_with_prioritized_replay_solves_inverted_pendulum(make_config, priority_mode):
    solve_pendulum(
        make_config, ["replay.kind=prioritized", f"replay.priority_mode={priority_mode}"], max_env_steps=40_000
    )


# InvertedDoublePendulum: about 9.35 per step balanced, so at most ~9,350; a policy of uniform random
# actions scores 46 (episodes of 6 steps) and one of zero force 85 (10 steps), measured over 100
# envs. The budget is env steps, not wall time: in sequential mode a seed learns the same curve
# however fast the machine (CI's run matched this VM's, evaluation for evaluation), while a 120 s
# budget passed at ~720 env steps/s and failed in CI at ~380. On this project's 2-core VM (~380 env
# steps/s) seeds 0, 1 and 2 first scored >= 9,000 at 53k, 53k and 29k env steps (seed 0 in
# 140 s), and seed 0 then stayed at 9,358 through 120k: 80k is the budget, and the time limit only
# stops a run on a machine far slower. torch_threads=1: on a CPU that other work keeps busy, torch's
# default of a thread per core made each update 50 times slower there (25 ms against 0.5 ms).
DOUBLE_PENDULUM = [
    "task=InvertedDoublePendulum",
    "task.num_envs=16",
    "runtime.mode=sequential",
    "runtime.torch_threads=1",
    "runtime.max_env_steps=80000",
    "runtime.max_time_s=900",
    "runtime.eval_every=4000",
    "runtime.eval_max_share=1",
    "runtime.stop_at_return=9000",
    "runtime.log_every_s=15",
    "runtime.checkpoint_every=1000000000",
    "algo.batch_size=256",
    "algo.net.actor_hidden=[64,64]",
    "algo.net.critic_hidden=[64,64]",
]


@pytest.mark.slow
def test_pql_solves_inverted_double_pendulum(make_config):
    final = train(make_config(DOUBLE_PENDULUM))
    assert final["eval/return"] >= 9000, final


@torch.no_grad()
def forward_distance_and_return(env, act) -> tuple[float, float]:
    """Mean x-distance (m) the torso travels in one episode per env under act(obs), and the mean return."""
    obs = env.reset()
    start = env.task.position(env.physics.state)[:, 0].clone()
    distance, returns = torch.zeros(env.num_envs), torch.zeros(env.num_envs)
    running = torch.ones(env.num_envs, dtype=torch.bool)
    for _ in range(env.max_episode_steps):
        obs, reward, term, trunc, _ = env.step(to_env_action(act(obs), env))
        returns += reward * running
        running &= ~(term | trunc)
        # An env that just finished was reset inside step: its distance stays the one before.
        distance = torch.where(running, env.task.position(env.physics.state)[:, 0] - start, distance)
        if not running.any():
            break
    return float(distance.mean()), float(returns.mean())


# Ant with the CPU defaults (what README's command trains), in sequential mode and on an env-step
# budget rather than a wall-time one (about 5 minutes on this project's 2-core VM; the time cap is
# raised so that a slower machine runs the same steps, not fewer). On that VM two runs of the
# same code end bit-for-bit the same, but a change of code or seed moves the final
# evaluation by hundreds (docs/benchmarks.md, "Learning tests", has the figures). An Ant that stands
# still scores about 1,000 (one per step alive, no torque spent) and goes nowhere; the untrained
# policy stands, the first updates make it fall, and PQL learns back from its own data. So the
# test asks that the final policy beats standing still, and that it walks: its torso travels at
# least ANT_MIN_DISTANCE along +x in an episode.
ANT_ENV_STEPS = 300_000
ANT_MIN_DISTANCE = 30.0  # metres; standing still: ~0.1; it was 10 before the CPU defaults


@pytest.mark.slow
def test_ant_learns_to_walk(make_config, tmp_path):
    cfg = make_config(
        [
            "task=Ant",
            "runtime.mode=sequential",
            f"runtime.max_env_steps={ANT_ENV_STEPS}",
            "runtime.max_time_s=3600",
            "runtime.eval_every=20000",
            "runtime.log_every_s=30",
            "runtime.checkpoint_every=1000000000",
        ]
    )
    final = train(cfg)
    evals = read_metrics(str(tmp_path / METRICS_CSV))[EVAL_RETURN]
    state = load_checkpoint(tmp_path / "checkpoint.pt")
    assert state["counters"]["env_steps"] >= ANT_ENV_STEPS, state["counters"]
    env = build_env(cfg.task, cfg.task.eval_envs, "cpu", cfg.runtime.seed + EVAL_SEED_OFFSET)
    policy = make_rules(cfg.algo, env.obs_dim, env.act_dim).make_policy()
    policy.load_state_dict(state["policy"])
    normalizer = ObsNormalizer(env.obs_dim)
    normalizer.load_state_dict(state["normalizer"])
    distance, _ = forward_distance_and_return(env, lambda obs: policy(normalizer(obs)))
    standing_distance, standing = forward_distance_and_return(env, lambda obs: torch.zeros(len(obs), env.act_dim))
    print(
        f"Ant: standing still {standing:.0f} ({standing_distance:.2f} m); pql evaluations "
        f"{np.round(evals[np.isfinite(evals)]).tolist()} over {final['time/elapsed_s']:.0f}s; final policy "
        f"walks {distance:.1f} m"
    )
    assert final[EVAL_RETURN] > standing, (standing, final)
    assert distance >= ANT_MIN_DISTANCE, distance
