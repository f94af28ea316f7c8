"""Chaos: short runs in process mode, ended at a random moment by SIGTERM of the run (docker stop,
Kubernetes, `timeout`) and then by SIGKILL of a random role, each followed by a resume from the
latest checkpoint with checkpoint=auto; a last resume, in process mode too, then trains until it
solves InvertedPendulum within the env-step budget of the learning tests: pql's learning test in
process mode (each resume restores its checkpoint's replay; the checkpoint of a killed launch is
its last periodic one, so the steps after it are lost and made again). The same under torchrun
with two replicas, restarted by torchrun after a SIGKILL and relaunched after a SIGTERM of the
job, as a preemptible scheduler would, with checkpoint=auto."""

import csv
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import (
    DEAD_PEER_S,
    JOB_MARKER,
    NO_EXPORT,
    ONE_THREAD,
    ROOT,
    alive,
    assert_stopped_at_an_agreed_step,
    job_pids,
    role_pids,
    running,
    started_roles,
)

from bench.learning import OFF_POLICY
from pql.checkpoint import load_checkpoint
from pql.config import ROLE_NAMES

# Two stopped launches, the run's SIGTERM and then a random role's SIGKILL, each at a random
# moment, then the last. Each launch pays a process-mode start (~10 s on 2 cores): six took about
# 6 minutes in all, three about 90 s. The SIGTERM comes first, to a fresh launch, whose stop then
# stands at an agreed step of the ratios' own counts.
STOPS = ["SIGTERM", "SIGKILL"]
ENVS = 16  # InvertedPendulum's on the CPU
RUN = [
    "task=InvertedPendulum",
    "runtime.mode=process",
    "runtime.max_env_steps=30000",
    "runtime.checkpoint_every=1000",
    "runtime.eval_every=10000",
    "runtime.log_every_s=1",
    NO_EXPORT,
    ONE_THREAD,
    *OFF_POLICY,  # the learning tests' settings, with which the last launch solves in fewer env steps
]
# The last launch: on to 900 (of 1000) or to 200k env steps, as the learning tests allow,
# evaluated every eval_every env steps as they are. The replicas' is sequential (two replicas'
# roles in processes would be 8 processes on 2 cores).
LAST = [
    "runtime.max_env_steps=200000",
    "runtime.stop_at_return=900",
    "runtime.max_time_s=240",
    "runtime.eval_max_share=1",
    "runtime.eval_every=2000",
]


def metric_rows(run_dir) -> list[dict]:
    path = run_dir / "metrics.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def assert_last_launch_solved(output: str, story: str) -> None:
    """The last launch's done line reports an evaluation of at least 900; print it after `story`."""
    done = re.search(r"pql: done: ([\d,]+) env steps .* eval return ([-\d.]+)", output)
    assert done, output[-3000:]
    print(f"{story}; the last launch ended at {done.group(1)} env steps, eval return {float(done.group(2)):.1f}")
    assert float(done.group(2)) >= 900, output[-3000:]


def steps_of(rows: list[dict]) -> list[int]:
    return [int(r["env_steps"]) for r in rows]


def launch(run_dir, rng: random.Random, stop: str | None) -> tuple[str, int, str, list[int]]:
    """One launch, resumed from run_dir's checkpoint if there is one (checkpoint=auto); stop ("SIGKILL" of a
    random role, or "SIGTERM" of the run) ends it at a random moment after its first checkpoint; None
    lets it run. -> (how it was stopped, exit code, stdout+stderr, pids)."""
    path = run_dir / "checkpoint.pt"
    cmd = [sys.executable, "train.py", *RUN, *([] if stop else LAST), "checkpoint=auto", f"hydra.run.dir={run_dir}"]
    start_mtime = path.stat().st_mtime if path.exists() else 0.0
    with running(cmd) as proc:
        pids, seen = {}, []
        for line in proc.stdout:
            seen.append(line)
            pids = started_roles(line) or pids
            if pids:
                break
        how = "ran to the end"
        if stop:
            deadline = time.monotonic() + 120
            while not (path.exists() and path.stat().st_mtime > start_mtime):  # a checkpoint of this launch
                assert time.monotonic() < deadline and proc.poll() is None, "no checkpoint written"
                time.sleep(0.2)
            time.sleep(rng.uniform(0.5, 2.5))
            if stop == "SIGKILL":
                victim = rng.choice(sorted(pids))
                os.kill(pids[victim], signal.SIGKILL)
                how = f"SIGKILL {victim}"
            else:
                os.kill(proc.pid, signal.SIGTERM)
                how = "SIGTERM"
        out, err = proc.communicate(timeout=300)
    return how, proc.returncode, "".join(seen) + out + err, [proc.pid, *pids.values()]


@pytest.mark.slow
def test_runs_survive_kills_and_resumes(tmp_path):
    rng = random.Random(0)
    plan = [*STOPS, None]
    run_dir = tmp_path / "run"
    path = run_dir / "checkpoint.pt"
    last_counters, kills, terms, resumes = None, 0, 0, 0
    for cycle, stop in enumerate(plan):
        final = stop is None
        resumed_at = load_checkpoint(path)["counters"]["env_steps"] if cycle else 0
        before = [r for r in metric_rows(run_dir) if int(r["env_steps"]) <= resumed_at]
        resumes += cycle > 0
        how, code, output, pids = launch(run_dir, rng, stop)
        kills += how.startswith("SIGKILL")
        terms += how == "SIGTERM"
        expected = 0 if final else 1 if how.startswith("SIGKILL") else 143
        assert code == expected, f"cycle {cycle} ({how}): exit {code}\n{output[-3000:]}"
        launched = (
            f"pql: checkpoint=auto: resuming from {path} at {resumed_at:,} env steps"
            if cycle
            else f"pql: checkpoint=auto: no checkpoint in {run_dir}, starting fresh"
        )
        assert launched in output, f"cycle {cycle}:\n{output[-3000:]}"
        time.sleep(0.5)
        assert not [p for p in pids if alive(p)], f"cycle {cycle} ({how}): a process survived"
        saved = load_checkpoint(path)  # it loads
        counters = saved["counters"]
        if how == "SIGTERM":  # it stops at an agreed step, writes its checkpoint and says how to resume
            assert "pql: terminated (SIGTERM)" in output and f"pql: wrote {path} at " in output, output[-3000:]
            assert f"checkpoint=auto hydra.run.dir={run_dir}" in output, output[-3000:]
            assert_stopped_at_an_agreed_step(saved, num_envs=ENVS)
        if last_counters is not None:
            assert all(counters[k] >= last_counters[k] for k in counters), (cycle, how, last_counters, counters)
        last_counters = counters
        rows = metric_rows(run_dir)
        # The rows up to the resumed checkpoint stay (a key first logged later adds an empty cell).
        assert [{k: r[k] for k in b} for r, b in zip(rows, before)] == before and len(rows) >= len(before), (
            f"cycle {cycle}: rows up to the resumed checkpoint changed"
        )
        steps = steps_of(rows)
        assert steps == sorted(steps), f"cycle {cycle}: metrics.csv logs some env steps twice: {steps}"
    assert_last_launch_solved(
        output, f"chaos: {len(STOPS)} cycles survived: {kills} role SIGKILLs, {terms} SIGTERMs, {resumes} resumes"
    )


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
# A SIGKILL that torchrun restarts the workers after, then a SIGTERM that ends the job, which is
# relaunched: a restart and a relaunch once each (five stops took about 6 minutes, three about 2).
PLAN = ["SIGKILL", "SIGTERM"]
# β_a:v = 1:4: the actors step four times as often as at the default, so that they reach their
# agreement on finishing (every 16 steps) within seconds on 2 cores, where 8 processes share them.
REPLICAS_RUN = ["algo.beta_av=4", "runtime.checkpoint_every=500", "checkpoint=auto"]
# From a SIGKILL of one role to the next launch's resume line: every process of the launch ends
# (DEAD_PEER_S), then torchrun starts two workers, which import torch and pql on 2 cores.
RESTART_S = 10.0
LAUNCH = re.compile(r"pql: checkpoint=auto: (?:resuming from \S+ at ([\d,]+) env steps|no checkpoint in)")


class Job:
    """torchrun running train.py, its processes marked (JOB_MARKER); rank 0's lines are read as
    they come (`next_line`), its error output kept whole (`err`)."""

    def __init__(self, run_dir, overrides: list[str], max_restarts: int):
        cmd = [*TORCHRUN, f"--max-restarts={max_restarts}", "train.py", *overrides, f"hydra.run.dir={run_dir}"]
        self.run_dir, self.lines, self.err = run_dir, queue.Queue(), []
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, JOB_MARKER: str(run_dir)},
            start_new_session=True,
        )
        self.out: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self.err.extend, args=(self.proc.stderr,), daemon=True).start()

    @staticmethod
    def _read(stream, lines: queue.Queue) -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    def next_line(self, pattern: re.Pattern, timeout_s: float = 180) -> re.Match:
        """The next line of rank 0 that matches pattern (those before it are kept in `out`)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {pattern.pattern} within {timeout_s} s:\n{self.output()}") from None
            if line is None:
                raise AssertionError(
                    f"the job ended (exit code {self.proc.wait()}) before {pattern.pattern}:\n{self.output()}"
                )
            self.out.append(line)
            if match := pattern.search(line):
                return match

    def end(self, timeout_s: float = 300) -> int:
        code = self.proc.wait(timeout=timeout_s)
        while (line := self.lines.get(timeout=10)) is not None:
            self.out.append(line)
        return code

    def output(self) -> str:
        return "".join(self.out)[-3000:] + "".join(self.err)[-3000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for pid in job_pids(self.run_dir):  # the replicas run in sessions of their own
            os.kill(pid, signal.SIGKILL)


def newer_checkpoint(path, than: float, job: Job, timeout_s: float = 120) -> None:
    """Wait until the checkpoint at path is newer than the time `than`."""
    deadline = time.monotonic() + timeout_s
    while not (path.exists() and path.stat().st_mtime > than):
        assert time.monotonic() < deadline and job.proc.poll() is None, f"no checkpoint written\n{job.output()}"
        time.sleep(0.2)


def assert_one_timeline(rows: list[dict], kept: list[dict], cycle: int) -> None:
    """metrics.csv after a resume: the rows `kept` up to the checkpoint resumed are still there
    (a key first logged later adds an empty cell), and no env step is logged twice."""
    assert [{k: r[k] for k in b} for r, b in zip(rows, kept)] == kept and len(rows) >= len(kept), f"cycle {cycle}"
    assert steps_of(rows) == sorted(steps_of(rows)), f"cycle {cycle}: some env steps logged twice: {steps_of(rows)}"


def victim_of(run_dir, rng: random.Random) -> tuple[str, int]:
    """(what, pid): a random role of a random replica, once it has its name (spawn, imports)."""
    rank, role = rng.randrange(2), rng.choice(ROLE_NAMES)
    deadline = time.monotonic() + 60
    while len(pids := role_pids(role, rank, run_dir)) != 1:
        assert time.monotonic() < deadline, f"no single {role} of rank {rank}: {pids}"
        time.sleep(0.2)
    return f"SIGKILL {role} of rank {rank}", pids[0]


@pytest.mark.slow
@pytest.mark.serial
def test_replicas_survive_kills_terminations_and_restarts(tmp_path):
    """Two replicas in process mode, two launches (a restart of the workers by torchrun, then the
    job) each ended at a random moment after its first checkpoint, by SIGKILL of a random role of
    a random replica (torchrun restarts the workers) and then SIGTERM of every process of the job
    (every replica stops at an agreed step, rank 0 writes its checkpoint, the job ends; relaunched
    as sbatch --requeue would); every launch resumes with checkpoint=auto. Every checkpoint loads, no counter goes
    back, metrics.csv stays one timeline, no process survives, and a last launch (LAST), two
    replicas in sequential mode, solves the task as a two-replica run should: rank 0 alone reports,
    with rank 1's ratios, and Hydra writes nothing outside the run directory."""
    rng = random.Random(0)
    plan = PLAN
    run_dir = tmp_path / "run"
    path = run_dir / "checkpoint.pt"
    overrides = [*RUN, *REPLICAS_RUN]
    job, last, rows, dead, hows = None, None, [], [], []
    killed: float | None = None
    try:
        for cycle, action in enumerate([*plan, "solve"]):
            if job is None:
                final = action == "solve"
                solving = [*LAST, "runtime.mode=sequential"] if final else []
                job = Job(run_dir, overrides + solving, max_restarts=0 if final else len(plan))
            launch = job.next_line(LAUNCH)  # a launch: the job's first, or a restart of its workers
            if killed is not None:  # torchrun restarted the workers: their replicas are resuming
                print(f"the next launch resumed {time.monotonic() - killed:.2f} s after the kill")
                assert time.monotonic() - killed <= RESTART_S, f"cycle {cycle}: {launch.group(0)}"
                killed = None
            resumed_at = int(launch.group(1).replace(",", "")) if launch.group(1) else 0
            # torchrun restarts the workers once all have exited: the launch before is gone whole.
            assert not [p for p in dead if alive(p)], f"cycle {cycle}: a process of the launch before survived"
            if last is not None:
                counters = load_checkpoint(path)["counters"]  # it loads
                assert all(counters[k] >= last[k] for k in counters), (cycle, hows, last, counters)
                assert resumed_at == counters["env_steps"] * 2, (cycle, launch.group(0), counters)  # the newest
                last = counters
            # The rows up to the checkpoint resumed stay; those after it are dropped, none is twice.
            kept = [r for r in rows if int(r["env_steps"]) <= resumed_at]
            if action == "solve":
                break
            job.next_line(re.compile("pql: roles started"))  # the run's logger is open
            started = time.time()
            assert_one_timeline(metric_rows(run_dir), kept, cycle)
            newer_checkpoint(path, started, job)  # this launch's first
            last = last or load_checkpoint(path)["counters"]
            time.sleep(rng.uniform(0.5, 3.0))
            rows, dead = metric_rows(run_dir), [p for p in job_pids(run_dir) if p != job.proc.pid]
            if action == "SIGKILL":
                how, pid = victim_of(run_dir, rng)
                os.kill(pid, signal.SIGKILL)
                killed = time.monotonic()
                # The replicas notice the dead peer and every process of the launch ends; then
                # torchrun starts the next launch, whose replicas resume the newest set.
                while [p for p in dead if alive(p)]:
                    assert time.monotonic() - killed < 30, f"cycle {cycle}: the launch outlived its dead peer"
                    time.sleep(0.05)
                gone_s = time.monotonic() - killed
                print(f"{how}: every process of the launch ended {gone_s:.2f} s after the kill")
                assert gone_s <= DEAD_PEER_S, f"cycle {cycle}: the launch ended {gone_s:.2f} s after {how}"
            else:
                # As SLURM signals a job step: every process, so that the replicas get the
                # signal twice, from SLURM and forwarded by torchrun (the roles ignore it).
                how, launched = "SIGTERM of the job", len(job.out)
                for pid in job_pids(run_dir):
                    os.kill(pid, signal.SIGTERM)
                code, err = job.end(), "".join(job.err)
                # torchrun ends by raising its own SignalException: 1, whatever its workers' 143.
                assert code == 1 and "pql: wrote" in "".join(job.out[launched:]), f"cycle {cycle}:\n{job.output()}"
                assert "pql: rank 0: terminated (SIGTERM)" in err and "pql: rank 1: terminated (SIGTERM)" in err, err
                assert len(list(run_dir.glob("checkpoint.rank1-*.pt"))) == 1, "rank 1's part of the set, once"
                job = None
            hows.append(how)
        assert job is not None
        code, output = job.end(), "".join(job.out)
        assert code == 0, job.output()
    finally:
        if job is not None:
            job.kill()
    time.sleep(1)
    assert job_pids(run_dir) == [], "a process survived"
    assert_one_timeline(metric_rows(run_dir), kept, len(plan))
    load_checkpoint(path)
    assert_last_launch_solved(output, f"chaos under torchrun: {', '.join(hows)}")
    assert output.count("pql: done") == 1 and "beta_av.rank1 4.00" in output, output[-3000:]
    assert not (tmp_path / ".hydra").exists() and not os.path.exists(os.path.join(ROOT, ".hydra"))
