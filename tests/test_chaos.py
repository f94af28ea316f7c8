"""Chaos: short runs in process mode, each ended at a random moment by SIGKILL of a random role
or SIGTERM of the run, each followed by a resume from the latest checkpoint; a last resume then
trains until it solves InvertedPendulum (each resume starts with an empty replay, so the
interrupted launches leave it anywhere between a fresh and a solved policy)."""

import csv
import os
import random
import re
import signal
import sys
import time

import pytest
from conftest import alive, running, started_roles

from pql.checkpoint import load_checkpoint

CYCLES = 6
RUN = [
    "task=InvertedPendulum",
    "runtime.mode=process",
    "runtime.max_env_steps=30000",
    "runtime.checkpoint_every=1000",
    "runtime.eval_every=10000",
    "runtime.log_every_s=1",
]
# The last launch: on to 900 (of 1000) or to 200k env steps, as the learning tests allow.
LAST = [
    "runtime.max_env_steps=200000",
    "runtime.stop_at_return=900",
    "runtime.max_time_s=240",
    "runtime.eval_max_share=1",
]  # evaluated every eval_every env steps, as the learning tests are


def metric_rows(run_dir) -> list[dict]:
    path = run_dir / "metrics.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def steps_of(rows: list[dict]) -> list[int]:
    return [int(r["env_steps"]) for r in rows]


def launch(run_dir, rng: random.Random, stop: bool) -> tuple[str, int, str, list[int]]:
    """One launch, resumed from run_dir's checkpoint if there is one; stop=True ends it at a
    random moment after its first checkpoint. -> (how it was stopped, exit code, stdout+stderr, pids)."""
    path = run_dir / "checkpoint.pt"
    cmd = [sys.executable, "train.py", *RUN, *([] if stop else LAST), f"hydra.run.dir={run_dir}"] + (
        [f"checkpoint={path}"] if path.exists() else []
    )
    start_mtime = path.stat().st_mtime if path.exists() else 0.0
    with running(cmd) as proc:
        pids = {}
        for line in proc.stdout:
            pids = started_roles(line) or pids
            if pids:
                break
        how = "ran to the end"
        if stop:
            deadline = time.monotonic() + 120
            while not (path.exists() and path.stat().st_mtime > start_mtime):  # a checkpoint of this launch
                assert time.monotonic() < deadline and proc.poll() is None, "no checkpoint written"
                time.sleep(0.2)
            time.sleep(rng.uniform(0.5, 5.0))
            if rng.random() < 0.5:
                victim = rng.choice(sorted(pids))
                os.kill(pids[victim], signal.SIGKILL)
                how = f"SIGKILL {victim}"
            else:
                os.kill(proc.pid, signal.SIGTERM)
                how = "SIGTERM"
        out, err = proc.communicate(timeout=300)
    return how, proc.returncode, out + err, [proc.pid, *pids.values()]


@pytest.mark.slow
def test_runs_survive_kills_and_resumes(tmp_path):
    rng = random.Random(0)
    run_dir = tmp_path / "run"
    last_counters, kills, terms, resumes = None, 0, 0, 0
    for cycle in range(CYCLES + 1):
        final = cycle == CYCLES
        resumed_at = load_checkpoint(run_dir / "checkpoint.pt")["counters"]["env_steps"] if cycle else 0
        before = [r for r in metric_rows(run_dir) if int(r["env_steps"]) <= resumed_at]
        resumes += cycle > 0
        how, code, output, pids = launch(run_dir, rng, stop=not final)
        kills += how.startswith("SIGKILL")
        terms += how == "SIGTERM"
        expected = 0 if final else 1 if how.startswith("SIGKILL") else 143
        assert code == expected, f"cycle {cycle} ({how}): exit {code}\n{output[-3000:]}"
        time.sleep(0.5)
        assert not [p for p in pids if alive(p)], f"cycle {cycle} ({how}): a process survived"
        counters = load_checkpoint(run_dir / "checkpoint.pt")["counters"]  # it loads
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
    done = re.search(r"pql: done: ([\d,]+) env steps .* eval return ([-\d.]+)", output)
    assert done, output[-3000:]
    print(
        f"chaos: {CYCLES} cycles survived: {kills} role SIGKILLs, {terms} SIGTERMs, {resumes} resumes; "
        f"the last launch ended at {done.group(1)} env steps, eval return {float(done.group(2)):.1f}"
    )
    assert float(done.group(2)) >= 900, output[-3000:]
