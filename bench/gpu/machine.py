"""The machine the check runs on, described in the report's header: the GPU, the software, the
host, and whether an MPS daemon was already running."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys

from bench.gpu import ROOT
from pql.runtime.mps import pipe_directory


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def gpu_properties() -> dict:
    """Name, memory and compute capability of GPU 0, asked in a child process: this process
    must hold no CUDA context, or an MPS daemon started later (or an exclusive-process GPU)
    would find the GPU taken."""
    code = (
        "import json, torch; p = torch.cuda.get_device_properties(0); "
        "print(json.dumps({'name': p.name, 'memory_gib': p.total_memory / 2**30, "
        "'capability': f'{p.major}.{p.minor}', 'cuda': torch.version.cuda}))"
    )
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"error": "could not read the GPU's properties: no answer within 120 s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"could not read the GPU's properties: {last}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def nvidia_smi() -> dict:
    """Driver version and compute mode of GPU 0 from nvidia-smi; {} without it."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,compute_mode", "--format=csv,noheader", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        return {}
    fields = [f.strip() for f in done.stdout.strip().split(",")]
    return {"driver": fields[0], "compute_mode": fields[1]} if done.returncode == 0 and len(fields) == 2 else {}


def git_revision() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (no git)"
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    return head.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")


def mps_daemon() -> str:
    """Whether an MPS control daemon is reachable where CUDA looks for one: every CUDA process of
    the check is then its client, which changes what the benches measure."""
    control = os.path.join(pipe_directory(), "control")
    if os.path.exists(control):
        return f"an MPS control daemon is running ({control} exists): every CUDA process of this check is its client"
    return f"no MPS control daemon ({control} absent): each process has its own CUDA context"


def machine_info(started: datetime.datetime) -> dict:
    """The report's header: "title", "gpu_name" and "lines" (GPU, software, host, MPS)."""
    gpu, smi = gpu_properties(), nvidia_smi()
    gpu_line = gpu.get("error") or (
        f"{gpu['name']}, {gpu['memory_gib']:.1f} GiB, compute capability {gpu['capability']}"
    )
    if smi:
        gpu_line += f", driver {smi['driver']}, compute mode {smi['compute_mode']}"
    versions = ", ".join(
        f"{name} {package_version(name)}"
        for name in ("torch", "triton", "warp-lang", "mujoco", "mujoco-warp", "torchrl")
    )
    return {
        "title": f"pql GPU check, {started:%Y-%m-%d %H:%M:%S}",
        "gpu_name": gpu.get("name", "unknown GPU"),
        "lines": [
            f"GPU: {gpu_line}",
            f"Software: Python {sys.version.split()[0]}, CUDA {gpu.get('cuda', '?')} (torch's), {versions}",
            f"Host: {os.cpu_count()} CPU cores; pql {git_revision()}",
            f"MPS before the check: {mps_daemon()}",
        ],
    }
