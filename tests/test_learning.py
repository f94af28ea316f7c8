"""Learning tests: seeded, on CPU, in a few minutes. InvertedPendulum's return is capped at
1000 (one per step alive); a random policy falls within a few steps (return < 20)."""
import pytest
import torch

import tasks
from pql.envs import to_env_action
from pql.runtime.trainer import train

PENDULUM = ["task=InvertedPendulum", "task.num_envs=16", "runtime.max_env_steps=300000", "runtime.max_time_s=170",
            "runtime.eval_every=2000", "runtime.stop_at_return=900", "runtime.log_every_s=15", "algo.batch_size=256",
            "runtime.checkpoint_every=1000000000"]


def solve_pendulum(make_config, overrides):
    cfg = make_config(PENDULUM + overrides)
    final = train(cfg)
    assert final["eval/return"] >= 900, final
    return final


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sequential", "process"])
def test_pql_solves_inverted_pendulum(make_config, mode):
    solve_pendulum(make_config, [f"runtime.mode={mode}"])


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


ANT_MARGIN = 300.0  # over the uniform-random policy's eval return


@pytest.mark.slow
def test_short_ant_run_beats_random_policy(make_config):
    random_return = random_policy_return("Ant", 10, seed=10_000)
    cfg = make_config(["task=Ant", "runtime.mode=sequential", "runtime.max_env_steps=10000000", "runtime.max_time_s=150",
                       "runtime.eval_every=1000000000", "runtime.log_every_s=30", "algo.batch_size=256",
                       "runtime.checkpoint_every=1000000000"])
    final = train(cfg)
    print(f"Ant: random policy {random_return:.1f}, pql after {final['time/elapsed_s']:.0f}s {final['eval/return']:.1f}")
    assert final["eval/return"] >= random_return + ANT_MARGIN, (random_return, final)
