"""Watching one command that a local backend started, from the thread that started it:
its two output pipes (the last ``cap`` bytes of each kept), its exit, its deadline and
a cancel, in one ``select`` loop.

Before, each evaluation started three threads (a reader per pipe and a watchdog) and
joined them: each start is a handshake for the interpreter lock, which another thread
preparing the next candidate holds for up to a switch interval (5 ms) at a time. The
exit is a descriptor that becomes readable: the fork server's status socket
(``Forked.exit_fd``), a pidfd for a process started here, or, where the kernel has no
pidfds, a pipe that one thread writes to once ``wait`` returns.

What ends a watch, as before: the exit; a cancel or the deadline, which send the
supervisor SIGTERM (it kills its tree) and, ``grace`` seconds later if it is still
there, SIGKILL to its process group. After the exit the pipes are read to their end for
at most ``DRAIN`` seconds (a process that left the group may hold them open). An
exception inside the watch (an interrupt) kills the command before it goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import selectors
import signal
import threading
import time
from typing import Any

POLL = 0.05  # seconds between looks at the cancel event (as the watchdog's)
DRAIN = 2.0  # seconds the pipes are read after the exit, at most
LONGEST = 3600.0  # seconds of one wait, at most (epoll refuses more than about 24 days)


@dataclasses.dataclass
class Tail:
    """The last ``cap`` bytes read from one pipe, and how many came in all."""

    cap: int
    buf: bytearray = dataclasses.field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.buf += chunk
        if len(self.buf) > 2 * self.cap:
            del self.buf[: len(self.buf) - self.cap]

    def text(self) -> str:
        return bytes(self.buf[-self.cap :]).decode("utf-8", errors="replace")


@dataclasses.dataclass(frozen=True)
class Watched:
    """How a command ended: its exit code as its ``wait`` gives it, the seconds from the
    watch's start to the exit, why it was stopped (``"cancel"``, ``"timeout"``, or
    None), and its output's tails."""

    code: int
    duration: float
    why: str | None
    stdout: Tail
    stderr: Tail


def watch(
    proc: Any, cap: int, start: float, deadline: float, cancel: threading.Event | None,
    grace: float,
) -> Watched:  # fmt: skip
    """Watch ``proc`` (a ``Popen`` or a ``Forked``, pipes on ``stdout`` and ``stderr``)
    until it exits; see the module."""
    tails = {proc.stdout.fileno(): Tail(cap), proc.stderr.fileno(): Tail(cap)}
    exit_fd, cleanup = _exit_fd(proc)
    why: str | None = None
    kill_at: float | None = None
    try:
        with selectors.DefaultSelector() as sel:
            for fd in tails:
                sel.register(fd, selectors.EVENT_READ)
            sel.register(exit_fd, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if why is None and ((cancel is not None and cancel.is_set()) or now >= deadline):
                    why = "timeout" if now >= deadline else "cancel"
                    _terminate(proc.pid)
                    kill_at = now + grace
                if kill_at is not None and now >= kill_at:
                    kill_group(proc.pid)
                    kill_at = None
                if why is None:  # the deadline, or the next look at the cancel
                    wait = min(deadline - now, POLL if cancel is not None else LONGEST)
                else:  # the grace's end, then until the exit
                    wait = kill_at - now if kill_at is not None else POLL
                events = sel.select(max(0.0, wait))
                if any(key.fd == exit_fd for key, _ in events):
                    break
                _read(sel, events, tails)
            code = proc.wait()
            duration = time.monotonic() - start
            kill_group(proc.pid)
            sel.unregister(exit_fd)
            _drain(sel, tails)
    except BaseException:  # (an interrupt, say): the command does not outlive its watch
        _terminate(proc.pid)
        kill_group(proc.pid)
        raise
    finally:
        cleanup()
    out, err = tails.values()
    return Watched(code, duration, why, out, err)


def _read(sel: selectors.BaseSelector, events: list[Any], tails: dict[int, Tail]) -> None:
    for key, _ in events:
        try:
            chunk = os.read(key.fd, 1 << 16)
        except OSError:
            chunk = b""
        if chunk:
            tails[key.fd].add(chunk)
        else:
            sel.unregister(key.fd)


def _drain(sel: selectors.BaseSelector, tails: dict[int, Tail]) -> None:
    """Read the pipes to their end, for at most ``DRAIN`` seconds."""
    until = time.monotonic() + DRAIN
    while sel.get_map() and (left := until - time.monotonic()) > 0:
        _read(sel, sel.select(left), tails)


def _exit_fd(proc: Any) -> tuple[int, Any]:
    """A descriptor readable once ``proc`` exits, and what closes it (after ``wait``, or
    on the way out of an exception)."""
    if hasattr(proc, "exit_fd"):  # the fork server's supervisor: its status socket
        return proc.exit_fd(), proc.close  # (closed by its ``wait`` too: closed twice)
    with contextlib.suppress(AttributeError, OSError):  # no pidfd_open: not Linux 5.3+
        fd = os.pidfd_open(proc.pid)
        return fd, lambda: os.close(fd)
    r, w = os.pipe()

    def waiter() -> None:
        with contextlib.suppress(Exception):
            proc.wait()
        os.close(w)

    thread = threading.Thread(target=waiter, daemon=True, name="revtree-wait")
    thread.start()

    def close() -> None:
        thread.join(DRAIN)  # the process is dead, or killed on the way out of ``watch``
        os.close(r)

    return r, close


def _terminate(pid: int) -> None:
    """Ask the supervisor to kill its tree and end."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
