"""First contact with train.py: pql's own --help, and a run directory that cannot be made is a
config error (one line, exit code 2) found before Hydra tries."""

import os
import subprocess
import sys

import pytest

from pql import __version__
from pql.cli import preflight
from pql.config import ALGORITHMS, ConfigError
from tasks import TASK_NAMES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CFG_DIR = os.path.join(ROOT, "cfg")


def train_py(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "train.py", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_is_pqls_own(flag):
    proc = train_py("task=Ant", flag)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"pql {__version__}: Parallel Q-Learning"), proc.stdout
    assert "Powered by Hydra" not in proc.stdout
    for text in ("docs/configuration.md", "runtime.max_time_s=", "checkpoint=", "-m ", *TASK_NAMES, *ALGORITHMS):
        assert text in proc.stdout, text


def test_an_unwritable_run_directory_is_one_line_and_exit_2():
    proc = train_py("hydra.run.dir=/proc/pql-run")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(
        "pql: config error: hydra.run.dir='/proc/pql-run' is not allowed; expected a "
        "directory this user can create and write (/proc: "
    ), lines[0]


def test_a_file_in_the_way_of_the_sweep_directory(tmp_path):
    (tmp_path / "taken").write_text("")
    with pytest.raises(
        ConfigError,
        match=r"hydra.sweep.dir=.*taken/sweep' is not allowed; expected a directory "
        r"\(.*taken is a file\)",
    ):
        preflight(["-m", "runtime.seed=0,1", f"hydra.sweep.dir={tmp_path / 'taken' / 'sweep'}"], CFG_DIR)


def test_every_job_of_a_sweep_is_checked_before_the_first_runs(tmp_path):
    with pytest.raises(ConfigError, match=r"algo.gamma=1.5 is not allowed"):
        preflight(["-m", "algo=pql,sac", "algo.gamma=0.9,1.5", f"hydra.sweep.dir={tmp_path}/s"], CFG_DIR)
    with pytest.raises(ConfigError, match=r"algo.gamma='interval\(0.9,0.99\)' is not allowed; expected a list"):
        preflight(["-m", "algo.gamma=interval(0.9,0.99)"], CFG_DIR)
    preflight(
        ["-m", "algo=pql,sac", "algo.gamma=0.9,0.99", "runtime.seed=range(0,3)", f"hydra.sweep.dir={tmp_path}/s"],
        CFG_DIR,
    )
    assert not os.path.exists(tmp_path / "s")


def test_a_run_directory_that_exists_is_fine(tmp_path):
    preflight([f"hydra.run.dir={tmp_path}"], CFG_DIR)
    assert os.listdir(tmp_path) == []  # the probe is gone


def test_checkpoint_auto_refuses_a_corrupt_checkpoint_in_one_line(tmp_path):
    """The run directory's checkpoint is checked as any other before the run starts (atomic
    writes leave none half-written; a file damaged otherwise is refused, exit code 2)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoint.pt").write_bytes(b"not a checkpoint")
    proc = train_py("task=InvertedPendulum", "checkpoint=auto", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pql: {run_dir / 'checkpoint.pt'} is not a readable pql checkpoint")
    assert os.listdir(run_dir) == ["checkpoint.pt"]


def test_checkpoint_auto_in_a_sweep_is_checked_as_each_job_starts(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")  # where a sweep's job is not: left alone
    jobs = preflight(["-m", "runtime.seed=0,1", "checkpoint=auto", f"hydra.sweep.dir={tmp_path}/s"], CFG_DIR)
    assert [cfg.checkpoint for cfg in jobs] == ["auto", "auto"]
