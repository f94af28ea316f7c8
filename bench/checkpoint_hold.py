"""train.py, with the main process's view of each checkpoint's hold and hand-in printed to stderr.

    python bench/checkpoint_hold.py task=Ant runtime.max_time_s=60 runtime.checkpoint_every=8192 \
        runtime.eval_every=1000000000
    torchrun --standalone --nproc_per_node=2 bench/checkpoint_hold.py task=Ant runtime.device=cpu ...

Process mode only. For each checkpoint, `hand-in` is the time from the main process asking the roles
for their states to the last one arriving (ProcessRuntime.collect_states); with several replicas,
`hold` is the time from the main process first seeing its actor held at an agreed step to the
actor's state arriving, when the actor goes on (OffPolicyRunner.checkpoint_ready, _release_the_hold).
The run is train.py's own; the timing wraps those three methods.
"""

import os
import runpy
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pql.runtime.off_policy.runner import OffPolicyRunner  # noqa: E402
from pql.runtime.supervisor import ProcessRuntime  # noqa: E402

RANK = os.environ.get("RANK", "0")
held_since: list[float] = []


def timed(cls, name: str, wrapper) -> None:
    setattr(cls, name, wrapper(getattr(cls, name)))


def checkpoint_ready(original):
    def ready(self, wanted: bool) -> bool:
        c = self.counters
        if c.holds_made > c.holds_released and not held_since:
            held_since.append(time.monotonic())
        return original(self, wanted)

    return ready


def release(original):
    def released(self, role: str) -> None:
        if role == "actor" and held_since:
            print(f"checkpoint_hold: rank {RANK}: hold {time.monotonic() - held_since.pop():.3f} s", file=sys.stderr)
        original(self, role)

    return released


def collect_states(original):
    def collect(self, *args, **kwargs):
        start = time.monotonic()
        out = original(self, *args, **kwargs)
        print(f"checkpoint_hold: rank {RANK}: hand-in {time.monotonic() - start:.3f} s", file=sys.stderr)
        return out

    return collect


timed(OffPolicyRunner, "checkpoint_ready", checkpoint_ready)
timed(OffPolicyRunner, "_release_the_hold", release)
timed(ProcessRuntime, "collect_states", collect_states)
os.chdir(ROOT)
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
