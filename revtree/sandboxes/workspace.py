"""A local execution's workspace: unpacked from the request's tar into a new folder,
and removed in the background once the execution returned; where a sandbox's
workspaces go (``[sandbox] workspaces``: ``Elsewhere``) and what ``reap`` removes of a
killed session's (``reap_in``, ``reap_recorded``)."""

from __future__ import annotations

import contextlib
import io
import os
import queue
import shutil
import subprocess
import tarfile
import tempfile
import threading
import weakref
from pathlib import Path

from revtree.errors import InfrastructureError, SandboxError
from revtree.sandboxes.shm import PREFIX, workspaces_folder
from revtree.sandboxes.watch import kill_group

BACKLOG = 4  # workspaces waiting for the remover; past it, the execution removes its own
IDLE = 2.0  # seconds the remover waits for more work before it ends (``put`` starts one)


class Trash:
    """Workspaces removed by a background thread, off the path of the execution that
    used them (0.5-0.8 ms here for a workspace of five files; seconds for an evaluation
    that leaves a dataset or a cache behind). Past ``BACKLOG`` waiting, ``put`` removes
    the workspace itself (no backlog to fill the disk). The thread survives what it
    cannot remove and ends after ``IDLE`` seconds without work (a process making many
    sandboxes keeps no idle threads); ``drain`` waits until those handed over are gone,
    as the interpreter's exit does."""

    def __init__(self) -> None:
        self._work = _Work()
        weakref.finalize(self, self._work.queue.join)  # also at exit: no removal lost

    def put(self, path: Path) -> None:
        if self._work.queue.unfinished_tasks >= BACKLOG or not self._work.put(path):
            remove(path)

    def drain(self) -> None:
        self._work.queue.join()

    @property
    def running(self) -> bool:
        """Whether a remover thread is alive (it ends when idle)."""
        return self._work.running


class _Work:
    """The queue and its remover (apart from ``Trash``, which the thread must not keep)."""

    def __init__(self) -> None:
        self.queue: queue.Queue[Path] = queue.Queue()
        self.lock = threading.Lock()
        self.running = False

    def put(self, path: Path) -> bool:
        """Queue ``path`` for the remover (started if none runs); False where no thread
        can be started (the caller removes it)."""
        with self.lock:
            if not self.running:
                try:
                    threading.Thread(target=self._remove, name="revtree-trash", daemon=True).start()
                except RuntimeError:  # no thread to be had
                    return False
                self.running = True
            self.queue.put(path)
        return True

    def _remove(self) -> None:
        while True:
            try:
                path = self.queue.get(timeout=IDLE)
            except queue.Empty:
                with self.lock:  # a put holds it while it sees this thread running
                    if self.queue.empty():
                        self.running = False
                        return
                continue
            try:
                remove(path)
            except BaseException:  # never the thread's end: drain would wait forever
                pass
            finally:
                self.queue.task_done()


def remove(path: Path) -> None:
    """Remove a workspace whatever it holds: ``shutil.rmtree`` recurses once per folder
    level, so a tree deeper than Python's recursion limit (a candidate can make one)
    goes to ``rm -rf``."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--", str(path)], check=False, capture_output=True)


def extract(archive: bytes, dest: Path) -> None:
    """Unpack ``archive`` into the new folder ``dest``. An archive of only regular files
    and folders under plain relative names (what ``GitStore.archive`` makes, but for
    links) is written here directly, as tarfile's ``data`` filter would write it; any
    other sends the whole archive through that filter (links checked, absolute names
    made relative, special files refused)."""
    dest.mkdir()
    plain = archive[257:262] == b"ustar"  # a tar, not compressed: no codec to try
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:" if plain else "r:*") as tar:
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
    is followed), with the ``data`` filter's modes (no high or group/other write bits,
    owner read and write, execute only where the owner had it) and the archive's
    modification times."""
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
            os.utime(fd, (m.mtime, m.mtime))  # the archive's times, as tarfile sets them
        finally:
            os.close(fd)


ELSEWHERE = "workspaces"  # in base_dir: the folders made in ``[sandbox] workspaces``


class Elsewhere:
    """A sandbox's own folder inside ``[sandbox] workspaces`` (a tmpfs, say) for its
    workspaces. Made at the first workspace (``folder``), so a session that fails to
    start leaves none. It is made as ``mkdtemp`` makes one: mode 0700, a name no other
    user can guess. It is recorded in ``base_dir`` for a later session's
    ``reap_recorded``. Before each workspace, the folder is checked to be the very one
    made (device and inode), ours, mode 0700 and no link. One gone or replaced (a
    logout's IPC cleanup, another user in a shared /dev/shm) is an infrastructure
    failure, which stops the run resumable, rather than a workspace unpacked into it."""

    def __init__(self, parent: Path, base_dir: Path | None) -> None:
        if not parent.is_dir():
            raise SandboxError(f"[sandbox] workspaces: {parent} is no folder")
        self.parent, self.base_dir = parent, base_dir
        self.path: Path | None = None
        self._made: tuple[int, int] = (-1, -1)  # (device, inode) of the folder made
        self._lock = threading.Lock()

    def folder(self) -> Path:
        """The folder to make the next workspace in (made the first time)."""
        with self._lock:
            if self.path is None:
                self.path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=self.parent))
                st = self.path.lstat()
                self._made = (st.st_dev, st.st_ino)
                if self.base_dir is not None:
                    _record(self.base_dir / ELSEWHERE, [self.path], append=True)
            elif not workspaces_folder(self.path, self._made):
                raise InfrastructureError(
                    f"the workspaces folder {self.path} ([sandbox] workspaces) is gone or "
                    "is no longer the one revtree made; resume the run to go on"
                )
            return self.path

    def close(self) -> None:
        """Remove the folder and what is left in it (if it is still the one made)."""
        with self._lock:
            if self.path is not None and workspaces_folder(self.path, self._made):
                remove(self.path)


def reap_recorded(base_dir: Path, keep: Path | None) -> int:
    """``reap_in`` each folder that ``base_dir``'s record names but ``keep`` (this
    session's), then the folder itself, where it is one of ours (``workspaces_folder``);
    the record then names ``keep`` alone. How many workspaces."""
    try:
        lines = (base_dir / ELSEWHERE).read_bytes().splitlines()
    except OSError:
        return 0
    n = 0
    for line in lines:
        folder = Path(os.fsdecode(line))
        if folder != keep and workspaces_folder(folder):
            n += reap_in(folder)
            remove(folder)
    with contextlib.suppress(OSError):
        _record(base_dir / ELSEWHERE, [keep] if keep else [], append=False)
    return n


def _record(path: Path, folders: list[Path], append: bool) -> None:
    """Write ``folders`` to the record ``path``, one per line, following no link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, b"".join(os.fsencode(str(f)) + b"\n" for f in folders))
    finally:
        os.close(fd)


def reap_in(folder: Path) -> int:
    """``reap`` in one folder: each ``revtree-*`` workspace's process group killed where
    its leader still works there, and the workspace removed; how many."""
    n = 0
    for tmp in folder.glob("revtree-*"):
        if tmp.name.startswith(PREFIX):
            continue  # a workspaces folder (``Elsewhere``): reaped by its record
        with contextlib.suppress(OSError, ValueError):
            pgid = int((tmp / "pgid").read_text())
            # the file sits beside a workspace the candidate could write: kill only a
            # group whose leader still works in that workspace (never 0, 1 or ours)
            if pgid > 1 and pgid != os.getpgrp() and _works_in(pgid, tmp):
                kill_group(pgid)
        shutil.rmtree(tmp, ignore_errors=True)
        n += 1
    return n


def _works_in(pid: int, folder: Path) -> bool:
    """Whether process ``pid``'s current folder is ``folder`` or inside it."""
    try:
        cwd = Path(os.readlink(f"/proc/{pid}/cwd").removesuffix(" (deleted)"))
    except OSError:
        return False
    return cwd == folder.resolve() or folder.resolve() in cwd.parents
