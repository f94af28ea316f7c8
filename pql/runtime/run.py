"""One run, start to finish, the same for every algorithm:

    settings line, device, seed → evaluation envs → resume state (checked against algo and task)
    → test=true: evaluate the checkpoint's policy, done
    → runner → logger → runner.run(monitor) → final evaluation and checkpoint → done line

A runner supplies only what differs (see `pql.runtime.contracts.Runner`), built from its part of
the run's settings (pql/runtime/settings.py, the one reader of the config below `train`);
`Monitor` decides, for all of them, when to evaluate, checkpoint, log and stop. Every checkpoint has one layout:

    {"algo": name, "task": name, "config": the resolved config, "software": what wrote it
     (pql.checkpoint.software), "counters": {name: int},
     "rng": this process's RNG streams, "policy": state_dict, "normalizer": state_dict,
     "roles": {role: that role's training state}}

"policy" and "normalizer" are what an evaluation (test=true) or a deployment needs ("policy" is
the policy the run delivers: for the off-policy algorithms the P-learner's average when
algo.policy_average is set); "roles" is what a resume needs beyond them.

Under torchrun every replica's main process runs `train` (pql/runtime/distributed.py); rank 0
alone evaluates, logs, checkpoints and prints, the others only train and post their ratios
for rank 0's lines. A checkpoint also records how many replicas wrote it ("replicas"), and
resumes with as many.

A stop signal (Ctrl-C, SIGTERM) stops the run at a step its replicas agree on, after rank 0's
checkpoint and without the final evaluation; every replica then raises `Stopped`, whose code is
the exit code (pql/runtime/stopping.py).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import time

import torch

from pql.bulk import BulkError, descriptions, locate, remove_unreferenced
from pql.checkpoint import (
    FILE_NAME,
    CheckpointError,
    CheckpointWriteError,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    seed_all,
    set_rng_state,
)
from pql.config import CHECKPOINT_AUTO, VIDEO_SECONDS, ConfigError, announce, resolve
from pql.envs import ObsLayout, build_env
from pql.evaluate import evaluate
from pql.export import ONNX_MISSING, checkpoint_policy, export_checkpoint
from pql.logging import RunLogger
from pql.logging.keys import VIDEOS_DIR
from pql.runtime.contracts import RunMonitor, Runner
from pql.runtime.device import use_device
from pql.runtime.distributed import (
    CAUSE_WAIT_S,
    RankBoard,
    ReplicaLost,
    Replicas,
    close_replicas,
    failure_elsewhere,
    init_replicas,
    lead_run_dir,
    post_failure,
    spread,
)
from pql.runtime.divergence import check_state
from pql.runtime.episodes import episode_metric_key
from pql.runtime.evaluation import EvalResult, Evaluator
from pql.runtime.settings import MonitorSettings, ResumeSettings, RunSettings, load_runner, run_settings
from pql.runtime.shards import commit, replica_state
from pql.runtime.stopping import FINISH, GO_ON, Stopped, StopSignals, by_signal, signal_name
from pql.video import DEFAULT_FPS, video_problem, write_video
from tasks import task_form
from tasks.base import MAX_EPISODE_METRICS
from tasks.contract import check_contract, raise_on_findings

# cfg/config.yaml's hydra.run.dir, runs/<date>_<time>_<task>_<algo>: new at every launch.
HYDRA_DEFAULT_RUN_DIR = re.compile(r"\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}_")


def train(cfg) -> dict:
    """Train (or, with cfg.test, evaluate cfg.checkpoint) with the runner of cfg.algo.
    -> the final scalars ("eval/return" included). Raises Stopped after a stop signal."""
    replicas = Replicas.from_env()
    with contextlib.ExitStack() as stack:
        if not replicas.lead:  # only rank 0 prints; errors (stderr) come from every rank
            stack.enter_context(contextlib.redirect_stdout(stack.enter_context(open(os.devnull, "w"))))
        signals = stack.enter_context(StopSignals().handled())
        timeout_s = cfg.runtime.stall_timeout_s
        try:
            init_replicas(replicas, timeout_s)
            return _train(cfg, replicas, signals)
        except ReplicaLost as e:
            cause = failure_elsewhere(replicas, timeout_s)
            raise ReplicaLost(
                f"rank {replicas.rank}: {e} (no other replica reported a cause within {CAUSE_WAIT_S:.0f} s)"
                if cause is None
                else f"{cause}\n(rank {replicas.rank} stopped with it: {e})"
            ) from e
        except Exception as e:
            post_failure(replicas, f"rank {replicas.rank}: {e}", timeout_s)
            raise
        finally:
            close_replicas()


def _train(cfg, replicas: Replicas, signals: StopSignals) -> dict:
    # Every replica writes its part of a checkpoint beside rank 0's and resumes from there.
    cfg.run_dir = lead_run_dir(replicas, cfg.run_dir)
    resolved = resolve(cfg, replicas.local_rank if replicas.world > 1 else None)
    announce(resolved, replicas.world)  # the settings line
    device = use_device(resolved.devices.main)
    return _run(run_settings(resolved.config, device, replicas), replicas, signals)


def _run(settings: RunSettings, replicas: Replicas, signals: StopSignals) -> dict:
    device = settings.device
    process = settings.runner.process
    if process.threads.fixed or replicas.local_world > 1:
        torch.set_num_threads(process.threads.per_process(1))
    seed_all(process.seed)
    envs = settings.eval_envs
    eval_env = build_env(envs.task, envs.num_envs, device, envs.seed)
    try:
        return _run_with(settings, replicas, signals, eval_env)
    finally:
        eval_env.close()  # Gymnasium's async copies would otherwise report a broken pipe as the process exits


def _run_with(settings: RunSettings, replicas: Replicas, signals: StopSignals, eval_env) -> dict:
    device, envs = settings.device, settings.eval_envs
    if task_form(envs.task.name) != "own":  # a user's env: broken, it fails here in one line, not in a role
        raise_on_findings(check_contract(eval_env, quick=True), envs.task.name)
    obs, act_dim = ObsLayout.of(eval_env, envs.task.privileged_critic), eval_env.act_dim
    every = settings.monitor.video_every
    if every and replicas.lead and (problem := video_problem(eval_env)):
        raise ConfigError("runtime.video_every", every, f"0 here: {problem}")
    resume = load_resume(settings.resume, replicas.world, replicas.rank)
    _check_same_start(settings.resume, resume, replicas)
    runner_cls = load_runner(settings.algo)
    if settings.resume.test:
        assert resume is not None, "test=true without a checkpoint is a config error (pql.config)"
        return evaluate_checkpoint(settings, runner_cls, eval_env, resume)
    runner: Runner = runner_cls(settings.runner, device, obs, act_dim, resume)
    if resume is not None:
        set_rng_state(resume["rng"])  # after the networks are built: building them draws from it
    _announce_start(settings.resume, resume, settings.monitor.run_dir, replicas.world)
    log = settings.logger
    logger = (
        RunLogger(
            log.run_dir,
            log.config,
            log.max_env_steps,
            wandb=log.wandb,
            progress_every_s=log.progress_every_s,
            max_time_s=log.max_time_s,
            start_env_steps=runner.counts()["env_steps"],
        )
        if replicas.lead
        else None
    )
    monitor = Monitor(
        settings.monitor, runner, eval_env, logger, RankBoard(replicas, settings.runner.process.waits.stall_s), signals
    )
    try:
        runner.run(monitor)
        stopped_by = monitor.signal_code()
    finally:
        monitor.close()
        runner.close()
        if logger is not None:
            logger.close()
    if stopped_by:
        raise Stopped(stopped_by)
    if replicas.lead and settings.monitor.export:
        export_final_policy(monitor.checkpoint_path(), eval_env)
    return monitor.report_done()


def export_final_policy(checkpoint: str, eval_env) -> None:
    """runtime.export: the finished run's policy into exported/ beside its checkpoint. A failure
    costs the run nothing (its checkpoint is written): one line says how to retry."""
    try:
        files = export_checkpoint(checkpoint, env=eval_env)
    except Exception as e:
        print(
            f"pql: the policy was not exported ({type(e).__name__}: {e}); retry with python -m pql.export {checkpoint}",
            flush=True,
        )
        return
    onnx = f" and {os.path.basename(files.onnx)}" if files.onnx else f" (no policy.onnx: {ONNX_MISSING})"
    print(f"pql: exported the policy: {files.torchscript}{onnx}", flush=True)


def _check_same_start(resume: ResumeSettings, state: dict | None, replicas: Replicas) -> None:
    """Raise ConfigError unless every replica resumes the same checkpoint or none does (each
    looks for its own: checkpoint=auto in a directory that one node may not see)."""
    low, high = spread(replicas, -1 if state is None else state["counters"]["env_steps"])
    if low != high:
        raise ConfigError(
            "checkpoint",
            CHECKPOINT_AUTO if resume.auto else resume.checkpoint,
            "a checkpoint every replica finds, the same for all (some replicas "
            f"{'start fresh' if low < 0 else f'resume at {low:,} env steps'}, others at {high:,}; "
            "each looks in its own hydra.run.dir: give all the same, on a file system they share)",
        )


def _announce_start(resume: ResumeSettings, state: dict | None, run_dir: str, replicas: int) -> None:
    """Say which checkpoint the run resumes, or that checkpoint=auto found none."""
    auto = f"checkpoint={CHECKPOINT_AUTO}: " if resume.auto else ""
    if state is not None:
        at = state["counters"]["env_steps"] * replicas
        print(f"pql: {auto}resuming from {resume.checkpoint} at {at:,} env steps", flush=True)
    elif resume.auto:
        unnamed = (
            f"; {run_dir} is Hydra's default, a new directory at every launch, where {CHECKPOINT_AUTO} never "
            "finds one: name the run's with hydra.run.dir=runs/NAME"
            if HYDRA_DEFAULT_RUN_DIR.match(os.path.basename(os.path.normpath(run_dir)))
            else ""
        )
        print(f"pql: {auto}no checkpoint in {run_dir}, starting fresh{unnamed}", flush=True)


def load_resume(resume: ResumeSettings, replicas: int = 1, rank: int = 0) -> dict | None:
    """Rank `rank`'s state of the checkpoint to resume (None without one). A checkpoint resumes
    only the algorithm and task that wrote it, on as many replicas, each from its own part
    (pql/runtime/shards.py): anything else is a config error, before a network is built."""
    if not resume.checkpoint:
        return None
    state = load_checkpoint(resume.checkpoint)
    for key, current in (("algo", resume.algo), ("task", resume.task)):
        if state[key] != current:
            raise ConfigError(
                key,
                current,
                f"{state[key]}: {resume.checkpoint} was written by algo={state['algo']} task={state['task']}",
            )
    written_by = state.get("replicas", 1)
    if written_by != replicas:
        raise ConfigError(
            "checkpoint",
            resume.checkpoint,
            f"a checkpoint of {replicas} replica(s): this one was "
            f"written by {written_by}; resume it with as many "
            f"(torchrun --nproc_per_node × --nnodes = {written_by})",
        )
    if not resume.test:  # the replay beside it, whole, or the checkpoint is refused; an evaluation reads none of it
        if load_runner(resume.algo).keeps_replica_state:
            state = replica_state(state, resume.checkpoint, rank)
        try:
            locate(state, resume.checkpoint)
        except BulkError as e:
            raise CheckpointError(f"{resume.checkpoint} cannot be resumed: {e}") from e
    return state


def evaluate_checkpoint(settings: RunSettings, runner_cls, eval_env, state: dict) -> dict:
    """test=true: evaluate the checkpoint's policy and print what it scored. -> the eval scalars."""
    policy, normalizer = checkpoint_policy(
        runner_cls, settings.runner.algo, state, eval_env.policy_obs_dim, eval_env.act_dim, settings.device
    )
    scores = evaluate(eval_env, policy, normalizer)
    print(
        f"pql: evaluated {settings.resume.checkpoint} on {settings.eval_envs.num_envs} {settings.resume.task} envs: "
        f"mean return {scores['eval/return']:.2f}, mean length {scores['eval/length']:.1f}"
        + "".join(f", mean {name.replace('_', ' ')} {scores[f'eval/{name}']:.3g}" for name in eval_env.episode_metrics),
        flush=True,
    )
    return scores


class Monitor(RunMonitor):
    """The main process's schedule for every runner: evaluations every runtime.eval_every env
    steps, spaced so that they take at most runtime.eval_max_share of the wall time, checkpoints
    every runtime.checkpoint_every, a logged line every runtime.log_every_s, and when to stop
    (runtime.max_time_s, or solved: an evaluation reached runtime.stop_at_return). Env steps are
    those of every replica. Without a logger (ranks > 0) it only posts this replica's ratios to
    the board every runtime.log_every_s, for rank 0's lines.

    Where the runner trains elsewhere (Runner.trains_elsewhere) an evaluation runs beside the
    ticks (pql.runtime.evaluation.Evaluator) and is logged when it ends, so that the logs stay one
    timeline; `eval/env_steps` holds the env steps its policy was taken at."""

    def __init__(
        self,
        settings: MonitorSettings,
        runner: Runner,
        eval_env,
        logger: RunLogger | None,
        board: RankBoard,
        signals: StopSignals,
    ):
        self.settings, self.runner, self.logger, self.board, self.signals = settings, runner, logger, board, signals
        self.fps = 1.0 / eval_env.dt if eval_env.dt else DEFAULT_FPS  # a video's
        video_steps = math.ceil(VIDEO_SECONDS * self.fps)
        self.evaluator = Evaluator(eval_env, eval_env.device, runner.trains_elsewhere, video_steps) if logger else None
        self.evaluations = 0  # started so far; every runtime.video_every-th records a video
        self.episode_metrics = eval_env.episode_metrics
        self.start = time.monotonic()
        self.solved = False
        self.stopping_said = False  # the line that the run stops for a signal is printed
        self.last_eval_version = -1  # the policy version evaluated last
        self.eval_seconds = 0.0  # the wall time of every evaluation so far
        self.longest_eval_s = 0.0
        counts = runner.counts()
        self.next_eval = counts["env_steps"] + settings.eval_every
        self.next_checkpoint = counts["env_steps"] + settings.checkpoint_every
        self.last_counts, self.last_log_time = counts, self.start
        self.latest: dict = {}  # the latest value of every scalar logged: the run's result

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def stop_code(self) -> int:
        """The stop code this replica asks its actors for (pql/runtime/stopping.py), read by its
        runner between two steps: a stop signal's, else FINISH once runtime.max_time_s is reached
        or an evaluation solved the task, else GO_ON."""
        if self.signals.code:
            self._say_stopping(self.signals.code)
            return self.signals.code
        limit = self.settings.max_time_s
        return FINISH if self.solved or (limit is not None and self.elapsed() >= limit) else GO_ON

    def signal_code(self) -> int:
        """The code of the stop signal the run stops for (GO_ON: none): this replica's own, or
        another replica's, which the actors agreed on."""
        code = max(self.signals.code, self.runner.finished_by())
        return code if by_signal(code) else GO_ON

    def _say_stopping(self, code: int) -> None:
        if self.stopping_said or self.logger is None:
            return
        self.stopping_said = True
        how = (
            "the replicas finish at an agreed step, then each writes its part of"
            if self.board.replicas.world > 1
            else "training finishes at its next check, then the run writes"
        )
        print(
            f"\npql: stopping ({signal_name(code)}): {how} {self.checkpoint_path()}, without the final "
            "evaluation (a second signal stops at once, without it)",
            flush=True,
        )

    def tick(self, final: bool = False) -> None:
        """Evaluate, checkpoint and log whatever is due at the current env step count. The final
        evaluation is of the final policy, unless that one was just evaluated; a run stopped as
        solved reports the evaluation that solved it, and one stopped by a signal has none (its
        checkpoint is what matters then)."""
        counts = self.runner.counts()
        env_steps = counts["env_steps"]
        if self.logger is None:
            self._post(counts, final)
            if self.runner.keeps_replica_state:
                self._checkpoint(final, GO_ON)
            return
        stopped_by = self.signal_code() if final else GO_ON
        if stopped_by:
            self._say_stopping(stopped_by)
        self._evaluations(env_steps, final, evaluate_final=not stopped_by)
        self._checkpoint(final, stopped_by)
        now = time.monotonic()
        if now - self.last_log_time >= self.settings.log_every_s or final:
            # Counted again, with the clock: the roles ran on through an evaluation made above, so
            # the counts read before it would make the rates wrong.
            counts = self.runner.counts()
            dt = max(now - self.last_log_time, 1e-9)
            rates = {
                ("perf/env_steps_per_s" if k == "env_steps" else f"updates_per_s/{k}"): (v - self.last_counts[k]) / dt
                for k, v in counts.items()
            }
            self.last_counts, self.last_log_time = counts, now
            ranks = {f"{k}.rank{r}": v for r, scalars in self.board.read().items() for k, v in scalars.items()}
            self._log(
                counts["env_steps"], {**rates, **self._runner_scalars(), **ranks, "time/elapsed_s": self.elapsed()}
            )
            self.logger.progress(counts["env_steps"], self.latest)

    def _checkpoint(self, final: bool, stopped_by: int) -> None:
        """Write a checkpoint if one is due (every runtime.checkpoint_every env steps, and at the
        end) and the runner can take it here (Runner.checkpoint_ready)."""
        env_steps = self.runner.counts()["env_steps"]
        if not self.runner.checkpoint_ready(env_steps >= self.next_checkpoint or final):
            return
        env_steps = self.runner.counts()["env_steps"]  # where the replicas held, if they did
        self.next_checkpoint = env_steps + self.settings.checkpoint_every
        path = self.checkpoint_path()
        try:
            self.save_checkpoint(path)
        except CheckpointWriteError as e:
            if final:
                raise
            # The disk may have room again by the next one; the previous checkpoint is whole.
            print(f"pql: warning: {e}; training goes on", file=sys.stderr, flush=True)
        if stopped_by:
            print(
                f"pql: wrote {path} at {env_steps:,} env steps; resume with checkpoint={path} "
                f"(or checkpoint={CHECKPOINT_AUTO} hydra.run.dir={self.settings.run_dir})",
                flush=True,
            )

    def _evaluations(self, env_steps: int, final: bool, evaluate_final: bool) -> None:
        """Log an evaluation that has ended, and start the one that is due (at the end: wait for the
        one under way, then evaluate the final policy if `evaluate_final`, unless that one was)."""
        evaluator = self.evaluator
        assert evaluator is not None, "rank 0, which evaluates, has a logger"
        self._take(evaluator.wait() if final else evaluator.poll(), env_steps)
        version = self.runner.policy_version()
        if not version:
            return
        if final:
            if evaluate_final and not self.solved and version != self.last_eval_version:
                self._start_evaluation(env_steps)
                self._take(evaluator.wait(), env_steps)
        elif (
            env_steps >= self.next_eval
            and not evaluator.busy
            and self._eval_within_share()
            and not self._eval_would_overrun()
        ):
            self._start_evaluation(env_steps)
            self.next_eval = env_steps + self.settings.eval_every
            if not evaluator.background:
                self._take(evaluator.poll(), env_steps)

    def _start_evaluation(self, env_steps: int) -> None:
        """Evaluate the newest policy with the newest observation statistics."""
        policy, normalizer, version = self.runner.latest_policy()
        assert self.evaluator is not None
        self.evaluations += 1
        every = self.settings.video_every
        self.evaluator.start(policy, normalizer, version, env_steps, video=every > 0 and self.evaluations % every == 0)

    def _eval_within_share(self) -> bool:
        """Whether one more evaluation, and the final one after it, each as long as the longest so
        far, would keep every evaluation of the run within runtime.eval_max_share of its wall time
        (1: no bound). The first one, of unknown length, always may; the bound holds by the end."""
        share, longest = self.settings.eval_max_share, self.longest_eval_s
        return share >= 1 or self.eval_seconds + 2 * longest <= share * (self.elapsed() + longest)

    def _take(self, result: EvalResult | None, env_steps: int) -> None:
        """Log an evaluation's result at env_steps, the count when it is taken."""
        if result is None:
            return
        self.last_eval_version = result.policy_version
        self.eval_seconds += result.seconds
        self.longest_eval_s = max(self.longest_eval_s, result.seconds)
        target = self.settings.stop_at_return
        if target is not None and result.scores["eval/return"] >= target:
            self.solved = True
        if result.frames is not None:
            assert self.logger is not None, "only rank 0 evaluates"
            path = os.path.join(self.settings.run_dir, VIDEOS_DIR, f"eval_{result.env_steps}.mp4")
            write_video(path, result.frames, self.fps)
            self.logger.video(env_steps, path, result.frames, self.fps)
        self._log(
            env_steps,
            {
                **result.scores,
                "eval/policy_version": result.policy_version,
                "eval/env_steps": result.env_steps,
                "time/eval_s": result.seconds,
                "time/eval_share": self.eval_seconds / max(self.elapsed(), 1e-9),
            },
        )

    def _eval_would_overrun(self) -> bool:
        """Whether an evaluation now, as long as the last one, would end past runtime.max_time_s.
        The final evaluation follows the limit anyway: one started just before it only delays
        the end."""
        limit = self.settings.max_time_s
        return limit is not None and self.elapsed() + self.latest.get("time/eval_s", 0.0) > limit

    def _post(self, counts: dict, final: bool) -> None:
        now = time.monotonic()
        if now - self.last_log_time >= self.settings.log_every_s or final:
            self.last_counts, self.last_log_time = counts, now
            self.board.post({k: v for k, v in self.runner.scalars().items() if k.startswith("ratio/")})

    def _runner_scalars(self) -> dict:
        """The runner's scalars, its episode metrics named as the env names them (the unused slots left out)."""
        scalars = self.runner.scalars()
        for i in range(MAX_EPISODE_METRICS):
            mean = scalars.pop(episode_metric_key(i), None)
            if mean is not None and i < len(self.episode_metrics):
                scalars[f"train/{self.episode_metrics[i]}"] = mean
        return scalars

    def _log(self, env_steps: int, scalars: dict) -> None:
        scalars = {k: float(v) for k, v in scalars.items()}
        assert self.logger is not None, "only rank 0 logs"
        self.logger.log(env_steps, scalars)
        self.latest.update(scalars)

    def close(self) -> None:
        """Let an evaluation still under way (a run that stopped on an error) end, its result unlogged."""
        if self.evaluator is not None:
            with contextlib.suppress(Exception):
                self.evaluator.wait()

    def checkpoint_path(self) -> str:
        return os.path.join(self.settings.run_dir, FILE_NAME)

    def save_checkpoint(self, path: str) -> dict:
        """Write the run's state to `path`, unless it holds nan or inf (Diverged: the checkpoint
        already there stays the last good one). -> the counters written."""
        state = self.runner.checkpoint()
        state = {**state, "rng": rng_state()}
        check_state(state)
        replicas = self.board.replicas
        header = {**self.settings.header, "replicas": replicas.world}
        if self.runner.keeps_replica_state:
            commit(replicas, path, header, state)  # every replica its own part (shards.py)
            return state["counters"]
        save_checkpoint(path, {**header, **state})
        # The replay of older checkpoints (and of any that could not be written) goes now that
        # this one is whole and in place.
        remove_unreferenced(os.path.dirname(os.path.abspath(path)), {d["file"] for d in descriptions(state)})
        return state["counters"]

    def report_done(self) -> dict:
        """Print the run's last line. -> the run's final scalars."""
        elapsed = self.elapsed()
        print(
            f"pql: done: {self.last_counts['env_steps']:,} env steps in {elapsed:.0f}s, "
            f"eval return {self.latest.get('eval/return', float('nan')):.2f} (evaluating took "
            f"{self.eval_seconds:.0f}s, {self.eval_seconds / max(elapsed, 1e-9):.0%} of the run); "
            f"run dir {self.settings.run_dir}",
            flush=True,
        )
        return self.latest
