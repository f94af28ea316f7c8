"""Evaluations during a run: one at a time, inline or on a thread beside the main process's work."""

from __future__ import annotations

import copy
import dataclasses
import threading
import time

import numpy as np
import torch
from torch import nn

from pql.envs import to_env_action
from pql.evaluate import evaluate, record_episode
from pql.runtime.device import use_device


@dataclasses.dataclass
class EvalResult:
    scores: dict[str, float]  # what pql.evaluate.evaluate returns: "eval/return", "eval/length", ...
    policy_version: int
    env_steps: int  # the run's env steps when the policy was taken
    seconds: float  # wall time from start to result, the video's recording included
    frames: np.ndarray | None = None  # the video the evaluation was asked for: [T, H, W, 3] uint8


class Evaluator:
    """Evaluations of snapshots of the delivered policy on the evaluation envs, one at a time.

    background=False: `start` evaluates before it returns. background=True: on a thread of its
    own (on CUDA with a stream of its own), so that the caller goes on (the main process of
    runtime.mode=process, whose roles train elsewhere, keeps logging, checkpointing and watching
    its limits); `poll` hands back the result once there is one. The snapshot is taken at `start`,
    so the policy evaluated is the one of that moment whatever the roles publish meanwhile.
    """

    def __init__(self, env, device: torch.device, background: bool, video_steps: int = 0):
        self.env, self.device, self.background = env, torch.device(device), background
        self.video_steps = video_steps  # a video's longest, in steps (pql.evaluate.record_episode)
        self._thread: threading.Thread | None = None
        self._result: EvalResult | None = None
        self._error: BaseException | None = None
        if background:
            self._warm_up()

    def _warm_up(self) -> None:
        """Step the envs once here: a GPU backend captures its graphs at first use, and a capture must
        not run while this thread launches other work."""
        with torch.no_grad():
            self.env.reset()
            self.env.step(
                to_env_action(torch.zeros(self.env.num_envs, self.env.act_dim, device=self.env.device), self.env)
            )

    @property
    def busy(self) -> bool:
        return self._thread is not None or self._result is not None

    def start(
        self, policy: nn.Module, normalizer: nn.Module, version: int, env_steps: int, video: bool = False
    ) -> None:
        """Evaluate a snapshot of policy and normalizer; with `video`, record a video after the scores."""
        if self.busy:
            raise RuntimeError("an evaluation is already under way")
        policy, normalizer = copy.deepcopy(policy), copy.deepcopy(normalizer)
        if not self.background:
            self._result = self._run(policy, normalizer, version, env_steps, video)
            return
        ready = None
        if self.device.type == "cuda":  # the copies above are queued on this thread's stream
            ready = torch.cuda.Event()
            ready.record()
        self._thread = threading.Thread(
            target=self._in_background,
            name="pql-evaluation",
            daemon=True,
            args=(policy, normalizer, version, env_steps, video, ready),
        )
        self._thread.start()

    def _run(self, policy, normalizer, version: int, env_steps: int, video: bool) -> EvalResult:
        start = time.monotonic()
        scores = evaluate(self.env, policy, normalizer)
        frames = record_episode(self.env, policy, normalizer, self.video_steps) if video else None
        return EvalResult(scores, version, env_steps, time.monotonic() - start, frames)

    def _in_background(self, policy, normalizer, version: int, env_steps: int, video: bool, ready) -> None:
        try:
            if ready is None:
                self._result = self._run(policy, normalizer, version, env_steps, video)
                return
            use_device(self.device)  # a new thread starts on GPU 0
            stream = torch.cuda.Stream(self.device)
            stream.wait_event(ready)
            with torch.cuda.stream(stream):
                self._result = self._run(policy, normalizer, version, env_steps, video)
        except BaseException as e:  # handed to the caller by poll()
            self._error = e

    def poll(self) -> EvalResult | None:
        """The finished evaluation's result, once (None while one runs, or when none was started).
        An evaluation that raised raises here."""
        if self._thread is not None:
            if self._thread.is_alive():
                return None
            self._thread.join()
            self._thread = None
            if self._error is not None:
                error, self._error = self._error, None
                raise error
        result, self._result = self._result, None
        return result

    def wait(self) -> EvalResult | None:
        """Block until the evaluation under way (if any) ends. -> its result, or None."""
        if self._thread is not None:
            self._thread.join()
        return self.poll()
