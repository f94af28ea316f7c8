"""Videos of a policy: MP4 files (imageio, with the ffmpeg binary of imageio-ffmpeg) and the GIF
that TensorBoard shows as a video."""

from __future__ import annotations

import contextlib
import io
import os

import numpy as np

VIDEO_MISSING = "writing an MP4 needs imageio and imageio-ffmpeg (pql's requirements): pip install -e ."
DEFAULT_FPS = 30.0  # the frame rate of an env that does not say its step's duration (BatchedEnv.dt)


def default_to_egl() -> None:
    """Set MUJOCO_GL=egl unless MUJOCO_GL or DISPLAY is set. MuJoCo reads it once, when it is
    imported: call this first. Without a display only EGL (or OSMesa) renders, and Mesa serves
    EGL on a machine without a GPU."""
    if not os.environ.get("MUJOCO_GL") and not os.environ.get("DISPLAY"):
        os.environ["MUJOCO_GL"] = "egl"


class VideoError(RuntimeError):
    """A video that cannot be written: str() says why."""


class VideoWriter:
    """Frames [H, W, 3] uint8 into an MP4 at `path`, written to a temporary file beside it and
    renamed onto it at close: a run or a play that stops midway leaves no half-written video."""

    def __init__(self, path: str, fps: float):
        try:
            import imageio
        except ImportError as e:
            raise VideoError(VIDEO_MISSING) from e
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self.path, self.tmp = path, os.path.join(directory, f".{os.path.basename(path)}.tmp{os.getpid()}.mp4")
        try:
            # macro_block_size=1: any frame size (ffmpeg's default pads to multiples of 16 and warns).
            self._writer = imageio.get_writer(self.tmp, fps=fps, codec="libx264", macro_block_size=1)
        except Exception as e:  # imageio without its ffmpeg plugin or binary
            raise VideoError(f"cannot write {path}: {e} ({VIDEO_MISSING})") from e
        self.frames = 0

    def add(self, frame: np.ndarray) -> None:
        self._writer.append_data(frame)
        self.frames += 1

    def close(self) -> None:
        self._writer.close()
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.tmp)


def write_video(path: str, frames, fps: float) -> None:
    """All of `frames` into an MP4 at `path`."""
    writer = VideoWriter(path, fps)
    try:
        for frame in frames:
            writer.add(frame)
    except BaseException:
        writer.discard()
        raise
    writer.close()


def video_problem(env) -> str | None:
    """Why videos of `env` cannot be made here (None: they can): MP4 writing not installed, or an
    env that does not render (its TaskError's words)."""
    from tasks.base import TaskError

    try:
        import imageio
        import imageio_ffmpeg  # noqa: F401  (imageio's MP4 writer)
    except ImportError:
        return VIDEO_MISSING
    try:
        env.render(0)
    except TaskError as e:
        return str(e)
    del imageio
    return None


def gif(frames: np.ndarray, fps: float) -> bytes:
    """frames [T, H, W, 3] uint8 as an animated GIF (what TensorBoard's video summary holds)."""
    from PIL import Image

    images = [Image.fromarray(frame) for frame in frames]
    out = io.BytesIO()
    images[0].save(out, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return out.getvalue()
