"""Bytes into and out of a workspace volume, safely: the request's archive re-packed for
the sandbox user (members escaping the workspace refused), the skeleton of a fresh
volume, one file read without following links (in the volume's folder, or through
``get_archive``), the declared outputs collected by glob (regular files under the caps,
everything else named in ``refused``), and the volume's disk usage for the cap."""

from __future__ import annotations

import base64
import contextlib
import fnmatch
import io
import json
import os
import stat
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from revtree.errors import SandboxError
from revtree.sandboxes.base import OUTPUTS_CAP
from revtree.sandboxes.docker.engine import ROOT, UID, WORK, engine_error

METRICS_CAP = 1 << 20
MAX_ENTRIES = 200_000  # a workspace holding more is not walked further
_TYPE_BITS = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)


class Refused(ValueError):
    """A file of the volume that is not copied out; the message says why."""


def usage(root: Path, max_entries: int = 200_000) -> int:
    """Bytes allocated under ``root`` (more than any cap if it holds too many entries)."""
    total, seen, stack = 0, 0, [str(root)]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as it:
            for entry in it:
                seen += 1
                if seen > max_entries:
                    return 1 << 62
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    return total


def skeleton_tar() -> bytes:
    """``work/`` and ``out/``, owned by the sandbox user, for ``put_archive``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as out:
        for name, mode in (("work", 0o755), ("out", 0o700)):
            out.addfile(_owned(tarfile.TarInfo(name), tarfile.DIRTYPE, mode))
    return buf.getvalue()


def workspace_tar(archive: bytes) -> bytes:
    """The request's archive, re-packed for ``tar -x`` in ``work/``. Members escaping the
    workspace are refused (tarfile's data filter)."""
    buf = io.BytesIO()
    try:
        src = tarfile.open(fileobj=io.BytesIO(archive), mode="r:*")  # noqa: SIM115
    except (tarfile.TarError, OSError) as e:
        raise SandboxError(f"cannot unpack the workspace: {e}") from e
    with src, tarfile.open(fileobj=buf, mode="w") as out:
        for member in _safe_members(src):
            data = src.extractfile(member) if member.isreg() else None
            out.addfile(_owned(member, member.type, member.mode), data)
    return buf.getvalue()


def read_file(api: Any, cid: str, root: Path | None, path: str, cap: int) -> bytes | None:
    """One regular file out of container ``cid``, or None if it is absent: read in the
    volume's folder ``root`` when this host holds it, else copied out with
    ``get_archive``. A link, device, folder or file over ``cap`` raises :class:`Refused`."""
    import docker.errors

    if root is not None:
        return _read_beneath(root, path[len(ROOT) + 1 :], cap)
    try:  # stat first (HEAD): a refused file is never streamed
        head = api.head(api._url("/containers/{0}/archive", cid), params={"path": path})
        if head.status_code == 404:
            return None
        api._raise_for_status(head)
        info = json.loads(base64.b64decode(head.headers["X-Docker-Container-Path-Stat"]))
    except Exception as e:
        raise engine_error(f"copying {path} out of {cid[:12]}", e) from e
    if info.get("linkTarget"):
        raise Refused("a symbolic link")
    if int(info.get("mode", 0)) & _TYPE_BITS:
        raise Refused(f"not a regular file (mode {int(info.get('mode', 0)):#o})")
    if int(info.get("size", 0)) > cap:
        raise Refused(f"{info.get('size')} bytes, over the cap of {cap}")
    try:
        stream, _ = api.get_archive(cid, path, chunk_size=1 << 16)
    except docker.errors.NotFound:
        return None
    except Exception as e:
        raise engine_error(f"copying {path} out of {cid[:12]}", e) from e
    raw = bytearray()
    for chunk in stream:
        raw += chunk
        if len(raw) > cap + (1 << 16):
            raise Refused(f"larger than the cap of {cap}")
    return _single_file(bytes(raw), cap)


def collect(api: Any, cid: str, root: Path | None, patterns: Sequence[str], found: Outputs) -> None:
    """The workspace files matching ``patterns`` into ``found``: walked in the volume's
    folder ``root`` when this host holds it, else streamed with ``get_archive``."""
    if root is not None:
        _collect_here(root / "work", patterns, found)
        return
    try:
        stream, _ = api.get_archive(cid, WORK, chunk_size=1 << 16)
        with tarfile.open(fileobj=_Chunks(stream), mode="r|") as tar:
            _collect_members(tar, patterns, found)
    except Exception as e:
        raise engine_error(f"copying the outputs out of {cid[:12]}", e) from e


def _read_beneath(root: Path, rel: str, cap: int) -> bytes | None:
    """Read ``root/rel`` without following any link (``O_NOFOLLOW`` at every step), or
    None if absent. Anything but a regular file within ``cap`` raises :class:`Refused`."""
    parts = rel.split("/")
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
            flags |= 0 if last else os.O_DIRECTORY
            try:
                fds.append(os.open(part, flags, dir_fd=fds[-1]))
            except FileNotFoundError:
                return None
            except OSError as e:
                raise Refused(f"{e.strerror} at {part!r}") from e
        st = os.fstat(fds[-1])
        if why := _not_regular(st.st_mode):
            raise Refused(why)
        if st.st_size > cap:
            raise Refused(f"{st.st_size} bytes, over the cap of {cap}")
        data = b""
        while len(data) <= cap and (chunk := os.read(fds[-1], cap + 1 - len(data))):
            data += chunk
        if len(data) > cap:
            raise Refused(f"larger than the cap of {cap}")
        return data
    finally:
        for fd in fds:
            os.close(fd)


def _not_regular(mode: int) -> str:
    """Why a file of this mode is not copied out ("" for a regular file)."""
    kinds = (
        (stat.S_ISREG, ""),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    )
    return next((why for test, why in kinds if test(mode)), "not a regular file")


def glob_match(path: str, pattern: str) -> bool:
    """Whether the workspace path ``path`` (``a/b.txt``) matches ``pattern``: ``*``,
    ``?`` and ``[...]`` within one path segment, ``**`` for any number of segments. A
    path that is absolute or holds ``.`` or ``..`` segments matches nothing."""
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return False
    return _match(parts, pattern.split("/"))


def _match(parts: Sequence[str], pats: Sequence[str]) -> bool:
    if not pats:
        return not parts
    if pats[0] == "**":
        return any(_match(parts[i:], pats[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pats[0]) and _match(parts[1:], pats[1:])


@dataclass
class Outputs:
    """The declared outputs found so far: copied files, refused paths with why, caps."""

    cap: int
    files: dict[str, bytes] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    total: int = 0

    def patterns(self, globs: Sequence[str]) -> list[str]:
        """The usable globs (``./`` dropped, duplicates removed); one that is absolute
        or climbs out with ``..`` matches nothing and is refused."""
        usable: list[str] = []
        for glob in globs:
            while glob.startswith("./"):
                glob = glob[2:]
            if glob.startswith("/") or ".." in glob.split("/"):
                self.refused[glob] = "a path out of the workspace"
            elif glob and glob not in usable:
                usable.append(glob)
        return usable

    def fits(self, rel: str, size: int) -> bool:
        """Whether a file of ``size`` bytes is under both caps (else it is refused)."""
        if size > self.cap:
            self.refused[rel] = f"{size} bytes, over the cap of {self.cap} per file"
        elif self.total + size > OUTPUTS_CAP:
            self.refused[rel] = f"over the cap of {OUTPUTS_CAP} bytes for all outputs"
        return rel not in self.refused

    def add(self, rel: str, data: bytes) -> None:
        self.files[rel] = data
        self.total += len(data)


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """``(relative path, lstat)`` of everything under ``root``, in name order, links
    never followed; at most ``MAX_ENTRIES`` entries."""
    stack, seen = [""], 0
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(root / folder) as it:
                entries = sorted(it, key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                return
            rel = f"{folder}/{entry.name}" if folder else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            yield rel, st
            if stat.S_ISDIR(st.st_mode):
                stack.append(rel)


def _collect_here(work: Path, patterns: Sequence[str], found: Outputs) -> None:
    """The matching files of the workspace folder ``work`` on this host into ``found``
    (folders are walked, never copied or refused)."""
    for rel, st in _walk(work):
        if stat.S_ISDIR(st.st_mode) or not any(glob_match(rel, p) for p in patterns):
            continue
        if why := _not_regular(st.st_mode):
            found.refused[rel] = why
        elif found.fits(rel, st.st_size):
            try:
                data = _read_beneath(work, rel, found.cap)
            except Refused as e:
                found.refused[rel] = str(e)
                continue
            if data is not None and found.fits(rel, len(data)):
                found.add(rel, data)


def _collect_members(tar: tarfile.TarFile, patterns: Sequence[str], found: Outputs) -> None:
    """The matching members of a streamed ``get_archive`` of ``work/`` into ``found``."""
    for member in tar:
        rel = member.name.partition("/")[2].rstrip("/")
        if not rel or member.isdir() or not any(glob_match(rel, p) for p in patterns):
            continue
        if member.issym():
            found.refused[rel] = "a symbolic link"
        elif member.islnk():
            found.refused[rel] = "a hard link"
        elif member.isfifo():
            found.refused[rel] = "a FIFO"
        elif member.ischr() or member.isblk():
            found.refused[rel] = "a device"
        elif not member.isreg():
            found.refused[rel] = "not a regular file"
        elif found.fits(rel, member.size):
            f = tar.extractfile(member)
            assert f is not None
            found.add(rel, f.read())


class _Chunks(io.RawIOBase):
    """A readable file over an iterator of byte chunks (a streamed ``get_archive``)."""

    def __init__(self, chunks: Any) -> None:
        super().__init__()
        self.chunks, self.buf = iter(chunks), b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self.buf:
            try:
                self.buf = next(self.chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self.buf))
        b[:n] = self.buf[:n]
        self.buf = self.buf[n:]
        return n


def _safe_members(src: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    dest = "/nonexistent-revtree-workspace"
    try:
        for member in src:
            filtered = tarfile.data_filter(member, dest)
            if filtered is not None:
                yield filtered
    except (tarfile.TarError, OSError) as e:
        raise SandboxError(f"cannot unpack the workspace: {e}") from e


def _owned(info: tarfile.TarInfo, kind: bytes, mode: int) -> tarfile.TarInfo:
    info.type, info.mode = kind, mode
    info.uid = info.gid = UID
    info.uname = info.gname = ""
    return info


def _single_file(raw: bytes, cap: int) -> bytes:
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            members = tar.getmembers()
            if len(members) != 1 or not members[0].isreg():
                raise Refused("not a single regular file")
            member = members[0]
            if member.size > cap or "/" in member.name.strip("/") or member.name in ("..", "."):
                raise Refused("a bad name or size")
            f = tar.extractfile(member)
            assert f is not None
            return f.read(cap + 1)[:cap]
    except tarfile.TarError as e:
        raise Refused(f"an unreadable archive: {e}") from e
