"""train.py, with how long each checkpoint took its roles to hand in, printed to stderr.

    python bench/checkpoint_handin.py task=Ant runtime.max_time_s=60 runtime.checkpoint_every=8192 \\
        runtime.eval_every=1000000000
    torchrun --standalone --nproc_per_node=2 bench/checkpoint_handin.py task=Ant runtime.device=cpu ...

Process mode only. One replica: the time from the main process asking its roles for their states
to the last one arriving (ProcessRuntime.collect_states). Several: the time from the main process
finding a cut agreed to the last role's part of it arriving (ProcessRuntime.collect_parts), which
spans the learners' updates up to the cut's counts while the actor steps on. The run is train.py's
own; the timing wraps those two methods.
"""

import os
import runpy
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pql.runtime.supervisor import ProcessRuntime  # noqa: E402

RANK = os.environ.get("RANK", "0")


def timed(name: str, what: str) -> None:
    original = getattr(ProcessRuntime, name)

    def wrapper(self, *args, **kwargs):
        start = time.monotonic()
        out = original(self, *args, **kwargs)
        print(f"checkpoint_handin: rank {RANK}: {what} {time.monotonic() - start:.3f} s", file=sys.stderr, flush=True)
        return out

    setattr(ProcessRuntime, name, wrapper)


timed("collect_parts", "hand-in")  # collect_states calls it too
os.chdir(ROOT)
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
