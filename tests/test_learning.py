"""Learning tests: seeded, on CPU, in a few minutes. InvertedPendulum's return is capped at
1000 (one per step alive); a random policy falls within a few steps (return < 20)."""
import numpy as np
import pytest
import torch

import tasks
from pql.logging import EVAL_RETURN, METRICS_CSV, read_metrics
from pql.envs import to_env_action
from pql.runtime import train

PENDULUM = ["task=InvertedPendulum", "task.num_envs=16", "runtime.max_env_steps=2000000", "runtime.max_time_s=170",
            "runtime.eval_every=2000", "runtime.stop_at_return=900", "runtime.log_every_s=15",
            "runtime.checkpoint_every=1000000000", "algo.net.actor_hidden=[64,64]", "algo.net.critic_hidden=[64,64]"]
OFF_POLICY = ["algo.batch_size=256"]  # the on-policy algorithms have no replay batch


def solve_pendulum(make_config, overrides):
    """Train until an evaluation reaches 900 (of 1000), within 170 s; -> the final scalars."""
    algo = next((o.split("=", 1)[1] for o in overrides if o.startswith("algo=")), "pql")
    cfg = make_config(PENDULUM + (OFF_POLICY if algo in ("pql", "pql_d", "sac") else []) + overrides)
    final = train(cfg)
    assert final["eval/return"] >= 900, final
    return final


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sequential", "process"])
def test_pql_solves_inverted_pendulum(make_config, mode):
    solve_pendulum(make_config, [f"runtime.mode={mode}"])


@pytest.mark.slow
@pytest.mark.parametrize("priority_mode", ["proportional", "rank"])
def test_pql_with_prioritized_replay_solves_inverted_pendulum(make_config, priority_mode):
    solve_pendulum(make_config, ["runtime.mode=sequential", "replay.kind=prioritized",
                                 f"replay.priority_mode={priority_mode}"])


def random_policy_return(name: str, num_envs: int, seed: int) -> float:
    env = tasks.make(name, num_envs=num_envs, device="cpu", seed=seed)
    env.reset()
    gen = torch.Generator().manual_seed(seed)
    returns, running = torch.zeros(num_envs), torch.ones(num_envs, dtype=torch.bool)
    for _ in range(env.max_episode_steps):
        action = torch.rand((num_envs, env.act_dim), generator=gen) * 2 - 1
        _, reward, term, trunc, _ = env.step(to_env_action(action, env))
        returns += reward * running
        running &= ~(term | trunc)
        if not running.any():
            break
    return float(returns.mean())


ANT_MARGIN = 150.0
# Ant on two CPU cores runs ~60 critic updates/s, so three minutes is ~10k updates: enough to
# learn to stay up and stop wasting torque, not to walk. The untrained tanh policy outputs small
# torques and stands still (return ~900); the first critic updates make it fall (return < 0) and
# PQL then recovers from its own experience. So the test asks for both: the final policy beats
# the uniform-random policy by ANT_MARGIN, and it improved by ANT_MARGIN on its worst evaluation
# (which an untrained or frozen policy could not). These settings learn more steadily on a CPU
# than the GPU-sized defaults (README, "Ant on a CPU").
ANT_CPU = ["algo.batch_size=256", "algo.warmup_steps=400", "algo.noise_std_max=0.4", "algo.actor_lr=1e-4",
           "algo.tau=0.01"]


@pytest.mark.slow
def test_short_ant_run_beats_random_policy(make_config, tmp_path):
    random_return = random_policy_return("Ant", 10, seed=10_000)
    cfg = make_config(["task=Ant", "runtime.mode=sequential", "runtime.max_env_steps=10000000", "runtime.max_time_s=180",
                       "runtime.eval_every=12800", "runtime.log_every_s=30", "runtime.checkpoint_every=1000000000",
                       *ANT_CPU])
    final = train(cfg)
    evals = read_metrics(str(tmp_path / METRICS_CSV))[EVAL_RETURN]
    evals = evals[np.isfinite(evals)]
    print(f"Ant: random policy {random_return:.1f}; pql evaluations {np.round(evals).tolist()} "
          f"over {final['time/elapsed_s']:.0f}s")
    assert final[EVAL_RETURN] >= random_return + ANT_MARGIN, (random_return, final)
    assert final[EVAL_RETURN] >= evals.min() + ANT_MARGIN, evals
