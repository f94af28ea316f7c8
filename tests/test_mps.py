"""The private MPS daemon of a run (pql/runtime/mps.py), against a fake nvidia-cuda-mps-control: a
script that records each call and, for `-d`, starts a real background process standing in for
the daemon (in a session of its own, as the real daemon detaches), which `quit` stops."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import ROOT, alive, compose_config, running

from pql.cli import mps_plan
from pql.config import ConfigError
from pql.runtime import mps

# One pytest worker runs them all (tests/run.sh's loadgroup): a test checks that no daemon directory
# was left in /tmp in its last seconds, which another's daemon made meanwhile would break.
pytestmark = pytest.mark.xdist_group("mps")
FAKE_CONTROL = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, os, signal, subprocess, sys
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    command = "" if sys.argv[1:] == ["-d"] else sys.stdin.read().strip()
    with open(os.environ["FAKE_MPS_CALLS"], "a") as calls:
        calls.write(json.dumps({{"argv": sys.argv[1:], "pipe": pipe, "command": command}}) + "\\n")
    if os.environ.get("FAKE_MPS_FAIL"):
        print("An instance of this daemon is already running", file=sys.stderr)
        sys.exit(1)
    if sys.argv[1:] == ["-d"]:
        daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(pipe, "control"), "w") as f:
            f.write(str(daemon.pid))
    elif command == "quit":
        control = os.path.join(pipe, "control")
        with open(control) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        os.remove(control)
    """)


@pytest.fixture
def fake_control(tmp_path, monkeypatch):
    """A fake nvidia-cuda-mps-control first on PATH. -> the calls made so far (a function)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / mps.CONTROL
    script.write_text(FAKE_CONTROL)
    script.chmod(0o755)
    calls_path = tmp_path / "calls.jsonl"
    calls_path.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MPS_CALLS", str(calls_path))
    monkeypatch.delenv(mps.PIPE_ENV, raising=False)
    monkeypatch.delenv(mps.LOG_ENV, raising=False)
    monkeypatch.delenv("FAKE_MPS_FAIL", raising=False)
    return lambda: [json.loads(line) for line in calls_path.read_text().splitlines()]


def daemon_pid(calls) -> int:
    """The fake daemon's PID, read from the control file of the pipe directory its start used."""
    start = next(c for c in calls if c["argv"] == ["-d"])
    with open(os.path.join(start["pipe"], "control")) as f:
        return int(f.read())


def wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_auto_starts_a_private_daemon_for_the_block_and_stops_it(fake_control, capsys):
    with mps.sharing_gpu("auto") as daemon:
        pipe = os.environ[mps.PIPE_ENV]
        assert pipe == daemon.env[mps.PIPE_ENV] and pipe.startswith("/tmp/pql-mps-")
        assert os.environ[mps.LOG_ENV] == daemon.env[mps.LOG_ENV]
        pid = daemon_pid(fake_control())
        assert alive(pid)
        # What a role process started now inherits: the private pipe directory.
        child = subprocess.run(
            [sys.executable, "-c", f"import os; print(os.environ['{mps.PIPE_ENV}'])"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert child.stdout.strip() == pipe
    assert wait_gone(pid)
    assert mps.PIPE_ENV not in os.environ and mps.LOG_ENV not in os.environ
    assert not os.path.exists(os.path.dirname(pipe))
    calls = fake_control()
    assert [c["argv"] or c["command"] for c in calls] == [["-d"], "quit"]
    assert {c["pipe"] for c in calls} == {pipe}  # the quit went to this daemon, not another
    assert capsys.readouterr().out.count("\n") == 1  # one line says MPS is on


@pytest.mark.parametrize("mode, why_not", [("off", None), ("auto", "no job runs processes on a GPU")])
def test_off_or_nothing_to_share_starts_nothing(fake_control, capsys, mode, why_not):
    with mps.sharing_gpu(mode, why_not) as daemon:
        assert daemon is None and mps.PIPE_ENV not in os.environ
    assert fake_control() == [] and capsys.readouterr().out == ""


def test_auto_runs_without_mps_and_says_why_in_one_line_when_the_daemon_fails(fake_control, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    with mps.sharing_gpu("auto") as daemon:
        assert daemon is None and mps.PIPE_ENV not in os.environ
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "MPS not used" in out and "already running" in out, out
    assert not [
        d
        for d in os.listdir("/tmp")
        if d.startswith("pql-mps-") and os.path.getmtime(os.path.join("/tmp", d)) > time.time() - 5
    ]  # its directories are removed


def test_auto_without_the_control_binary_says_so(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    monkeypatch.delenv(mps.PIPE_ENV, raising=False)
    with mps.sharing_gpu("auto") as daemon:
        assert daemon is None
    assert f"MPS not used: {mps.CONTROL} is not on PATH" in capsys.readouterr().out


def test_on_stops_with_the_reason_when_the_daemon_cannot_start(fake_control, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_FAIL", "1")
    with pytest.raises(mps.MpsError, match=r"runtime.mps=on, but no MPS daemon could start: .*-d failed \(exit 1\)"):
        with mps.sharing_gpu("on"):
            pytest.fail("the block must not run")


def test_a_daemon_already_running_is_used_and_left_alone(fake_control, monkeypatch, tmp_path, capsys):
    pipe = tmp_path / "theirs"
    pipe.mkdir()
    (pipe / "control").write_text("0")
    monkeypatch.setenv(mps.PIPE_ENV, str(pipe))
    with mps.sharing_gpu("on") as daemon:
        assert daemon is None and os.environ[mps.PIPE_ENV] == str(pipe)
    assert fake_control() == []  # never started, never told to quit
    assert (pipe / "control").exists() and os.environ[mps.PIPE_ENV] == str(pipe)
    assert "already running at" in capsys.readouterr().out


BLOCK = textwrap.dedent("""\
    import sys, time
    from pql.runtime import mps
    with mps.sharing_gpu("on"):
        print("inside", flush=True)
        if sys.argv[1] == "raise":
            raise RuntimeError("a role failed")
        time.sleep(60)
    """)


@pytest.mark.parametrize("how, code", [("raise", 1), ("SIGTERM", 143), ("SIGHUP", 129), ("SIGINT", -signal.SIGINT)])
def test_the_daemon_stops_after_a_crash_or_a_signal(fake_control, how, code):
    with running([sys.executable, "-c", BLOCK, how]) as proc:
        assert "inside" in proc.stdout.readline() + proc.stdout.readline()  # after the line saying MPS is on
        pid = daemon_pid(fake_control())
        if how != "raise":
            os.kill(proc.pid, getattr(signal, how))
        proc.wait(timeout=30)
        assert proc.returncode == code, proc.stderr.read()
    assert wait_gone(pid)
    assert [c["command"] for c in fake_control()][-1] == "quit"


def test_a_sweep_agrees_on_one_mps_setting(tmp_path):
    cpu = compose_config(["runtime.device=cpu"], str(tmp_path))
    assert mps_plan([cpu], 1) == ("auto", "no job runs processes on a GPU (runtime.mode=process on CUDA)")
    gpu = compose_config(["runtime.mps=on"], str(tmp_path))
    gpu.runtime.device = "cuda:0"  # as resolved on a machine with a GPU
    assert mps_plan([gpu], 1) == ("on", None)
    assert mps_plan([gpu], 2)[1].startswith("under torchrun")
    with pytest.raises(
        ConfigError, match=r"runtime.mps='auto,on' is not allowed; expected one value for every job of a sweep"
    ):
        mps_plan([cpu, gpu], 1)


def environment_of(pid: int, timeout_s: float = 10.0) -> bytes:
    """/proc/<pid>/environ, once it reads: a process just spawned reads empty until its exec is
    done (a loaded CI machine caught a role there)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
        if environ or time.monotonic() > deadline:
            return environ
        time.sleep(0.1)


@pytest.mark.slow
def test_a_run_with_runtime_mps_on_starts_the_daemon_and_stops_it_on_sigterm(fake_control, tmp_path):
    """End to end through train.py: the daemon starts before Hydra runs the job, the role
    processes are its clients (they inherit its pipe directory), and SIGTERM, which writes a
    checkpoint and exits 143, also stops the daemon."""
    cmd = [
        sys.executable,
        os.path.join(ROOT, "train.py"),
        "task=InvertedPendulum",
        "runtime.device=cpu",
        "runtime.mps=on",
        "runtime.max_time_s=120",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]
    with running(cmd) as proc:
        lines = []
        while not any("roles started" in line for line in lines):
            line = proc.stdout.readline()
            assert line, "train.py ended before its roles started:\n" + "".join(lines) + proc.stderr.read()
            lines.append(line)
        assert any("pql: MPS: a daemon of this run's own" in line for line in lines), lines
        pid = daemon_pid(fake_control())
        roles = [
            int(p.split("=")[1]) for p in next(line for line in lines if "roles started" in line).split() if "=" in p
        ]
        for role in roles:
            assert f"{mps.PIPE_ENV}=/tmp/pql-mps-".encode() in environment_of(role)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        assert proc.returncode == 143, proc.stderr.read()
    assert wait_gone(pid)
    assert (tmp_path / "run" / "checkpoint.pt").exists()
