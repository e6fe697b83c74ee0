"""The local sandbox's side of its fork server (``zygote.py``).

``ForkServer.spawn`` hands one command to the warm server, which forks its supervisor;
it returns a handle shaped like ``subprocess.Popen`` (``pid``, ``stdout``, ``stderr``,
``wait()``, and ``exit_fd``), so the local sandbox runs, times out, cancels and reaps it
as it does a command it started itself (``local._run``, ``watch.watch``). ``None`` means
the server could not take the command (it died, was stopped, or never started): the
sandbox then starts the supervisor itself, and the next command gets a new server.

The command runs as a Python script in the forked process itself (``script``) only
where the command is ``python FILE.py [ARG ...]`` in plain words, ``python`` on the
request's ``PATH`` is the server's own interpreter (the same file in the same folder:
the same venv), and the variables read at Python's start (``PYTHON*``, ``LD_*``, the
locale) are those the server started with; else it runs under ``/bin/sh -c`` as ever.

``REVTREE_FORK_SERVER=0`` turns it off (each command then starts its own supervisor).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from revtree.sandboxes.supervise import PARENT_ENV

ZYGOTE = str(Path(__file__).with_name("zygote.py"))
PLAIN = re.compile(r"(python3?) ([\w./+-]+\.py)((?: [\w./=+,:@%-]+)*)")
START_KEYS = ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING")
ANSWER_WAIT = 10.0  # seconds a server may take to fork a supervisor before it is dropped


def enabled() -> bool:
    return os.environ.get("REVTREE_FORK_SERVER", "1") != "0"


def start_keys(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a Python reads as it starts."""
    return {k: v for k, v in env.items() if k.startswith(("PYTHON", "LD_")) or k in START_KEYS}


def script_of(command: str, env: Mapping[str, str], started: Mapping[str, str]) -> list[str] | None:
    """``[FILE.py, ARG ...]`` where the server may run ``command`` itself, else None."""
    m = PLAIN.fullmatch(command)
    if m is None or start_keys(env) != dict(started):
        return None
    found = shutil.which(m.group(1), path=env.get("PATH", ""))
    me = sys.executable
    try:
        same = found is not None and os.path.samefile(found, me)
    except OSError:
        return None
    if not same or os.path.dirname(os.path.abspath(found or "")) != os.path.dirname(me):
        return None
    return [m.group(2), *m.group(3).split()]


class Forked:
    """A supervisor the fork server started, seen as a ``Popen``."""

    def __init__(
        self,
        pid: int,
        stdout: IO[bytes],
        stderr: IO[bytes],
        status: socket.socket,
        lines: IO[bytes],
    ) -> None:
        self.pid, self.stdout, self.stderr = pid, stdout, stderr
        self._status, self._lines = status, lines

    def exit_fd(self) -> int:
        """A descriptor readable once the command's tree is dead (its status socket: the
        supervisor's last line, or the end where it was killed)."""
        return self._status.fileno()

    def close(self) -> None:
        """Close the status socket (``wait`` does, once it has read the status)."""
        self._lines.close()
        self._status.close()

    def wait(self) -> int:
        """The command's exit code, or minus the signal that killed it (``SIGKILL``
        where the supervisor was killed before it could tell). Read from its status
        line, not at its exit: the supervisor says it once its command's tree is dead."""
        line = b""
        with contextlib.suppress(OSError):
            while (line := self._lines.readline()) and not line.startswith(b"S"):
                pass
        self.close()
        if not line.startswith(b"S"):
            return -signal.SIGKILL
        return os.waitstatus_to_exitcode(int(line[1:]))


class _Server:
    """The running server's parts (apart, so that a dropped sandbox's finalizer can stop
    it without keeping the ``ForkServer`` alive)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.control: socket.socket | None = None
        self.started: dict[str, str] = {}
        self.home: str | None = None

    def start(self, env: Mapping[str, str]) -> socket.socket:
        if self.control is not None and self.proc is not None and self.proc.poll() is None:
            return self.control
        self.stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.home = tempfile.mkdtemp(prefix="rtzygote-")
        base = {**env, "HOME": self.home, "TMPDIR": self.home}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, ZYGOTE, str(theirs.fileno())],
                cwd=self.home,
                env=base,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(theirs.fileno(),),
            )
        finally:
            theirs.close()
        self.control, self.started = ours, start_keys(base)
        return ours

    def healthy(self) -> bool:
        """Running, and not stopped (a candidate may SIGSTOP it)."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True  # no /proc: trust that it runs
        return state not in (b"T", b"t", b"Z", b"X")

    def hang_up(self) -> None:
        """Close the control socket: a live server exits when it reads the end."""
        if self.control is not None:
            self.control.close()
            self.control = None

    def stop(self) -> None:
        self.hang_up()
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()
            self.proc = None
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None


class ForkServer:
    """One warm server per sandbox, started ahead (``start_soon``) or on first use;
    thread-safe."""

    def __init__(self, packages: tuple[str, ...] = ()) -> None:
        """``packages``: those beside numpy and scipy the server may load ahead."""
        self.packages = packages
        self._lock = threading.Lock()
        self._server = _Server()
        self._retired: list[_Server] = []  # servers that stopped answering, not yet killed
        weakref.finalize(self, self._server.stop)  # a sandbox dropped unclosed

    def spawn(
        self,
        cwd: Path,
        env: Mapping[str, str],
        fd: int,
        memory: int,
        cpu: int,
        command: str,
        imports: tuple[str, ...] = (),
        sources: tuple[tuple[str, str], ...] = (),
    ) -> Forked | None:
        """Start ``command`` under a supervisor forked by the server; None if it cannot.
        ``imports``: what the task's own evaluator files import as they load, which the
        server may load ahead for the later forks (``zygote_preload``); ``sources``: those
        files, (path in ``cwd``, SHA-256), which it compiles once (``zygote_compile``)."""
        env = {k: v for k, v in env.items() if k != PARENT_ENV}  # bound to the server instead
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        mine, theirs = socket.socketpair()
        server = self._server
        try:
            with self._lock:
                server = self._server
                control = server.start(env)
                header = {
                    "cwd": str(cwd),
                    "env": env,
                    "memory": memory,
                    "cpu": cpu,
                    "command": command,
                    "script": script_of(command, env, server.started),
                    "imports": list(imports),
                    "sources": [list(s) for s in sources],
                    "packages": list(self.packages),
                }
                socket.send_fds(
                    control, [json.dumps(header).encode()], [out_w, err_w, fd, theirs.fileno()]
                )
            theirs.close()
            os.close(out_w)
            os.close(err_w)
            out_w = err_w = -1
            mine.settimeout(ANSWER_WAIT)
            lines = mine.makefile("rb")
            pid = int(lines.readline().removeprefix(b"P"))
            mine.settimeout(None)
        except (OSError, ValueError):
            for f in (out_r, err_r, out_w, err_w):
                if f >= 0:
                    with contextlib.suppress(OSError):
                        os.close(f)
            theirs.close()
            mine.close()
            with self._lock:
                if server is self._server and not server.healthy():
                    self._retire()  # dead or stuck: the next command gets a new one
            return None
        return Forked(pid, os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"), mine, lines)

    def start_soon(self, env: Mapping[str, str]) -> None:
        """Start the server now with ``env`` (the environment its commands will carry)
        rather than at the first command: it boots while the caller goes on. Nothing is
        waited for; a server that fails is found and replaced by ``spawn`` as ever."""
        with self._lock, contextlib.suppress(OSError):
            self._server.start({k: v for k, v in env.items() if k != PARENT_ENV})

    def _retire(self) -> None:
        """Stop sending to the current server; it is killed only by ``close``, so that
        the evaluations it forked (bound to it by PDEATHSIG) finish meanwhile."""
        old, self._server = self._server, _Server()
        old.hang_up()
        self._retired.append(old)
        weakref.finalize(self, self._server.stop)

    def close(self) -> None:
        """Stop the servers (the supervisors they forked get SIGTERM and kill their trees)."""
        with self._lock:
            for server in [*self._retired, self._server]:
                server.stop()
            self._retired.clear()
