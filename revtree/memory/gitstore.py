"""The git revision store: one bare repository per run, one commit per node.

Each node's commit has its parent node's commit as parent and is kept reachable by
``refs/revtree/nodes/<node-id>``; failed and rejected nodes keep theirs too, so any
node can be forked later. Objects are written as loose objects through GitPython's
object database (no working tree, no index, no subprocess per commit) and read back
here (a packed object through git's ``cat-file``); refs are written as git writes a
loose ref. ``diff`` is the one read that may run ``git``: a diff of text files changed
in place is made here (``textdiff``). Methods are thread-safe.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path

import git
from git.objects.fun import tree_entries_from_data, tree_to_stream
from gitdb import IStream, LooseObjectDB

from revtree.errors import EditError, StoreError
from revtree.memory.textdiff import file_diff, text_of

TREE_MODE = 0o040000
FILE_MODE = 0o100644
EXEC_MODE = 0o100755
LINK_MODE = 0o120000
ACTOR = git.Actor("revtree", "revtree@localhost")
NODE_REF = "refs/revtree/nodes/{}"
HOLDOUT_REF = "refs/revtree/holdout"
PROTECTED_REF = "refs/revtree/protected"  # a fork's own evaluator files (``fork --task``)

Entry = tuple[bytes, int, str]  # (binsha, mode, name) as git stores a tree row
Change = bytes | None  # new content, or None to delete
Files = dict[str, tuple[bytes, int]]  # a commit's files: path -> (blob binsha, mode)


DIFF_CACHE_MAX = 256 * 1024  # characters of one diff kept in the cache, at most


class GitStore:
    """A bare repository at ``path`` holding every revision of one run."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._blobs: OrderedDict[bytes, bytes] = OrderedDict()
        self._files: OrderedDict[str, dict[str, tuple[bytes, int]]] = OrderedDict()
        self._diffs: OrderedDict[tuple[str, str], str] = OrderedDict()
        try:
            if not (self.path / "HEAD").is_file():
                # no template: git's sample hooks were 25 KB of every run's disk
                # (the option is "unsafe" only for a value a user could set)
                git.Repo.init(
                    self.path, bare=True, mkdir=True, template="", allow_unsafe_options=True
                ).close()
            self.repo = git.Repo(self.path)
            self._loose = LooseObjectDB(str(self.path / "objects"))
        except (git.GitError, OSError) as e:
            raise StoreError(f"cannot open the git store at {self.path}: {e}") from e

    # -- writing ------------------------------------------------------------------
    def commit_files(
        self, files: Mapping[str, bytes], message: str, modes: Mapping[str, int] | None = None
    ) -> str:
        """A parentless commit of exactly ``files`` (the root revision)."""
        with self._lock:
            changes = {p: d for p, d in files.items()}
            tree = self._update_tree(None, _split(changes), modes or {})
            return self._commit(tree, [], message)

    def commit(
        self, parent: str, changes: Mapping[str, Change], message: str, when: float | None = None
    ) -> str:
        """A commit on ``parent`` with ``changes`` applied (None deletes a path).

        With the same inputs and ``when`` the commit (and its sha) is the same, so a
        replayed step after a crash rewrites the identical commit.
        """
        with self._lock:
            tree = self._update_tree(self._tree_of(parent), _split(changes), {})
            return self._commit(tree, [parent], message, when)

    def set_ref(self, ref: str, sha: str) -> None:
        """Point ``ref`` at commit ``sha`` as git writes a loose ref: the new value in
        ``REF.lock`` (made exclusively: git's own lock), renamed over the ref. A lock left
        by a killed session of this run (which holds the run's claim) is taken over. A
        sha that is not a loose object here goes through GitPython, which checks it."""
        hexsha = sha if len(sha) == 40 and _hex(sha) else ""
        if not hexsha or not ref.startswith("refs/") or not self._loose_file(hexsha).is_file():
            with self._lock:
                git.Reference.create(self.repo, ref, sha, force=True)
            return
        path = self.path / ref
        lock = path.with_name(path.name + ".lock")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        with self._lock:  # one writer in this process: a lock found is another's
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(lock, flags, 0o644)
            except FileExistsError:
                lock.unlink(missing_ok=True)  # a killed session's
                fd = os.open(lock, flags, 0o644)
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(hexsha + "\n")
                os.replace(lock, path)
            except BaseException:
                lock.unlink(missing_ok=True)
                raise

    def _loose_file(self, hexsha: str) -> Path:
        return self.path / "objects" / hexsha[:2] / hexsha[2:]

    def set_node_ref(self, node_id: int, sha: str) -> None:
        self.set_ref(NODE_REF.format(node_id), sha)

    def node_refs(self) -> dict[int, str]:
        with self._lock:
            return self._scan_refs(NODE_REF.format(""))

    def _scan_refs(self, prefix: str) -> dict[int, str]:
        out = self.repo.git.for_each_ref("--format=%(refname) %(objectname)", prefix)
        refs = {}
        for line in out.splitlines():
            name, sha = line.split()
            if name[len(prefix) :].isdigit():  # not a stray file a crash left among them
                refs[int(name[len(prefix) :])] = sha
        return refs

    def _commit(
        self, tree: bytes, parents: list[str], message: str, when: float | None = None
    ) -> str:
        stamp = f"{int(time.time() if when is None else when)} +0000"
        who = f"{ACTOR.name} <{ACTOR.email}> {stamp}"
        lines = [
            f"tree {tree.hex()}",
            *(f"parent {p}" for p in parents),
            f"author {who}",
            f"committer {who}",
            "",
            message,
        ]
        return self._write(b"commit", "\n".join(lines).encode("utf-8")).hex()

    def _write(self, kind: bytes, data: bytes) -> bytes:
        """Write a loose object (pure Python: no subprocess per object)."""
        binsha: bytes = self._loose.store(IStream(kind, len(data), io.BytesIO(data))).binsha
        return binsha

    def _object(self, binsha: bytes, kind: bytes) -> bytes:
        """The content of the object ``binsha``, which must be a ``kind``: a loose object
        read and inflated here (every object a run writes is loose), else (packed, or a
        loose file that is not a whole object) through GitPython's database."""
        try:
            with open(self._loose_file(binsha.hex()), "rb") as f:
                raw = zlib.decompress(f.read())
            header, _, data = raw.partition(b"\0")
            found, _, size = header.partition(b" ")
            if found == kind and size.isdigit() and int(size) == len(data):
                return data
        except (OSError, zlib.error):
            pass
        stream = self.repo.odb.stream(binsha)
        if stream.type != kind:
            raise StoreError(f"object {binsha.hex()} is a {stream.type!r}, not a {kind!r}")
        return bytes(stream.read())

    def _tree_of(self, commit: str) -> bytes:
        """The root tree of ``commit`` (a full hex id read here; any other name
        through GitPython)."""
        if len(commit) == 40 and _hex(commit):
            head = self._object(bytes.fromhex(commit), b"commit")[:46]
            if head.startswith(b"tree "):
                return bytes.fromhex(head[5:45].decode("ascii"))
        return bytes(self.repo.commit(commit).tree.binsha)

    def _entries(self, tree: bytes | None) -> dict[str, tuple[bytes, int]]:
        if tree is None:
            return {}
        data = self._object(tree, b"tree")
        return {name: (sha, mode) for sha, mode, name in tree_entries_from_data(data)}

    def _update_tree(
        self, tree: bytes | None, changes: dict, modes: Mapping[str, int], prefix: str = ""
    ) -> bytes:
        entries = self._entries(tree)
        for name, change in changes.items():
            if isinstance(change, dict):
                sub = entries.get(name)
                sub_tree = sub[0] if sub and sub[1] == TREE_MODE else None
                new = self._update_tree(sub_tree, change, modes, f"{prefix}{name}/")
                if self._entries(new):
                    entries[name] = (new, TREE_MODE)
                else:
                    entries.pop(name, None)
            elif change is None:
                entries.pop(name, None)
            else:
                old_mode = entries.get(name, (b"", FILE_MODE))[1]
                mode = modes.get(prefix + name, old_mode if old_mode != TREE_MODE else FILE_MODE)
                entries[name] = (self._write(b"blob", change), mode)
        rows: list[Entry] = [(sha, mode, name) for name, (sha, mode) in entries.items()]
        rows.sort(key=lambda e: e[2] + "/" if e[1] == TREE_MODE else e[2])
        buf = io.BytesIO()
        tree_to_stream(rows, buf.write)
        return self._write(b"tree", buf.getvalue())

    # -- reading ------------------------------------------------------------------
    def list_files(self, sha: str) -> dict[str, tuple[bytes, int]]:
        """Every file of the commit: path -> (blob binsha, mode). Cached: commits are
        immutable."""
        with self._lock:
            if (cached := self._files.get(sha)) is not None:
                self._files.move_to_end(sha)
                return dict(cached)
            out: dict[str, tuple[bytes, int]] = {}
            self._walk(self._tree_of(sha), "", out)
            self._files[sha] = out
            if len(self._files) > 256:
                self._files.popitem(last=False)
            return dict(out)

    def _walk(self, tree: bytes, prefix: str, out: dict[str, tuple[bytes, int]]) -> None:
        for name, (sha, mode) in self._entries(tree).items():
            if mode == TREE_MODE:
                self._walk(sha, f"{prefix}{name}/", out)
            else:
                out[prefix + name] = (sha, mode)

    def blob(self, binsha: bytes) -> bytes:
        with self._lock:
            if (data := self._blobs.get(binsha)) is not None:
                self._blobs.move_to_end(binsha)
                return data
            data = self._object(binsha, b"blob")
            self._blobs[binsha] = data
            if len(self._blobs) > 4096:
                self._blobs.popitem(last=False)
            return data

    def read(self, sha: str, path: str) -> bytes:
        files = self.list_files(sha)
        if path not in files:
            raise StoreError(f"{path!r} is not in revision {sha[:10]}")
        return self.blob(files[path][0])

    def read_files(self, sha: str, paths: list[str] | None = None) -> dict[str, bytes]:
        files = self.list_files(sha)
        return {p: self.blob(b) for p, (b, _) in files.items() if paths is None or p in paths}

    def changed_paths(self, parent: str, child: str) -> list[str]:
        return _changed(self.list_files(parent), self.list_files(child))

    def diff(self, base: str, head: str) -> str:
        """A unified diff (``git diff`` format, applies with ``git apply``). Cached
        between two commits named by their full ids (immutable): the review and the
        node's features ask for the same one."""
        key = (base, head)
        with self._lock:
            if (cached := self._diffs.get(key)) is not None:
                self._diffs.move_to_end(key)
                return cached
            text = self._text_diff(base, head)
            if text is None:
                text = str(self.repo.git.diff(base, head, "--no-color", "--binary")) + "\n"
            if len(text) < DIFF_CACHE_MAX and all(len(x) == 40 and x.isalnum() for x in key):
                self._diffs[key] = text
                if len(self._diffs) > 64:
                    self._diffs.popitem(last=False)
            return text

    def _text_diff(self, base: str, head: str) -> str | None:
        """The diff made here (``textdiff``) where every change is a text file changed
        in place, else None (git makes it)."""
        a, b = self.list_files(base), self.list_files(head)
        out = []
        for path in _changed(a, b):
            if path not in a or path not in b or a[path][1] != b[path][1]:
                return None  # added, deleted or a mode changed
            if a[path][1] not in (FILE_MODE, EXEC_MODE):
                return None
            old, new = text_of(self.blob(a[path][0])), text_of(self.blob(b[path][0]))
            ids = (a[path][0].hex(), b[path][0].hex())
            if old is None or new is None:
                return None
            if (one := file_diff(path, old, new, ids, a[path][1])) is None:
                return None
            out.append(one)
        return "".join(out) or "\n"  # (git says nothing, and the caller's newline)

    def _resolve(self, ref: str) -> str:
        with self._lock:
            return str(self.repo.commit(ref).hexsha)

    def find(self, ref: str) -> str | None:
        """The commit ``ref`` names, or None if there is no such ref."""
        try:
            return self._resolve(ref)
        except (ValueError, git.BadName, git.BadObject):
            return None

    def has_commit(self, sha: str) -> bool:
        with self._lock:
            try:  # repo.commit() of a full hex sha is lazy: ask the object database
                return bool(self.repo.odb.info(self.repo.commit(sha).binsha).type == b"commit")
            except (ValueError, git.BadName, git.BadObject):
                return False

    def archive(self, sha: str, overlay: Mapping[str, bytes] | None = None) -> bytes:
        """A tar of the commit's files, with ``overlay`` files added or replacing."""
        overlay = dict(overlay or {})
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path, (binsha, mode) in sorted(self.list_files(sha).items()):
                data = overlay.pop(path, None)
                _add(
                    tar,
                    path,
                    self.blob(binsha) if data is None else data,
                    FILE_MODE if data is not None else mode,
                )
            for path, data in sorted(overlay.items()):
                _add(tar, path, data, FILE_MODE)
        return buf.getvalue()

    def close(self) -> None:
        with self._lock:
            self.repo.close()


def _add(tar: tarfile.TarFile, path: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(path)
    info.mtime = 0
    if mode == LINK_MODE:
        info.type, info.linkname = tarfile.SYMTYPE, data.decode()
        tar.addfile(info)
        return
    info.size, info.mode = len(data), 0o755 if mode == EXEC_MODE else 0o644
    tar.addfile(info, io.BytesIO(data))


def _changed(a: Files, b: Files) -> list[str]:
    """The paths whose content or mode differ between two commits' files, sorted."""
    return sorted(p for p in a.keys() | b.keys() if a.get(p) != b.get(p))


def _hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _split(changes: Mapping[str, Change]) -> dict:
    """``{"a/b.py": x}`` -> ``{"a": {"b.py": x}}``."""
    root: dict = {}
    for path, data in changes.items():
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if not parts or ".." in parts:
            raise EditError(f"invalid path in a revision: {path!r}")
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise EditError(f"path {path!r} runs through a file changed in the same commit")
        if isinstance(node.get(parts[-1]), dict):
            raise EditError(f"path {path!r} is also a folder in the same commit")
        node[parts[-1]] = data
    return root


def file_mode(path: Path) -> int:
    """The git mode of a file on disk."""
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        return LINK_MODE
    return EXEC_MODE if st.st_mode & 0o111 else FILE_MODE
