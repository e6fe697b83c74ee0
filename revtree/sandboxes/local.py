"""The local sandbox: a subprocess in a throw-away folder, for machines with no Docker.
``bwrap.py`` runs the same supervisor inside Linux namespaces (``--sandbox bwrap``).

What is covered:
- a fresh workspace per execution from the request's tar (tarfile's ``data`` filter),
  unpacked ahead while the evaluation waits for its slot where it is ``staged`` (which
  also tells the caller once the process runs);
- each command runs under a supervisor (``supervise.py``), a child subreaper: at the
  end, timeout or cancel it SIGKILLs every descendant (``setsid`` and double forks too)
  and the process group before the result is returned;
- the supervisor dies with the thread that started it (``PR_SET_PDEATHSIG``, SIGTERM);
  ``reap`` kills the groups and removes the folders that a killed orchestrator left;
- ``RLIMIT_AS`` and ``RLIMIT_CPU`` on the command; the tail of stdout and stderr kept;
- metrics come on descriptor 3 from an unlinked file (no path anywhere), up to 1 MiB;
- declared outputs copied out, links not followed; an allow-listed environment (env.py);
- entries of ``/dev/shm`` owned by our uid that appeared while evaluations ran are
  removed once this process has no evaluation in flight (``ShmJanitor``);
- ``protect_orchestrator``: the orchestrator's ``/proc/<pid>/environ`` unreadable to
  the sandbox (non-root users only); the workspace removed afterwards (in the
  background: ``drain`` and ``close`` wait for it).

What is not covered (use the bwrap or docker backend for untrusted code):
- the code runs as the same user on the same file system and network: it can read and
  write what that user can (``REVTREE_HOME``'s database and repositories, ``~/.ssh``,
  the Python installation: a ``.pth`` file), and leave files anywhere;
- the metrics descriptor is inherited by everything the shell starts, so a
  single-step evaluator that runs candidate code can be forged: use a grade step;
- a workspace unpacked ahead for the next candidate (``staged``) sits in ``base_dir``
  (or the ``[sandbox] workspaces`` folder) while the one before runs, which can read or
  change it as any file of that user;
- ``/proc`` of the same user's processes: command lines, environments unless
  non-dumpable (as root, all of them: ``protect_orchestrator`` does not help);
- a candidate can SIGKILL its supervisor: then a ``setsid`` daemon may survive;
- ``/dev/shm``: files stay while evaluations run back to back, and after a killed
  orchestrator; another program's new unheld entry is swept too (a sandbox's own
  workspaces folder, ``revtree-ws-*``, never); ``/tmp``, SysV IPC
  and abstract sockets are not swept.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from revtree.errors import Cancelled, SandboxError
from revtree.sandboxes.base import (
    OUTPUT_FILE_CAP,
    OUTPUTS_CAP,
    ExecRequest,
    ExecResult,
    Limits,
    SandboxContext,
)
from revtree.sandboxes.env import sandbox_env
from revtree.sandboxes.forkserver import ForkServer, enabled
from revtree.sandboxes.shm import SHM, ShmJanitor
from revtree.sandboxes.supervise import PARENT_ENV
from revtree.sandboxes.watch import watch
from revtree.sandboxes.workspace import Elsewhere, Trash, extract, reap_in, reap_recorded

__all__ = ["SHM", "Launch", "LocalSandbox", "ShmJanitor", "build", "supervised"]


def __getattr__(name: str) -> Any:
    """``Config`` (the common ``[sandbox]`` keys), when asked for: every command imports
    this module, and ``--version`` must not load pydantic."""
    if name != "Config":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from revtree.tasks.sandbox import LocalConfig

    return LocalConfig


_PR_SET_DUMPABLE = 4
METRICS_CAP = 1 << 20
STOP_GRACE = 3.0  # seconds the supervisor has to kill its descendants before the group kill
SUPERVISOR = str(Path(__file__).with_name("supervise.py"))

# Resolved in the parent: the child of a threaded process must not import or load
# libraries (another thread may hold the import lock).
prctl = ctypes.CDLL(None).prctl if sys.platform == "linux" else None


def protect_orchestrator() -> bool:
    """Make this process non-dumpable (``PR_SET_DUMPABLE`` 0): processes of the same user
    cannot read its ``/proc/<pid>/environ``, ``mem``, ``maps``, ``fd`` nor attach a
    debugger (root can). Call once, at start; returns whether it was set."""
    if prctl is None:
        return False
    return int(prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0


def build(context: SandboxContext) -> LocalSandbox:
    """The local backend: the context's ``base_dir`` and ``[sandbox] preload`` and
    ``workspaces``; the rest of its ``[sandbox]`` (``Config``: limits, environment) comes
    with each request."""
    cfg = context.config
    preload, spaces = getattr(cfg, "preload", ()), getattr(cfg, "workspaces", None)
    return LocalSandbox(context.base_dir, preload, spaces)


class LocalSandbox:
    """Runs each request in a new folder under ``base_dir`` (default: the temp dir), or
    under a folder of its own in ``workspaces`` (``[sandbox] workspaces``)."""

    name = "local"
    contained = False  # the host's filesystem and network: reviewed before evaluated
    warm = True  # commands start from a fork server (forkserver.py), where it is enabled

    def __init__(
        self,
        base_dir: str | Path | None = None,
        preload: tuple[str, ...] = (),
        workspaces: str | Path | None = None,
    ) -> None:
        """``preload``: packages beside numpy and scipy that the fork server may load
        ahead, where the task's files import them (``zygote_preload``); ``workspaces``:
        an existing folder (a tmpfs, say) where this sandbox makes a folder of its own
        for its workspaces (``workspace.Elsewhere``), removed by ``close``."""
        self.base_dir = Path(base_dir) if base_dir else None
        if self.base_dir:
            self.base_dir.mkdir(parents=True, exist_ok=True)
        self.spaces = Elsewhere(Path(workspaces), self.base_dir) if workspaces else None
        self.forks = ForkServer(tuple(preload)) if self.warm and enabled() else None
        self.trash = Trash()
        self._ready: list[_Stage] = []  # workspaces unpacked ahead (``staged``)
        self._lock = threading.Lock()

    def warm_up(self, env: Mapping[str, str]) -> None:
        """Start the fork server now, with the environment of the task's commands
        (``env``, as a request carries it), so that it boots while the run starts rather
        than before the first evaluation (``base.Warmed``)."""
        if self.forks is not None:
            self.forks.start_soon(sandbox_env(env, home=os.devnull, tmp=os.devnull))

    def execute(self, request: ExecRequest, cancel: threading.Event | None = None) -> ExecResult:
        t0 = time.monotonic()
        if cancel is not None and cancel.is_set():
            raise Cancelled("the evaluation was cancelled before it started")
        stage = self._take(request.archive)
        tmp = stage.folder if stage else self._unpack(request.archive)
        try:
            with (
                tempfile.TemporaryFile(dir=tmp) as metrics,
                SHM.window(),
                self._launch(request, tmp, metrics.fileno()) as how,
            ):
                setup = time.monotonic() - t0
                then = stage.started if stage else None
                result = _run(how, request, cancel, tmp / "pgid", self.forks, then)
                text = _read_metrics(metrics.fileno())
            files, refused = collect_outputs(how.outputs, request.outputs)
            return dataclasses.replace(
                result, metrics_text=text, setup_seconds=setup, files=files, refused=refused
            )
        finally:
            self.trash.put(tmp)

    @contextlib.contextmanager
    def staged(self, archive: bytes, started: Callable[[], object]) -> Iterator[bool]:
        """Unpack ``archive`` now, while the caller waits for a slot (``base.Staged``):
        the next ``execute`` in this thread of a request carrying this very bytes object
        runs in that workspace instead of unpacking its own, and calls ``started`` once
        its process runs. Yields whether it did: False where the archive cannot be
        unpacked (``execute`` refuses it then). What no execution took is removed at
        the exit."""
        try:
            stage: _Stage | None = _Stage(archive, self._unpack(archive), started)
        except SandboxError:
            stage = None
        if stage is None:
            yield False
            return
        with self._lock:
            self._ready.append(stage)
        try:
            yield True
        finally:
            with self._lock:
                if unused := stage in self._ready:  # (by identity: ``eq=False``)
                    self._ready.remove(stage)
            if unused:
                self.trash.put(stage.folder)

    def _take(self, archive: bytes) -> _Stage | None:
        """The workspace this thread staged for ``archive`` (the same object), taken."""
        me = threading.get_ident()
        with self._lock:
            for i, stage in enumerate(self._ready):
                if stage.archive is archive and stage.thread == me:
                    return self._ready.pop(i)
        return None

    def _unpack(self, archive: bytes) -> Path:
        """A new folder under ``base_dir`` with ``archive`` unpacked in ``ws`` and an
        empty ``out``."""
        where = self.spaces.folder() if self.spaces else self.base_dir
        tmp = Path(tempfile.mkdtemp(prefix="revtree-", dir=where))
        try:
            (tmp / "out").mkdir()
            extract(archive, tmp / "ws")
        except BaseException:
            self.trash.put(tmp)
            raise
        return tmp

    @contextlib.contextmanager
    def _launch(self, request: ExecRequest, tmp: Path, fd: int) -> Iterator[Launch]:
        """How to start ``request`` in ``tmp`` (its ``ws`` and ``out`` made), metrics on ``fd``."""
        ws = tmp / "ws"
        env = sandbox_env(request.env, home=ws, tmp=tmp / "out")
        env[PARENT_ENV] = str(os.getpid())  # the supervisor binds itself to us: no preexec
        argv = supervised(request.command, fd, request.limits)
        yield Launch(argv, env, ws, ws, (fd,), None)

    def drain(self) -> None:
        """Wait until the workspaces of the executions that returned are removed."""
        self.trash.drain()

    def close(self) -> None:
        """Stop the fork server, if one was started, and remove the workspaces left."""
        if self.forks is not None:
            self.forks.close()
        self.trash.drain()
        if self.spaces is not None:
            self.spaces.close()

    def reap(self) -> int:
        """Kill the process groups and remove the workspaces that a killed orchestrator
        left in ``base_dir``, and in the ``workspaces`` folders its sessions made
        (recorded in ``base_dir``'s ``ELSEWHERE``). Call it only while no execution of
        this sandbox runs."""
        if self.base_dir is None or not self.base_dir.is_dir():
            return 0
        mine = self.spaces.path if self.spaces else None
        return reap_in(self.base_dir) + reap_recorded(self.base_dir, mine)


@dataclasses.dataclass(frozen=True, eq=False)
class _Stage:
    """A workspace unpacked ahead (``LocalSandbox.staged``), for one execution of
    ``archive`` in the thread that staged it; ``started`` is called once it runs."""

    archive: bytes
    folder: Path
    started: Callable[[], object]
    thread: int = dataclasses.field(default_factory=threading.get_ident)


def _read_metrics(fd: int) -> str | None:
    """What the command wrote on its descriptor 3 (None if nothing), up to the cap."""
    if os.fstat(fd).st_size == 0:
        return None
    return os.pread(fd, METRICS_CAP, 0).decode("utf-8", errors="replace")


# ---------------------------------------------------------------- declared outputs


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A workspace-relative glob as a regex: ``*``, ``?`` and ``[...]`` stay within one
    path segment, ``**`` spans segments (``**/`` also matches none)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] in "*?":
            out.append("[^/]*" if pattern[i] == "*" else "[^/]")
            i += 1
        elif pattern[i] == "[" and (j := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : j].replace("\\", "\\\\")
            out.append("[^/" + body[1:] + "]" if body[0] in "!^" else "[" + body + "]")
            i = j + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def _workspace_entries(root: Path) -> Iterator[str]:
    """Every path under ``root`` (files, folders, links), relative, links not followed."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        rel = Path(folder).relative_to(root)
        for name in dirs + files:
            yield (rel / name).as_posix()


def _refusal(st: os.stat_result) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a fifo, socket or device)"
    if st.st_size > OUTPUT_FILE_CAP:
        return f"{st.st_size} bytes, over the {OUTPUT_FILE_CAP}-byte cap per file"
    return None


def _read_regular(path: Path, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is no longer a regular file")
        return os.read(fd, size + 1)[: OUTPUT_FILE_CAP + 1]
    finally:
        os.close(fd)


def collect_outputs(root: Path, globs: Iterable[str]) -> tuple[dict[str, bytes], dict[str, str]]:
    """The regular files under ``root`` matching ``globs`` (path -> bytes), and the
    matches refused (path -> why): links (never followed, nor folders through them),
    fifos, sockets, devices, files over ``OUTPUT_FILE_CAP`` or past
    ``OUTPUTS_CAP`` in all. A glob that is absolute or climbs with ``..`` is refused
    under its own text."""
    files: dict[str, bytes] = {}
    refused: dict[str, str] = {}
    globs = list(globs)
    bad = [g for g in globs if g.startswith("/") or ".." in g.split("/")]
    refused.update({g: "outside the workspace" for g in bad})
    regexes = [_glob_regex(re.sub(r"^(\./)+", "", g)) for g in globs if g not in bad]
    if not regexes:
        return files, refused
    total = 0
    for rel in sorted(_workspace_entries(root)):
        if not any(r.fullmatch(rel) for r in regexes):
            continue
        st = os.lstat(root / rel)
        if stat.S_ISDIR(st.st_mode):
            continue  # a folder is walked into, not copied
        if (why := _refusal(st)) is None and total + st.st_size > OUTPUTS_CAP:
            why = f"past the {OUTPUTS_CAP}-byte cap on all outputs"
        if why is None:
            try:
                data = _read_regular(root / rel, st.st_size)
            except OSError as e:
                why = f"unreadable: {e}"
            else:
                files[rel] = data
                total += len(data)
        if why is not None:
            refused[rel] = why
    return files, refused


# ---------------------------------------------------------------- the process


def _caps(limits: Limits) -> tuple[int, int]:
    """The supervisor's MEMORY and CPU arguments."""
    return limits.memory_bytes or 0, max(1, int(limits.cpu_seconds)) if limits.cpu_seconds else 0


def supervised(command: str, fd: int, limits: Limits) -> list[str]:
    """The command line that runs ``command`` under the supervisor."""
    memory, cpu = _caps(limits)
    return [sys.executable, "-I", "-S", SUPERVISOR, str(fd), str(memory), str(cpu), command]


@dataclasses.dataclass(frozen=True)
class Launch:
    """How a backend starts one command: the command line, its environment and folder,
    where its outputs are collected from, the descriptors passed, what runs before exec."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    outputs: Path
    pass_fds: tuple[int, ...]
    preexec: Callable[[], None] | None  # None where possible: a preexec forks us whole


def _run(
    how: Launch,
    request: ExecRequest,
    cancel: threading.Event | None,
    pgid_file: Path,
    forks: ForkServer | None = None,
    started: Callable[[], object] | None = None,
) -> ExecResult:
    command, limits = request.command, request.limits
    if forks is not None and how.preexec is None:
        fd, ahead = how.pass_fds[0], (request.imports, request.sources)
        proc: Any = forks.spawn(how.cwd, how.env, fd, *_caps(limits), command, *ahead)
    else:
        proc = None
    start = time.monotonic()  # a fork server that did not answer spends none of the timeout
    try:
        proc = proc or subprocess.Popen(
            how.argv,
            cwd=how.cwd,
            env=how.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=how.pass_fds,
            preexec_fn=how.preexec,
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise SandboxError(f"cannot start {command!r}: {e}") from e
    assert proc.stdout is not None and proc.stderr is not None
    pgid_file.write_text(str(proc.pid))
    failed: BaseException | None = None
    try:
        if started is not None:
            started()
    except BaseException as e:  # stopped as a cancel stops it: its tree killed, reaped
        failed, cancel = e, threading.Event()
        cancel.set()
    try:
        seen = watch(proc, limits.output_cap, start, start + limits.timeout, cancel, STOP_GRACE)
    finally:
        proc.stdout.close()
        proc.stderr.close()
    if failed is not None:
        raise failed
    if seen.why == "cancel":
        raise Cancelled("the evaluation was cancelled")
    out, err = seen.stdout, seen.stderr
    return ExecResult(
        exit_code=seen.code,
        stdout=out.text(),
        stderr=err.text(),
        duration=seen.duration,
        timed_out=seen.why == "timeout",
        truncated=any(t.total > limits.output_cap for t in (out, err)),
    )
