"""The ``/dev/shm`` janitor of the local backends: entries our uid left there while
evaluations ran are removed once none runs (see ``local.py``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

PREFIX = "revtree-ws-"  # a local sandbox's workspaces folder (``[sandbox] workspaces``)


class ShmJanitor:
    """Removes the entries of ``root`` (``/dev/shm``) owned by our uid that appeared
    while this process had evaluations in flight: the entries are listed when the
    first evaluation starts, and when the last one ends (its processes dead) the new
    ones are removed, except those still open or mapped by a live process. Thread-safe;
    one per process (``SHM``), since the folder is shared by all sandboxes."""

    def __init__(self, root: Path = Path("/dev/shm")) -> None:
        self.root = root
        self.removed: list[str] = []  # names removed so far, for tests and logs
        self._lock = threading.Lock()
        self._inflight = 0
        self._before: frozenset[tuple[str, int]] = frozenset()

    @contextlib.contextmanager
    def window(self) -> Iterator[None]:
        """Around one evaluation, from before its start until its processes are dead."""
        with self._lock:
            if self._inflight == 0:
                self._before = self._entries()
            self._inflight += 1
        try:
            yield
        finally:
            with self._lock:
                self._inflight -= 1
                if self._inflight == 0:
                    self.removed += self._sweep()

    def _entries(self) -> frozenset[tuple[str, int]]:
        uid = os.geteuid()
        try:
            with os.scandir(self.root) as it:
                return frozenset((e.name, e.inode()) for e in it if _owner(e) == uid)
        except OSError:
            return frozenset()

    def _sweep(self) -> list[str]:
        new = sorted(
            name
            for name, _ in self._entries() - self._before
            if not workspaces_folder(self.root / name)
        )
        if not new:
            return []
        busy = _inodes_in_use(str(self.root))
        removed = []
        for name in new:
            path = self.root / name
            if _inode(path) in busy or any(_inode(p) in busy for p in _walk_files(path)):
                continue
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
                removed.append(name)
        return removed


def workspaces_folder(path: Path, made: tuple[int, int] | None = None) -> bool:
    """A local sandbox's own workspaces folder (``workspace.Elsewhere``), of this
    process or another's: named so, a folder (no link) of our user's, mode 0700; where
    ``made``, that very one (device, inode). The janitor never sweeps one (a later
    session of its run reaps it by its record)."""
    try:
        st = path.lstat()
    except OSError:
        return False
    mine = stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
    same = made is None or (st.st_dev, st.st_ino) == made
    return path.name.startswith(PREFIX) and mine and stat.S_IMODE(st.st_mode) == 0o700 and same


def _owner(entry: os.DirEntry[str]) -> int:
    try:
        return entry.stat(follow_symlinks=False).st_uid
    except OSError:
        return -1


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = path.lstat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _walk_files(path: Path) -> list[Path]:
    if not path.is_dir() or path.is_symlink():
        return []
    return [Path(root) / f for root, _, files in os.walk(path) for f in files]


def _inodes_in_use(prefix: str) -> set[tuple[int, int] | None]:
    """(device, inode) of the files under ``prefix`` that a live process (that we may
    inspect) holds open or mapped. By inode, not by name: a POSIX semaphore is mapped
    under its temporary name and then linked to its real one (glibc ``sem_open``)."""
    found: set[tuple[int, int] | None] = set()
    dev = os.stat(prefix).st_dev if os.path.exists(prefix) else None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                        st = os.stat(f"/proc/{pid}/fd/{fd}")
                        found.add((st.st_dev, st.st_ino))
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                if prefix in line and dev is not None:
                    with contextlib.suppress(ValueError, IndexError):
                        found.add((dev, int(line.split(maxsplit=5)[4])))
    return found


SHM = ShmJanitor()
