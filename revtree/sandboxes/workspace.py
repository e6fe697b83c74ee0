"""A local execution's workspace: unpacked from the request's tar into a new folder,
and removed in the background once the execution returned."""

from __future__ import annotations

import io
import os
import queue
import shutil
import tarfile
import threading
from pathlib import Path

from revtree.errors import SandboxError

COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")  # gzip, bzip2, xz: tarfile's "r:*"


class Trash:
    """Workspaces removed by one background thread (started on first use), off the path
    of the execution that used them (0.5-0.8 ms here for a workspace of five files;
    seconds for an evaluation that leaves a dataset or a cache behind). ``drain`` waits
    until those handed over are gone."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Path] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def put(self, path: Path) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._remove, name="revtree-trash", daemon=True
                )
                self._thread.start()
        self._queue.put(path)

    def _remove(self) -> None:
        while True:
            path = self._queue.get()
            try:
                shutil.rmtree(path, ignore_errors=True)
            finally:
                self._queue.task_done()

    def drain(self) -> None:
        self._queue.join()


def extract(archive: bytes, dest: Path) -> None:
    """Unpack ``archive`` into the new folder ``dest``. An archive of only regular files
    and folders under plain relative names (what ``GitStore.archive`` makes, but for
    links) is written here directly, as tarfile's ``data`` filter would write it; any
    other sends the whole archive through that filter (links checked, absolute names
    made relative, special files refused)."""
    dest.mkdir()
    compressed = archive.startswith(COMPRESSED)  # "r:*" tries each codec in turn
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*" if compressed else "r:") as tar:
            members = tar.getmembers()
            if all(_plain(m) for m in members):
                _write_plain(tar, members, dest)
            else:
                tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, OSError) as e:
        raise SandboxError(f"cannot unpack the workspace: {e}") from e


def _plain(member: tarfile.TarInfo) -> bool:
    """A regular file or a folder whose name is relative, with no ``.``, ``..`` or
    empty part: it can land nowhere but under the destination."""
    if not (member.isdir() or (member.isreg() and not member.issparse())):
        return False
    parts = member.name.split("/")
    return all(part not in ("", ".", "..") and "\0" not in part for part in parts)


def _write_plain(tar: tarfile.TarFile, members: list[tarfile.TarInfo], dest: Path) -> None:
    """Write ``_plain`` members under ``dest`` (a new folder: with no link in it, none
    is followed), with the ``data`` filter's modes: no high or group/other write bits,
    owner read and write, execute only where the owner had it."""
    made = {str(dest)}
    for m in members:
        path = os.path.join(dest, m.name)
        folder = path if m.isdir() else os.path.dirname(path)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        if m.isdir():
            continue
        source = tar.extractfile(m)
        assert source is not None  # a regular member
        mode = m.mode & 0o755
        mode = (mode if mode & 0o100 else mode & ~0o111) | 0o600
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
        try:
            with source:
                while chunk := source.read(1 << 20):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
