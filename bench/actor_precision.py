"""What a low-precision actor copy of the policy buys (actor.precision=fp32|bf16|int8), and what
it costs in return.

    python bench/actor_precision.py [--task Ant] [--algo pql] [--device auto] [--seconds 3]
                                    [--train-seconds 240 | --checkpoint PATH] [--eval-envs 32]
                                    [--csv PATH]

Prints three tables:
1. policy inference: the actor's call (explore on normalised observations) in ms at the task's
   CPU default num_envs and at 4096, and the cost of refreshing the inference copy, which the actor
   pays at every policy version it picks up (every actor step at runtime.actor_pull_every=1);
2. the real actor role's env steps/s, with a new policy version before every step (as in a run,
   where the P-learner publishes beta_av/beta_pv times per actor step) and with a fixed policy;
3. the evaluation return of one policy, trained for --train-seconds (sequential mode) or read
   from --checkpoint, run at each precision on the same eval envs and seeds, with the mean
   |Δaction| to fp32 on the fp32 policy's own trajectory.
int8 (torch's dynamic quantisation) runs on CPU only; it shows n/a on CUDA.
--csv also writes every figure as a row (section, precision, num_envs, quantity, value).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from learner import CsvRows, standalone_actor, timed

from pql.checkpoint import load_checkpoint
from pql.config import announce, load_config, resolve
from pql.envs import ObsLayout, to_env_action
from pql.nets import ObsNormalizer
from pql.runtime.off_policy.precision import InferenceCopy
from pql.runtime.off_policy.roles import make_rules

PRECISIONS = ("fp32", "bf16", "int8")


def supported(precision: str, device: torch.device) -> bool:
    return precision != "int8" or device.type == "cpu"


def inference_ms(rules, policy, obs_dim: int, num_envs: int, device, seconds: float) -> dict:
    """-> {precision: (ms per explore call for num_envs observations, ms per refresh of the copy)}."""
    obs = torch.randn(num_envs, obs_dim, device=device)
    noise_std = torch.full((num_envs, 1), 0.2, device=device)
    out = {}
    for precision in PRECISIONS:
        if not supported(precision, device):
            continue
        acting = InferenceCopy(policy, precision)
        act = 1e3 / timed(lambda: rules.explore(acting.module, obs, noise_std), device, seconds)
        copy = 1e3 / timed(acting.refresh, device, seconds / 2)
        out[precision] = (act, copy)
    return out


def actor_steps_per_s(cfg, obs_dim: int, act_dim: int, device, seconds: float, resync: bool) -> float:
    """Env steps/s of the real actor role with nothing consuming its output but this loop.
    resync: publish the policy before every step, so the actor refreshes its inference copy."""
    rules = make_rules(cfg.algo, ObsLayout.shared(obs_dim), act_dim)
    policy = rules.make_policy().to(device)
    actor, actor_step = standalone_actor(cfg, rules, obs_dim, act_dim, device)
    shared_policy = actor.shared.weights["policy"]
    shared_policy.publish(policy)

    def step():
        if resync:
            shared_policy.publish(policy)
        actor_step()

    return timed(step, device, seconds) * cfg.task.num_envs


def trained_state(args) -> dict:
    """The checkpoint of a short training run (or --checkpoint), its tensors on the CPU."""
    if args.checkpoint:
        return load_checkpoint(args.checkpoint)
    from pql.runtime import train

    run_dir = tempfile.mkdtemp(prefix="actor_precision_")
    raw = {
        "task": {"name": args.task},
        "algo": {"name": args.algo},
        "runtime": {
            "device": args.device,
            "mode": "sequential",
            "max_time_s": args.train_seconds,
            "max_env_steps": 10**12,
            "eval_every": 10**12,
            "checkpoint_every": 10**12,
            "log_every_s": 60,
            "seed": args.seed,
        },
        "run_dir": run_dir,
    }
    train(load_config(raw))
    print(f"trained policy: {run_dir}/checkpoint.pt (rerun with --checkpoint to reuse it)")
    return load_checkpoint(os.path.join(run_dir, "checkpoint.pt"))


@torch.no_grad()
def eval_returns(env, policy, normalizer) -> torch.Tensor:
    """The return of one episode per env from a fresh env's first reset. -> [num_envs]."""
    obs = env.reset()
    returns = torch.zeros(env.num_envs, device=env.device)
    running = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
    for _ in range(env.max_episode_steps):
        obs, reward, terminated, truncated, _ = env.step(to_env_action(policy(normalizer(obs)), env))
        returns += reward * running
        running &= ~(terminated | truncated)
        if not running.any():
            break
    return returns


@torch.no_grad()
def action_gap(env, policies: dict, normalizer, steps: int = 200) -> dict:
    """Mean |a_precision − a_fp32| over the states the fp32 policy visits."""
    gaps = {p: 0.0 for p in policies}
    obs = env.reset()
    for _ in range(steps):
        x = normalizer(obs)
        reference = policies["fp32"](x)
        for precision, policy in policies.items():
            gaps[precision] += float((policy(x) - reference).abs().mean()) / steps
        obs = env.step(to_env_action(reference, env))[0]
    return gaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="Ant")
    parser.add_argument("--algo", default="pql", choices=("pql", "pql_d", "sac"))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seconds", type=float, default=3.0, help="timing window per measurement")
    parser.add_argument("--train-seconds", type=float, default=240.0)
    parser.add_argument("--checkpoint", default=None, help="a checkpoint to evaluate instead of training one")
    parser.add_argument("--eval-envs", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", default=None, help="also write the figures to this CSV file")
    args = parser.parse_args()
    csv_rows = CsvRows(args.csv, ["section", "precision", "num_envs", "quantity", "value"])

    def record(section: str, precision: str, num_envs: int, quantity: str, value: float) -> None:
        csv_rows.write(section=section, precision=precision, num_envs=num_envs, quantity=quantity, value=f"{value:.6g}")

    import tasks

    cfg = load_config(
        {
            "task": {"name": args.task},
            "algo": {"name": args.algo},
            "runtime": {"device": args.device},
            "run_dir": tempfile.gettempdir(),
        }
    )
    resolved = resolve(cfg)
    announce(resolved)
    cfg, device = resolved.config, torch.device(resolved.devices.main)
    probe = tasks.make(args.task, num_envs=1, device=device, seed=0)
    obs_dim, act_dim = probe.obs_dim, probe.act_dim
    probe.close()
    rules = make_rules(cfg.algo, ObsLayout.shared(obs_dim), act_dim)
    policy = rules.make_policy().to(device)
    batches = sorted({cfg.task.num_envs, 4096})
    threads = torch.get_num_threads()

    print(
        f"\n1. policy inference, {args.algo} policy {cfg.algo.net.actor_hidden}, {args.task} obs_dim {obs_dim}, "
        f"device {device}, torch threads {threads}"
    )
    print(
        f"{'precision':<10}"
        + "".join(f"{f'explore ms @{n}':>18}{'speed-up':>10}" for n in batches)
        + f"{'copy ms (per sync)':>20}"
    )
    rows = {n: inference_ms(rules, policy, obs_dim, n, device, args.seconds) for n in batches}
    for n, by_precision in rows.items():
        for precision, (act, copy) in by_precision.items():
            record("inference", precision, n, "explore_ms", act)
            record("inference", precision, n, "copy_ms", copy)
    for precision in PRECISIONS:
        if not supported(precision, device):
            print(f"{precision:<10}" + f"{'n/a':>18}{'':>10}" * len(batches))
            continue
        line = f"{precision:<10}"
        for n in batches:
            ms = rows[n][precision][0]
            line += f"{ms:>18.3f}{rows[n]['fp32'][0] / ms:>9.2f}x"
        print(line + f"{rows[batches[0]][precision][1]:>20.3f}")

    print(f"\n2. actor role, {args.task} x{cfg.task.num_envs}: env steps/s")
    print(f"{'precision':<10}{'new policy every step':>24}{'speed-up':>10}{'fixed policy':>16}{'speed-up':>10}")
    base = {}
    for precision in PRECISIONS:
        if not supported(precision, device):
            print(f"{precision:<10}{'n/a':>24}")
            continue
        cfg.actor.precision = precision
        rates = [actor_steps_per_s(cfg, obs_dim, act_dim, device, args.seconds, resync) for resync in (True, False)]
        record("actor", precision, cfg.task.num_envs, "env_steps_per_s_new_policy_every_step", rates[0])
        record("actor", precision, cfg.task.num_envs, "env_steps_per_s_fixed_policy", rates[1])
        base.setdefault("fp32", rates)
        print(
            f"{precision:<10}{rates[0]:>24.0f}{rates[0] / base['fp32'][0]:>9.2f}x"
            f"{rates[1]:>16.0f}{rates[1] / base['fp32'][1]:>9.2f}x"
        )

    state = trained_state(args)
    trained = rules.make_policy().to(device)
    trained.load_state_dict(state["policy"])
    normalizer = ObsNormalizer(obs_dim).to(device)
    normalizer.load_state_dict(state["normalizer"])
    policies = {p: InferenceCopy(trained, p).module for p in PRECISIONS if supported(p, device)}
    # A fresh env with the same seed per precision: every policy starts from the same states.
    returns = {
        p: eval_returns(
            tasks.make(args.task, num_envs=args.eval_envs, device=device, seed=args.seed + 10_000), policy, normalizer
        )
        for p, policy in policies.items()
    }
    gaps = action_gap(
        tasks.make(args.task, num_envs=args.eval_envs, device=device, seed=args.seed + 20_000), policies, normalizer
    )
    n = args.eval_envs
    print(f"\n3. eval return of one trained {args.algo} policy, {n} {args.task} episodes (same seeds)")
    print(f"{'precision':<10}{'mean return':>14}{'± s.e.':>10}{'Δ to fp32':>12}{'mean |Δa| to fp32':>20}")
    for precision, r in returns.items():
        se = float(r.std()) / n**0.5
        record("eval", precision, n, "mean_return", float(r.mean()))
        record("eval", precision, n, "return_standard_error", se)
        record("eval", precision, n, "mean_abs_action_gap_to_fp32", gaps[precision])
        print(
            f"{precision:<10}{float(r.mean()):>14.1f}{se:>10.1f}{float(r.mean() - returns['fp32'].mean()):>12.1f}"
            f"{gaps[precision]:>20.4f}"
        )
    csv_rows.close()


if __name__ == "__main__":
    main()
