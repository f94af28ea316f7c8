"""Watch a run's policy: `python -m pql.play <run dir or checkpoint> [--episodes N] [--video PATH]`.

Rolls the deterministic policy out (what pql.export exports, and what evaluations score) in one
env of the run's task, prints each episode's return and length, and with --video writes the
episodes as an MP4 (pql's own tasks, the DeepMind Control Suite, Gymnasium ids that render
rgb_array, factories whose env renders). Without a display MuJoCo renders with EGL, which Mesa
serves on a CPU: MUJOCO_GL=egl is set unless MUJOCO_GL or DISPLAY is (pql.video.default_to_egl).
"""

from __future__ import annotations

from pql.video import default_to_egl

default_to_egl()  # before anything imports mujoco

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

from pql.checkpoint import CheckpointError, load_checkpoint  # noqa: E402
from pql.export import checkpoint_file, deployed_policy  # noqa: E402
from pql.video import DEFAULT_FPS, VideoError, VideoWriter  # noqa: E402


def play(path: str, episodes: int = 1, video: str | None = None, seed: int = 0) -> list[tuple[float, int]]:
    """Roll out the checkpoint's policy for `episodes` episodes of one env (seeded `seed`),
    printing each one's return and length; with `video`, write their frames there.
    -> [(return, length)] per episode."""
    from pql.config import load_config
    from pql.envs import build_env
    from tasks import task_form

    state = load_checkpoint(checkpoint_file(path))
    task = load_config(dict(state["config"])).task
    if video and task_form(task.name) == "gym":  # Gymnasium renders only what make() asked for
        task = dataclasses.replace(task, kwargs={**task.kwargs, "render_mode": "rgb_array"}, vectorization="sync")
    env = build_env(task, 1, torch.device("cpu"), seed)
    writer = None
    try:
        policy, _ = deployed_policy(state, env)
        results: list[tuple[float, int]] = []
        obs = env.reset()
        if video:
            first = env.render(0)  # raises TaskError, before any stepping, for an env that cannot render
            writer = VideoWriter(video, 1.0 / env.dt if env.dt else DEFAULT_FPS)
            writer.add(first)
        total, length = 0.0, 0
        with torch.no_grad():
            while len(results) < episodes:
                obs, reward, terminated, truncated, _ = env.step(policy(obs[:, : env.policy_obs_dim]))
                total, length = total + float(reward[0]), length + 1
                if writer is not None:
                    writer.add(env.render(0))
                if bool(terminated[0] | truncated[0]):
                    results.append((total, length))
                    print(f"pql.play: episode {len(results)}: return {total:.2f}, length {length}", flush=True)
                    total, length = 0.0, 0
        if writer is not None:
            writer.close()
            print(f"pql.play: wrote {video} ({writer.frames} frames)", flush=True)
            writer = None
        return results
    finally:
        if writer is not None:
            writer.discard()
        env.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pql.play", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="a run directory (its checkpoint.pt) or a checkpoint file")
    parser.add_argument("--episodes", type=int, default=1, help="episodes to play (default 1)")
    parser.add_argument("--video", help="write the episodes to this MP4 file")
    parser.add_argument("--seed", type=int, default=0, help="the env's seed (default 0)")
    args = parser.parse_args(argv)
    if args.episodes < 1:
        parser.error(f"--episodes={args.episodes} is not allowed; expected an integer >= 1")
    from pql.config import ConfigError
    from tasks import TaskError

    try:
        play(args.path, args.episodes, args.video, args.seed)
    except (CheckpointError, ConfigError, TaskError, VideoError) as e:
        print(f"pql.play: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
