"""The GPU pool: concurrent evaluations get distinct GPU ids; extra ones queue.

``acquire(n)`` blocks until ``n`` ids are free (first come, first served) and returns
the lowest free ones; ``release`` gives them back. Asking for more GPUs than the pool
holds can never succeed and raises at once. The pool only counts: it does not check
what the GPUs run.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Sequence

from revtree.errors import Cancelled, SandboxError


def detect_gpus() -> list[str]:
    """GPU ids of this machine: ``REVTREE_GPUS`` (comma-separated) if set, else the
    indices ``nvidia-smi -L`` lists, else none."""
    if (env := os.environ.get("REVTREE_GPUS")) is not None:
        return [g.strip() for g in env.split(",") if g.strip()]
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


class GpuPool:
    """Hands out distinct GPU ids; thread-safe; waiters are served in arrival order."""

    def __init__(self, ids: Sequence[str] | None = None) -> None:
        self.ids = list(ids if ids is not None else detect_gpus())
        self._free = list(self.ids)
        self._cond = threading.Condition()
        self._queue: list[object] = []

    def acquire(self, n: int, cancel: threading.Event | None = None) -> list[str]:
        if n > len(self.ids):
            raise SandboxError(f"{n} GPU(s) requested but the pool has {len(self.ids)}")
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            try:
                while self._queue[0] is not ticket or len(self._free) < n:
                    if cancel is not None and cancel.is_set():
                        raise Cancelled("cancelled while waiting for a GPU")
                    self._cond.wait(timeout=0.1)
                taken = sorted(self._free, key=self.ids.index)[:n]
                for g in taken:
                    self._free.remove(g)
                return taken
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()

    def release(self, ids: Sequence[str]) -> None:
        with self._cond:
            for g in ids:
                if g in self.ids and g not in self._free:
                    self._free.append(g)
            self._cond.notify_all()

    @property
    def free(self) -> int:
        with self._cond:
            return len(self._free)
