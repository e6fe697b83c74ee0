"""Starting a command in a box, the two ways (see the package doc): through the exec API
(:func:`launch_exec`), or by releasing a resident runner (:func:`launch_resident`); the
runner script both run; and :class:`Tails`, the reader of the command's output stream
that either launch returns (its stdin too, for an exec)."""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import socket
import threading
import time
from pathlib import Path
from typing import Any

from revtree.errors import SandboxError
from revtree.sandboxes.base import METRICS_FD, ExecRequest
from revtree.sandboxes.docker.containers import GO, PAYLOAD, SCRIPT, Box
from revtree.sandboxes.docker.engine import OUT, PATH, ROOT, UID, WORK, engine_error
from revtree.sandboxes.env import sandbox_env

GRACE = 5.0  # seconds the in-container backstop waits past the host's timeout


def launch_exec(
    api: Any, image: str, box: Box, request: ExecRequest, disk: int
) -> tuple[Tails, str, float]:
    """Start the runner script through the exec API (it unpacks the workspace from
    its stdin, which the caller then writes). Returns the output reader, the exec's
    id and the start time."""
    try:
        eid = api.exec_create(
            box.cid,
            ["/bin/sh", "-c", runner_script(request, disk)],
            stdin=True,
            user=f"{UID}:{UID}",
            environment={"PATH": PATH},
            workdir=ROOT,
        )["Id"]
        start = time.monotonic()
        sock = api.exec_start(eid, socket=True)
    except Exception as e:
        what = f"running the command in {box.cid[:12]} of {image!r}"
        raise engine_error(what, e) from e
    tails = Tails(sock, request.limits.output_cap)
    tails.start()
    return tails, eid, start


def launch_resident(
    box: Box, request: ExecRequest, payload: bytes, disk: int
) -> tuple[Tails, str, float]:
    """Write the workspace archive and the runner script into the volume's root
    (root's, the sandbox user cannot change them), then open the trigger FIFO: the
    waiting main process becomes the runner script. Its output arrives on the attach
    stream opened before the container started."""
    root = box.local
    if root is None:
        raise SandboxError(f"the volume of {box.cid[:12]} is no longer reachable here")
    try:
        _write_new(root / PAYLOAD, payload)
        _write_new(root / SCRIPT, runner_script(request, disk, PAYLOAD).encode())
    except OSError as e:
        raise SandboxError(f"cannot write the workspace into {root}: {e}") from e
    tails = Tails(box.take_stream(), request.limits.output_cap)  # the reader closes it
    tails.start()
    start = time.monotonic()
    _trigger(root / GO, box.cid)
    return tails, "", start


def runner_script(request: ExecRequest, disk: int, archive: str = "-") -> str:
    """The runner script (exec'd, or a resident box's main process): caps, the
    workspace unpacked (as the sandbox user) from ``archive`` in the volume's root, or
    stdin for ``-``, a clean environment, the backstop timeout, ``out/metrics.json`` as
    the command's descriptor ``METRICS_FD`` (the runner itself does not hold it);
    afterwards every other process of the sandbox user is killed (PID 1, the holding
    process or the resident runner itself, is spared by the kernel)."""
    env = sandbox_env(request.env, home=WORK, tmp="/tmp")
    env["PATH"] = PATH
    assigns = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    backstop = int(request.limits.timeout + GRACE) + 1
    mem = request.limits.memory_bytes
    # RLIMIT_AS is set here, not by the engine: runc itself would not start under it
    limit_as = f"ulimit -v {mem // 1024} || exit 125\n" if mem else ""
    return (
        f"ulimit -f {disk // 512} || exit 125\n{limit_as}"
        f"tar -xf {shlex.quote(archive)} -C {WORK} || exit 125\ncd {WORK} || exit 125\n"
        f"if command -v timeout >/dev/null; then T='timeout -s KILL {backstop}'; else T=; fi\n"
        f"env -i {assigns} $T /bin/sh -c {shlex.quote(request.command)} </dev/null "
        f"{METRICS_FD}>{OUT}/metrics.json\n"
        "rc=$?\nkill -KILL -1 2>/dev/null\nexit $rc\n"
    )


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (never an existing file or link), readable by all, with ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(fd, 0o644)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _trigger(fifo: Path, cid: str, patience: float = 10.0) -> None:
    """Release a resident runner blocked opening ``fifo``. Retried while nobody reads
    it yet (a container just started); a SandboxError if its runner never comes."""
    end = time.monotonic() + patience
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
            break
        except OSError as e:
            if e.errno != errno.ENXIO or time.monotonic() > end:
                raise SandboxError(f"the runner of container {cid[:12]} is gone: {e}") from e
            time.sleep(0.002)
    try:
        os.write(fd, b"\n")
    except OSError as e:
        raise SandboxError(f"the runner of container {cid[:12]} is gone: {e}") from e
    finally:
        os.close(fd)


class Tails(threading.Thread):
    """Drains an exec's hijacked socket, keeping the last ``cap`` bytes of stdout and
    stderr; :meth:`send` writes its stdin and closes it."""

    def __init__(self, sock: Any, cap: int) -> None:
        super().__init__(daemon=True)
        self.sock, self.cap = sock, cap
        self.raw = getattr(sock, "_sock", sock)
        with contextlib.suppress(AttributeError, OSError):
            self.raw.settimeout(None)  # a quiet command is not a dead engine
        self.bufs = [bytearray(), bytearray()]
        self.totals = [0, 0]

    def send(self, data: bytes) -> None:
        """Write ``data`` then close the write side (errors: the container was killed)."""
        with contextlib.suppress(OSError, AttributeError):
            self.raw.sendall(data)
            self.raw.shutdown(socket.SHUT_WR)

    def run(self) -> None:
        from docker.utils.socket import frames_iter

        with contextlib.suppress(Exception):
            for kind, chunk in frames_iter(self.sock, False):
                if kind not in (1, 2) or not chunk:
                    continue
                i = kind - 1
                self.totals[i] += len(chunk)
                buf = self.bufs[i]
                buf += chunk
                if len(buf) > 2 * self.cap:
                    del buf[: len(buf) - self.cap]
        for end in (self.sock, self.raw):
            with contextlib.suppress(Exception):
                end.close()

    @property
    def truncated(self) -> bool:
        return any(t > self.cap for t in self.totals)

    def text(self, i: int) -> str:
        return bytes(self.bufs[i][-self.cap :]).decode("utf-8", errors="replace")
