"""The sandbox protocol: run one command over one workspace, under limits.

A workspace is handed over as a tar archive (the ``git archive`` of a candidate's
commit with fresh protected files appended), so every backend, local or container,
receives exactly the same bytes and never sees the run's repository.

The metrics channel: the command's file descriptor ``METRICS_FD`` (3) is open for
writing; what it writes there comes back as ``ExecResult.metrics_text``. No path to it
is in the environment. Python's ``subprocess`` does not pass it on to children
(``close_fds``), but a shell would: for an evaluator that runs candidate code, the
channel is only as safe as the evaluator makes it (see the grade step).

Declared outputs: after the command, the regular files of the workspace that match
``ExecRequest.outputs`` (globs) are copied out into ``ExecResult.files``, each under
``OUTPUT_FILE_CAP`` bytes; a link, a device, a path out of the workspace or a file
over the cap is not copied but named in ``ExecResult.refused`` with the reason.
"""

from __future__ import annotations

import io
import tarfile
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

METRICS_FILE = ".revtree_metrics.json"
METRICS_FD = 3
OUTPUT_FILE_CAP = 64 << 20  # bytes per declared output file
OUTPUTS_CAP = 256 << 20  # bytes of declared outputs per execution


def archive_of(files: Mapping[str, bytes]) -> bytes:
    """A workspace archive of ``files`` (path -> content), regular files, mode 0644."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@dataclass(frozen=True)
class Limits:
    """Resource limits of one execution."""

    timeout: float
    memory_bytes: int | None = None
    cpu_seconds: float | None = None
    output_cap: int = 1 << 20


@dataclass(frozen=True)
class ExecRequest:
    """One command to run in a fresh workspace built from ``archive``."""

    archive: bytes
    command: str
    limits: Limits
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()  # globs of workspace files to copy out afterwards
    # what the task's own evaluator files import as they load (``zygote_preload``): a
    # backend may load it ahead (the local fork server does, once for every later fork)
    imports: tuple[str, ...] = ()
    # the task's own module files, (path in the workspace, SHA-256 of the bytes overlaid
    # there): a backend may compile them ahead (the local fork server does, once each,
    # for every later fork, where the file holds those bytes: ``zygote_compile``)
    sources: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ExecResult:
    """What came out. ``metrics_text`` is what the command wrote to ``METRICS_FD``
    (None if nothing); ``files`` the declared outputs copied out, by workspace path;
    ``refused`` the matching paths not copied, with why; ``host`` and ``gpus`` where it
    ran and on which GPU ids, where the backend knows (a Ray worker does)."""

    exit_code: int | None
    stdout: str
    stderr: str
    duration: float
    timed_out: bool = False
    metrics_text: str | None = None
    truncated: bool = False
    setup_seconds: float = 0.0
    files: Mapping[str, bytes] = field(default_factory=dict)
    refused: Mapping[str, str] = field(default_factory=dict)
    host: str | None = None
    gpus: tuple[str, ...] = ()


class Sandbox(Protocol):
    """Runs requests in isolated, throw-away workspaces. Must be thread-safe."""

    name: str

    def execute(self, request: ExecRequest, cancel: threading.Event | None = None) -> ExecResult:
        """Run the request; raise ``Cancelled`` if ``cancel`` is set while it runs."""
        ...

    def reap(self) -> int:
        """Remove what killed sessions left behind (processes, workspaces, containers);
        returns how many were found. Only called while this sandbox runs nothing."""
        ...

    def close(self) -> None:
        """Release what the backend holds (pools, clients)."""
        ...


@runtime_checkable
class Capacity(Protocol):
    """An optional ability: a backend on a cluster says how many evaluations of the
    task's request its nodes hold at once (``--parallel auto`` follows it)."""

    def capacity(self) -> int: ...


@runtime_checkable
class Staged(Protocol):
    """An optional ability (the local backends): ``staged(archive, started)`` unpacks a
    workspace ahead, while the caller waits for an evaluation slot, for the next
    ``execute`` in the same thread of a request carrying that very archive, which calls
    ``started`` once its process runs; it yields whether it did (else the caller says
    so itself); unused, the workspace is removed as the context exits."""

    def staged(
        self, archive: bytes, started: Callable[[], object]
    ) -> AbstractContextManager[bool]: ...


@runtime_checkable
class Warmed(Protocol):
    """An optional ability (the local backend): ``warm_up(env)`` starts now, in the
    background, what the first evaluation would otherwise wait for (its fork server),
    for commands with the environment ``env`` (a request's, before the sandbox's own)."""

    def warm_up(self, env: Mapping[str, str]) -> None: ...


@runtime_checkable
class Contained(Protocol):
    """An optional ability: ``contained`` is true where what a candidate does stays in
    its sandbox (its own root filesystem, no network, no host process), so its
    evaluation may start before a model has reviewed it (orchestrator/reviews.py). A
    backend without the attribute is taken not to contain anything."""

    contained: bool


@dataclass(frozen=True)
class SandboxContext:
    """What a backend's ``build(context, **options) -> Sandbox`` may use; each takes
    only what it needs. ``config``: the task's ``[sandbox]`` section (None: defaults);
    ``base_dir``: where workspaces go (None: a temporary folder); ``task_root``: the
    task's folder (relative mounts); ``gpu_pool``: leases GPU ids per evaluation;
    ``labels``: tags for what the backend creates (containers); ``runner``: the task's
    ``[runner]`` section; ``on_event``: ``(kind, message, node)`` told to the run."""

    config: Any = None
    base_dir: str | Path | None = None
    task_root: str | Path | None = None
    gpu_pool: Any = None
    labels: Mapping[str, str] | None = None
    runner: Any = None
    on_event: Callable[[str, str, int | None], None] | None = None


def watchdog(
    deadline: float,
    done: threading.Event,
    cancel: threading.Event | None,
    kill: Callable[[], None],
    why: list[str],
    check: Callable[[], str | None] | None = None,
) -> None:
    """Until ``done`` is set: on cancel, at the deadline, or when ``check`` names a
    reason, append the reason to ``why``, call ``kill`` and return. Run it in a thread
    beside the blocking wait for the process, so a finished process is noticed at once."""
    while not done.is_set():
        now = time.monotonic()
        if cancel is not None and cancel.is_set():
            reason: str | None = "cancel"
        elif now >= deadline:
            reason = "timeout"
        else:
            reason = check() if check is not None else None
        if reason is not None:
            why.append(reason)
            kill()
            return
        done.wait(min(0.05, deadline - now))
