"""train.log: everything a process of the run prints, kept in the run directory.

`console_log(path)` copies this process's stdout and stderr into `path` (appending, a line at a
time) while still printing them: the main process's settings line, progress lines, errors and
tracebacks, and each role process's own lines. Hydra's logging does not write there
(cfg/config.yaml: hydra/job_logging=stdout), so the file has one writer per process, each
appending whole lines.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

TRAIN_LOG = "train.log"


class _Tee(io.TextIOBase):
    """A text stream that writes to `stream` and to `copy`."""

    def __init__(self, stream, copy):
        self.stream, self.copy = stream, copy

    def write(self, text: str) -> int:
        self.stream.write(text)
        if not self.copy.closed:
            self.copy.write(text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()
        if not self.copy.closed:
            self.copy.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    # typeshed declares TextIOBase.encoding a writable attribute; io's is read-only, as here.
    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding


@contextlib.contextmanager
def console_log(path: str | None):
    """Copy this process's stdout and stderr into `path` while in the block (None: no copy)."""
    if path is None:
        yield
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", buffering=1, encoding="utf-8") as copy:
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Tee(sys.stdout, copy), _Tee(sys.stderr, copy)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = saved
