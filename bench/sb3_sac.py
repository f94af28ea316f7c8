"""The peer pql's CPU defaults are measured against: Stable-Baselines3's SAC with RL Baselines3
Zoo's settings on the Gymnasium MuJoCo v5 env of a pql task, for the wall time of README's
command on a CPU.

    pip install stable-baselines3==2.9.2     # not a pql dependency
    python bench/sb3_sac.py --task Hopper --seed 0 --out runs/sb3_Hopper_s0

Writes OUT/metrics.csv (env steps, training wall time, evaluation return and length) and
OUT/config.json in pql's formats, so `python -m pql.plot OUT pql_run_dir` draws both, and prints
the figures. Evaluation matches pql's: the deterministic policy on a separate env, 10 episodes.
Its time is left out of the budget, which favours the peer: pql's evaluation shares the cores
with its training.

The settings are the Zoo's `hyperparams/sac.yml` (rl_zoo3 2.9.2) for the MuJoCo tasks it
tunes: SB3's SAC defaults with 10,000 random steps before learning, and γ = 0.999 on Swimmer.
The Zoo has no SAC entry for the other tasks, which get SB3's defaults; so do the DeepMind
Control Suite's (`--task dmc/cheetah-run --action-repeat 2`), through dm_control's own
environment behind a thin Gymnasium wrapper (bench/dmc_gym.py). Env steps count actions: at
action repeat 2, one is two control steps.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

TASKS = (
    "Ant",
    "HalfCheetah",
    "Hopper",
    "Humanoid",
    "Walker2d",
    "Swimmer",
    "InvertedPendulum",
    "InvertedDoublePendulum",
    "HumanoidStandup",
    "Reacher",
    "Pusher",
)
ZOO_SETTINGS = {
    **{t: {"learning_starts": 10_000} for t in ("Ant", "HalfCheetah", "Hopper", "Humanoid", "Walker2d")},
    "Swimmer": {"learning_starts": 10_000, "gamma": 0.999},
}
COLUMNS = ("env_steps", "wall_time_s", "eval/return", "eval/length", "time/eval_s")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--task",
        required=True,
        metavar="TASK",
        help="a pql task name: for one of " + ", ".join(TASKS) + " the env is Gymnasium's <TASK>-v5; "
        "for dmc/<domain>-<task>, dm_control's own environment (bench/dmc_gym.py)",
    )
    p.add_argument(
        "--action-repeat", type=int, default=1, help="control steps per action (dmc/ tasks; pql's task.action_repeat)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-time-s",
        type=float,
        default=885.0,
        help="training wall time in seconds, evaluations left out (pql's CPU default budget)",
    )
    p.add_argument("--eval-every", type=int, default=10_000, help="env steps between evaluations")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--out", required=True, help="run directory to write")
    args = p.parse_args(argv)
    if args.task not in TASKS and not args.task.startswith("dmc/"):
        p.error(f"--task must be one of {', '.join(TASKS)} or dmc/<domain>-<task>, got {args.task!r}")
    if args.action_repeat != 1 and not args.task.startswith("dmc/"):
        p.error("--action-repeat is for dmc/ tasks")
    for name in ("max_time_s", "eval_every", "eval_episodes", "action_repeat"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    return args


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    try:
        import gymnasium as gym
        from stable_baselines3 import SAC
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.evaluation import evaluate_policy
        from stable_baselines3.common.monitor import Monitor
    except ImportError as e:
        sys.exit(f"bench/sb3_sac.py needs Stable-Baselines3 (pip install stable-baselines3==2.9.2): {e}")

    os.makedirs(args.out, exist_ok=True)
    if args.task.startswith("dmc/"):
        from dmc_gym import DmcGymEnv

        env_id = f"dm_control {args.task}, action repeat {args.action_repeat}"

        def make_env():
            return DmcGymEnv(args.task, args.action_repeat)
    else:
        env_id = f"{args.task}-v5"

        def make_env():
            return gym.make(env_id)

    settings = ZOO_SETTINGS.get(args.task, {})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(
            {
                "task": {"name": args.task},
                "peer": "stable-baselines3 SAC",
                "env_id": env_id,
                "action_repeat": args.action_repeat,
                "settings": settings,
                "seed": args.seed,
                "max_time_s": args.max_time_s,
            },
            f,
            indent=1,
        )
    csv_file = open(os.path.join(args.out, "metrics.csv"), "w", newline="")
    writer = csv.writer(csv_file)
    writer.writerow(COLUMNS)
    eval_env = Monitor(make_env())

    class Budget(BaseCallback):
        """Stops training once `max_time_s` of it has passed; evaluates every `eval_every` steps
        with the clock paused."""

        def __init__(self) -> None:
            super().__init__()
            self.start = time.perf_counter()
            self.paused = 0.0
            self.next_eval = args.eval_every
            self.last = None

        def train_time(self) -> float:
            return time.perf_counter() - self.start - self.paused

        def evaluate(self) -> None:
            t0 = time.perf_counter()
            returns, lengths = evaluate_policy(
                self.model,
                eval_env,
                n_eval_episodes=args.eval_episodes,
                deterministic=True,
                return_episode_rewards=True,
            )
            took = time.perf_counter() - t0
            self.paused += took
            ret, length = sum(returns) / len(returns), sum(lengths) / len(lengths)
            self.last = (self.num_timesteps, ret)
            writer.writerow((self.num_timesteps, f"{self.train_time():.3f}", ret, length, f"{took:.3f}"))
            csv_file.flush()
            print(
                f"{self.num_timesteps:>8,} env steps | {self.train_time():6.0f} s | eval return {ret:9.1f} "
                f"(length {length:.0f}, {took:.0f} s)",
                flush=True,
            )

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.next_eval += args.eval_every
                self.evaluate()
            return self.train_time() < args.max_time_s

    model = SAC("MlpPolicy", make_env(), seed=args.seed, device="cpu", verbose=0, **settings)
    eval_env.reset(seed=args.seed + 10_000)
    budget = Budget()
    model.learn(total_timesteps=10**9, callback=budget)
    if budget.last is None or budget.last[0] != model.num_timesteps:
        budget.evaluate()
    csv_file.close()
    print(
        f"sb3_sac: done: {env_id}, seed {args.seed}, {settings or 'SB3 defaults'}: "
        f"{model.num_timesteps:,} env steps in {budget.train_time():.0f} s of training, "
        f"final eval return {budget.last[1]:.1f}",
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
