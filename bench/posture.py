"""Does a HalfCheetah policy run upright or on its back? Read from checkpoints.

    python bench/posture.py CHECKPOINT_OR_RUN_DIR [...] [--episodes 4] [--skip-steps 200] [--seed 123]
                            [--device cpu] [--csv PATH]

A HalfCheetah policy can score about 2,000 by flipping over and scuttling on its back, a local
optimum it rarely leaves (docs/tuning.md); the return curve alone does not tell it from a slow
upright learner. This runs each checkpoint's deterministic policy (as evaluation does: the mean
action clipped to the box; on CPU MuJoCo whatever backend trained it, or with --device cuda on
MuJoCo Warp) for --episodes full 1,000-step episodes, and prints per checkpoint the mean return
and the mean root pitch (rooty, observation 1, radians) over the steps after --skip-steps, which
leave out the first stride or the roll. Upright running keeps the pitch within a few tenths of 0
(or of 2π after a full turn); on its back it sits near ±π. The verdict is "on its back" when the
mean cosine of the pitch is below 0. --csv writes one row per checkpoint (checkpoint, env_steps,
return, pitch, cos_pitch, verdict).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pql.checkpoint import CheckpointError, load_checkpoint
from pql.config import load_config
from pql.envs import build_env, to_env_action
from pql.export import checkpoint_policy
from pql.runtime.settings import load_runner

TASK = "HalfCheetah"
PITCH = 1  # rooty in HalfCheetah's observation (qpos without the root's x, then qvel)
CHECKPOINT_NAME = "checkpoint.pt"  # what a run directory holds


def checkpoint_path(path: str) -> str:
    """A checkpoint file, or the run directory that holds one."""
    if os.path.isdir(path):
        path = os.path.join(path, CHECKPOINT_NAME)
    if not os.path.isfile(path):
        raise SystemExit(f"posture: {path} is not a checkpoint file or a run directory holding {CHECKPOINT_NAME}")
    return path


@torch.no_grad()
def rollout(env, act, skip_steps: int) -> dict:
    """One episode per env with act(obs) -> actions in [-1, 1]. -> per env: return, mean pitch
    and mean cos(pitch) over the steps after skip_steps. The pitch is the hinge's angle, so a
    cheetah that turned over once and landed on its feet reads 2π; its cosine does not care."""
    if not 0 <= skip_steps < env.max_episode_steps:
        raise SystemExit(
            f"posture: --skip-steps {skip_steps}: an integer in [0, {env.max_episode_steps}), "
            f"so that some steps of the episode count"
        )
    obs = env.reset()
    returns, pitch_sum, cos_sum = (torch.zeros(env.num_envs, device=env.device) for _ in range(3))
    for t in range(env.max_episode_steps):
        obs, reward, terminated, truncated, _ = env.step(to_env_action(act(obs), env))
        returns += reward
        if t >= skip_steps:
            pitch_sum += obs[:, PITCH]
            cos_sum += obs[:, PITCH].cos()
        if bool((terminated | truncated).any()):  # HalfCheetah never terminates: this is the time limit
            break
    counted = t + 1 - skip_steps
    return {"return": returns, "pitch": pitch_sum / counted, "cos_pitch": cos_sum / counted}


def verdict(cos_pitch: float) -> str:
    return "upright" if cos_pitch > 0 else "on its back"


def probe(path: str, episodes: int, skip_steps: int, seed: int, device: str) -> dict:
    """-> {checkpoint, env_steps, return, pitch, cos_pitch, verdict, episode_pitch} of one checkpoint."""
    try:
        state = load_checkpoint(path)
    except CheckpointError as e:
        raise SystemExit(f"posture: {e}") from None
    if state["task"] != TASK:
        raise SystemExit(
            f"posture: {path} is a task={state['task']} checkpoint; this probe reads {TASK}'s "
            f"root pitch, so it takes {TASK} checkpoints only"
        )
    cfg = load_config(state["config"])
    env = build_env(
        dataclasses.replace(cfg.task, backend="mujoco" if device == "cpu" else "mjwarp"), episodes, device, seed
    )
    runner = load_runner(cfg.algo.name)
    policy, normalizer = checkpoint_policy(runner, cfg.algo, state, env.policy_obs_dim, env.act_dim, device)
    # As evaluation acts: the deterministic policy's action, clipped to the box.
    out = rollout(env, lambda obs: policy(normalizer(obs)).clamp(-1.0, 1.0), skip_steps)
    cos_pitch = float(out["cos_pitch"].mean())
    return {
        "checkpoint": path,
        "env_steps": state["counters"]["env_steps"],
        "return": float(out["return"].mean()),
        "pitch": float(out["pitch"].mean()),
        "cos_pitch": cos_pitch,
        "verdict": verdict(cos_pitch),
        "episode_pitch": out["pitch"].tolist(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="HalfCheetah checkpoints, or run directories holding one")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--skip-steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=123)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--csv", help="also write one row per checkpoint here")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes {args.episodes}: an integer >= 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available here (--device cpu runs CPU MuJoCo)")
    torch.set_num_threads(1)
    rows = []
    for path in map(checkpoint_path, args.paths):
        row = probe(path, args.episodes, args.skip_steps, args.seed, args.device)
        rows.append(row)
        print(
            f"{row['checkpoint']}: {row['env_steps']:,} env steps, return {row['return']:,.0f}, "
            f"mean pitch {row['pitch']:+.2f} rad (per episode {', '.join(f'{p:+.2f}' for p in row['episode_pitch'])}):"
            f" {row['verdict']}",
            flush=True,
        )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(
                f, ["checkpoint", "env_steps", "return", "pitch", "cos_pitch", "verdict"], extrasaction="ignore"
            )
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
