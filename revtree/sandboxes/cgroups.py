"""One cgroup per evaluation, for memory and processes, where this process may make one.

cgroup v2 (``/sys/fs/cgroup/cgroup.controllers``): a child of our own cgroup, with
``memory.max`` (and ``memory.swap.max`` = 0) and ``pids.max``, when our cgroup already
delegates ``memory`` and ``pids`` to its children (``cgroup.subtree_control``) or lets
us turn them on. cgroup v1: a child of our cgroup in the ``memory`` and ``pids``
hierarchies, where their folders are writable (``memory.limit_in_bytes``, and
``memory.memsw.limit_in_bytes`` where swap is accounted). Elsewhere ``available()`` is
None and :class:`Jail` does nothing: the caller says so (``bwrap.enforced``).

The process to confine joins with :meth:`Jail.enter` between fork and exec (it writes
``0``, "the writer", to descriptors opened beforehand); everything it starts is in the
cgroup too. On leaving, what is still in the cgroup is killed and the cgroup removed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _own(controller: str) -> Path | None:
    """The folder of our cgroup: v2 (``controller`` "") or v1's ``controller``."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if (controller == "" and names == "") or controller in names.split(","):
            base = ROOT if controller == "" else ROOT / controller
            return base / path.lstrip("/")
    return None


def _v2_parent() -> Path | None:
    own = _own("")
    if not (ROOT / "cgroup.controllers").exists() or own is None:
        return None
    try:
        delegated = (own / "cgroup.subtree_control").read_text().split()
        if not {"memory", "pids"} <= set(delegated):
            (own / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError:
        return None
    return own


def _parents() -> dict[str, Path]:
    """Where children are made: {"v2": folder} or {"memory": ..., "pids": ...}."""
    if (v2 := _v2_parent()) is not None:
        return {"v2": v2}
    found = {}
    for controller in ("memory", "pids"):
        own = _own(controller)
        if own is not None and own.is_dir() and os.access(own, os.W_OK):
            found[controller] = own
    return found


@functools.lru_cache(maxsize=1)
def available() -> str | None:
    """Which cgroups confine an evaluation here (a few words), or None."""
    parents = _parents()
    if not parents:
        return None
    try:
        with Jail.make("probe", 64 << 20, 16) as jail:
            if not jail.folders:
                return None
    except OSError:
        return None
    if "v2" in parents:
        return "cgroup v2"
    return "cgroup v1 " + "+".join(sorted(parents))


class Jail:
    """The cgroup folders of one evaluation and descriptors of their ``cgroup.procs``."""

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders
        self._procs: list[int] = []

    @classmethod
    @contextlib.contextmanager
    def make(cls, name: str, memory: int | None, pids: int) -> Iterator[Jail]:
        """A cgroup named after ``name`` (in every hierarchy that is writable), limited
        to ``memory`` bytes (None: no limit) and ``pids`` processes; removed on exit."""
        jail = cls([])
        unique = f"revtree-{name}-{uuid.uuid4().hex[:8]}"
        try:
            for kind, parent in _parents().items():
                folder = parent / unique
                folder.mkdir()
                jail.folders.append(folder)
                _limit(kind, folder, memory, pids)
                jail._procs.append(os.open(folder / "cgroup.procs", os.O_WRONLY))
            yield jail
        finally:
            for fd in jail._procs:
                os.close(fd)
            for folder in jail.folders:
                _remove(folder)

    def enter(self) -> None:
        """Move the calling process into the cgroup (between fork and exec)."""
        for fd in self._procs:
            os.write(fd, b"0")


def _limit(kind: str, folder: Path, memory: int | None, pids: int) -> None:
    if kind == "pids":
        (folder / "pids.max").write_text(str(pids))
    elif kind == "memory" and memory:
        (folder / "memory.limit_in_bytes").write_text(str(memory))
        with contextlib.suppress(OSError):  # where swap is accounted
            (folder / "memory.memsw.limit_in_bytes").write_text(str(memory))
    elif kind == "v2":
        (folder / "pids.max").write_text(str(pids))
        if memory:
            (folder / "memory.max").write_text(str(memory))
            with contextlib.suppress(OSError):
                (folder / "memory.swap.max").write_text("0")


def _remove(folder: Path) -> None:
    """Kill what is left in ``folder`` and remove it (a few tries: the dead must exit)."""
    with contextlib.suppress(OSError):
        (folder / "cgroup.kill").write_text("1")
    for _ in range(200):
        with contextlib.suppress(OSError, ValueError):
            for pid in (folder / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)
