"""Shared test helpers: compose a validated config the way train.py does; run train.py (alone or
under torchrun) and watch its processes; check where a stopped run stopped."""

import contextlib
import os
import re
import signal
import subprocess

from pql.video import default_to_egl

default_to_egl()  # the video tests render without a display: before anything imports mujoco

import pytest  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.core.global_hydra import GlobalHydra  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from pql.cli import expand_task_forms  # noqa: E402
from pql.config import Config, load_config, register_configs, resolve  # noqa: E402
from pql.runtime.distributed import FINISH_CHECK_EVERY, Replicas  # noqa: E402
from pql.runtime.settings import RunSettings, run_settings  # noqa: E402
from tasks.base import TaskError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# cfg/config.yaml composes pql's defaults from Hydra's ConfigStore. Stored here, before any test
# runs, so that every test that composes pql's config (not only through compose_config) finds them.
register_configs()


# The tests' runs do not export their policy at their end unless a test asks (runtime.export=true):
# an export costs 2 to 8 s of a 2-core CI machine, and tests/test_export.py tests it.
NO_EXPORT = "runtime.export=false"
# One torch thread in every process of the tests (this one, and the runs they start, unless a test
# sets runtime.torch_threads): two pytest workers share the 2 cores (tests/run.sh), and an op split
# over 2 threads waits at its end for the thread whose core another process holds. A 1,600-step
# run took 258 s at 2 threads beside one busy process, 13 s at 1.
ONE_THREAD = "runtime.torch_threads=1"
torch.set_num_threads(1)


def compose_config(overrides: list[str], run_dir) -> Config:
    """The validated Config that `python train.py <overrides>` would run, writing to run_dir
    (runtime.export=false and one torch thread unless the overrides set them: NO_EXPORT, ONE_THREAD)."""
    for default in (NO_EXPORT, ONE_THREAD):
        if not any(o.startswith(default.split("=")[0] + "=") for o in overrides):
            overrides = [*overrides, default]
    overrides = expand_task_forms(overrides)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=os.path.join(ROOT, "cfg"), version_base=None):
        raw = OmegaConf.to_container(compose("config", overrides=overrides), resolve=False)
    GlobalHydra.instance().clear()
    raw["run_dir"] = str(run_dir)
    return load_config(raw)


def settings_of(cfg: Config) -> RunSettings:
    """The settings a run of cfg builds, its devices resolved as train does (without the settings line)."""
    resolved = resolve(cfg)
    return run_settings(resolved.config, torch.device(resolved.devices.main), Replicas())


@pytest.fixture
def make_config(tmp_path):
    """make_config(overrides, run_dir=tmp_path) -> Config."""
    return lambda overrides, run_dir=tmp_path: compose_config(overrides, run_dir)


@contextlib.contextmanager
def running(cmd: list[str]):
    """train.py in a process group of its own, killed with every role it started however the
    test ends (a failed assertion must not leave a run behind eating the CPU of later tests).
    SIGINT is reset to its default in the child: a test suite started in the background by a
    shell without job control inherits SIGINT ignored, and train.py, as any program should,
    leaves an ignored SIGINT ignored, so a Ctrl-C test would wait forever."""
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()
    except FileNotFoundError:
        return False


def started_roles(line: str) -> dict | None:
    """{role: pid} from train.py's line `pql: roles started: actor=PID v_learner=PID ...`, or None
    for any other line."""
    match = re.search(r"roles started: (.*)", line)
    return None if match is None else {k: int(v) for k, v in (kv.split("=") for kv in match.group(1).split())}


# A job under torchrun is told apart from other runs by this variable in its processes'
# environment (its value: the run directory), which torchrun and spawn hand down to them all.
JOB_MARKER = "PQL_TEST_RUN"
# Under torchrun, from a SIGKILL of one replica's role to the end of every replica's processes:
# the replicas notice the dead peer (docs/distributed.md, "Failures").
DEAD_PEER_S = 2.0


def role_pids(role: str, rank: int, run_dir) -> list[int]:
    """The processes named pql-<role> (prctl) of replica `rank` of the run writing to run_dir."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if (
            comm == f"pql-{role}"
            and env.get(b"RANK") == str(rank).encode()
            and str(run_dir).encode() in env.get(JOB_MARKER.encode(), b"")
        ):
            found.append(int(pid))
    return found


def job_pids(run_dir) -> list[int]:
    """Every process of the job (the marker is in their environment), zombies excluded."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                marked = str(run_dir).encode() in f.read()
            with open(f"/proc/{pid}/status") as f:
                zombie = "\nState:\tZ" in f.read()
        except OSError:
            continue
        if marked and not zombie and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def worker_pids(launcher_pid: int) -> dict[int, int]:
    """{rank: pid} of the replicas' main processes torchrun (launcher_pid) runs now: its children."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if parent == launcher_pid and b"RANK" in env:
            found[int(env[b"RANK"])] = int(pid)
    return found


def assert_stopped_at_an_agreed_step(saved: dict, num_envs: int) -> None:
    """A fresh launch's checkpoint written after a stop signal: the actors finished at one of their
    agreements on finishing, and the learners then caught up to the ratios' final counts (the
    counters are one replica's, each replica's the same)."""
    c, algo = saved["counters"], saved["config"]["algo"]
    assert c["env_steps"] > 0 and c["env_steps"] % (FINISH_CHECK_EVERY * num_envs) == 0, c
    assert c["critic_updates"] == algo["beta_av"] * (c["actor_steps"] - algo["warmup_steps"]), c
    assert c["policy_updates"] == c["critic_updates"] // algo["beta_pv"], c


def mjwarp_cannot_step(model) -> bool:
    """Whether this MuJoCo Warp lacks what `model` needs (3.11, mjlab 1.6's pin, has no noslip
    solver, the dog's, and no multi-CCD with geom margins, the Shadow hand's): pql then refuses it
    on the mjwarp backend in one line, which a test that steps it there asserts instead."""
    import mujoco_warp

    try:
        mujoco_warp.put_model(model)
    except NotImplementedError:
        return True
    return False


def refused_on_mjwarp(model, make) -> bool:
    """True, once make() is seen to raise pql's one-line refusal, where this MuJoCo Warp cannot
    step `model` (mjwarp_cannot_step); False where it can, and the caller steps it."""
    if not mjwarp_cannot_step(model):
        return False
    with pytest.raises(TaskError, match="cannot step this model.*task.backend=mujoco"):
        make()
    return True
