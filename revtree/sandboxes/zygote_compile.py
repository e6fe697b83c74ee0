"""What the fork server (``zygote.py``) compiles ahead for the evaluations it forks: the
request's script, and the task's own module files, each once per source.

- The script (``compiled``), in the server before the fork: every evaluation of a run
  starts the same runner; the fork runs that code under its own file's name where the
  file it reads holds the same bytes.
- The task's own module files (``compile_sources``), in the server after the hand-off,
  so that the next spare has them: the request names each by its path in the workspace
  and the SHA-256 of the bytes that the orchestrator overlays there (the evaluator's
  files, ``ExecRequest.sources``), and a file is compiled only where it holds those
  very bytes, so no candidate that rewrites its workspace as it runs can have the
  server compile anything of its own. A fork's imports then take the code of a source
  whose bytes the server compiled (``cached_imports``), named for its own file, instead
  of compiling it again: 1.1-1.4 ms of each evaluation for an evaluator of 238 lines.

Each cache is keyed by the source's bytes and keeps the last used (``SCRIPTS``,
``SOURCES`` entries; a source already compiled is found by its digest, not read again).
A file that cannot be read as a regular file of at most ``SCRIPT_MAX`` bytes (its last
component no symbolic link), does not compile, or compiles with a warning is left to
the fork, which says what ``python`` would say; one that did not compile cleanly is
remembered (by its bytes' hash) and not compiled here again. Standard library only, as
the server.
"""

from __future__ import annotations

import importlib.machinery
import os
import stat
import types
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

try:  # CPython's own SHA-256, not OpenSSL's: hashlib here would load OpenSSL into
    # every fork, set up as the server's environment said (OPENSSL_CONF)
    from _sha2 import sha256  # 3.12 and later
except ImportError:
    from _sha256 import sha256  # 3.11

SCRIPTS = 16  # scripts kept compiled: the evaluator's runner, mostly
SOURCES = 64  # module files kept compiled
SCRIPT_MAX = 256 * 1024  # bytes of a script or a module file compiled here, at most
SOURCES_MAX = 32  # a request's module files compiled here, at most
REFUSED_MAX = 1024  # hashes of sources that did not compile cleanly, remembered
_SCRIPTS: dict[bytes, types.CodeType] = {}  # the server's, inherited by each fork
_SOURCES: dict[bytes, types.CodeType] = {}
_REFUSED: set[int] = set()
_BY_DIGEST: dict[str, bytes] = {}  # a source compiled here, by its SHA-256


def sources(files: Mapping[str, bytes]) -> tuple[tuple[str, str], ...]:
    """In the orchestrator: the Python files among ``files`` (path -> the bytes it
    overlays on every workspace) as ``ExecRequest.sources`` names them: (path, SHA-256)."""
    py = sorted(p for p in files if p.endswith(".py"))
    return tuple((p, sha256(files[p]).hexdigest()) for p in py)


def compiled(
    header: dict, cache: dict[bytes, types.CodeType] | None = None
) -> tuple[bytes, types.CodeType] | None:
    """In the server, before the fork: the request's script as its source and code, or
    None (``_compile_file``). ``cache``: the scripts' (the default) or a test's."""
    script = header.get("script")
    if not script:
        return None
    cache = _SCRIPTS if cache is None else cache
    return _compile_file(os.path.join(header["cwd"], script[0]), cache, SCRIPTS)


def compile_sources(header: dict, cache: dict[bytes, types.CodeType] | None = None) -> None:
    """In the server, after the hand-off: the module files the request names
    (``sources``: ``[path, sha256]`` pairs), each where it holds the named bytes; only
    for a script, which the fork runs itself (a command under a shell starts a Python of
    its own)."""
    if not header.get("script"):
        return
    cache = _SOURCES if cache is None else cache
    for entry in list(header.get("sources") or ())[:SOURCES_MAX]:
        try:
            rel, digest = entry
        except (TypeError, ValueError):
            continue
        if not isinstance(rel, str) or not isinstance(digest, str) or os.path.isabs(rel):
            continue
        if (known := _BY_DIGEST.get(digest)) is not None and known in cache:
            cache[known] = cache.pop(known)  # compiled already: kept as used, not read again
        elif done := _compile_file(os.path.join(header["cwd"], rel), cache, SOURCES, digest):
            if len(_BY_DIGEST) >= 4 * SOURCES:
                _BY_DIGEST.clear()
            _BY_DIGEST[digest] = done[0]


def _compile_file(
    path: str, cache: dict[bytes, types.CodeType], keep: int, digest: str | None = None
) -> tuple[bytes, types.CodeType] | None:
    """``path``'s source and code, compiled once per source (the last ``keep`` used
    kept), or None (see the module's text). ``digest``: the SHA-256 its bytes must have."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > SCRIPT_MAX:
                return None
            source = os.read(fd, SCRIPT_MAX + 1)
        finally:
            os.close(fd)
        if digest is not None and sha256(source).hexdigest() != digest:
            return None  # not the bytes the orchestrator put there
    except (OSError, ValueError):  # unreadable: the fork tries as python would
        return None
    code = cache.pop(source, None)
    if code is None:
        if hash(source) in _REFUSED:
            return None  # (a clash of hashes leaves a file to the fork: slower, as right)
        if (code := _clean(source)) is None:
            if len(_REFUSED) >= REFUSED_MAX:
                _REFUSED.clear()
            _REFUSED.add(hash(source))
            return None
        if len(cache) >= keep:
            cache.pop(next(iter(cache)))
    cache[source] = code  # (last: the most recently used)
    return source, code


def _clean(source: bytes) -> types.CodeType | None:
    """``source`` compiled, or None where it does not compile or warns as it does (a
    warning is the script's stderr's)."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            code = compile(source, "<script>", "exec", dont_inherit=True)
        except Exception:  # (SyntaxError, and what a pathological source raises)
            return None
    return None if said else code


def cached_imports() -> None:
    """In the fork, before its script runs: a module loaded from a source file whose very
    bytes the server compiled (``compile_sources``) gets that code, named for its file,
    instead of being compiled again; any other compiles as ever."""
    if not _SOURCES:
        return
    loader = importlib.machinery.SourceFileLoader
    plain = loader.source_to_code

    def source_to_code(self: Any, data: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        code = _SOURCES.get(data) if isinstance(data, bytes) else None
        if code is None or not isinstance(path, str) or kwargs.get("_optimize", -1) != -1:
            return plain(self, data, path, *args, **kwargs)
        return named(code, path)

    loader.source_to_code = source_to_code  # type: ignore[method-assign]


def named(code: types.CodeType, path: str) -> types.CodeType:
    """``code`` and the code objects in it, as compiled from the file ``path``."""
    consts = tuple(named(c, path) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=path, co_consts=consts)
