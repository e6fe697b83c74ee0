"""The local sandbox: a subprocess in a throw-away folder, for machines with no Docker.

What is covered:
- a fresh workspace per execution, extracted from the request's tar (path traversal
  and links out of the folder are refused by tarfile's ``data`` filter);
- its own session and process group, killed whole (children included) on timeout,
  on cancel, and after the main process exits; on Linux the direct child also dies
  with the thread that started it (``PR_SET_PDEATHSIG``), so a killed orchestrator
  leaves no evaluator running;
- ``RLIMIT_AS`` and ``RLIMIT_CPU`` limits; stdout and stderr kept up to a byte cap
  (the tail is kept);
- an allow-listed environment: no API keys, tokens or database URLs;
- the workspace removed afterwards.

What is not covered: the code runs as the same user on the same file system and
network. It can read what that user can read. Use the docker backend for untrusted
code.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import io
import os
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

from revtree.errors import Cancelled, SandboxError
from revtree.sandboxes.base import ExecRequest, ExecResult, Limits, watchdog
from revtree.sandboxes.env import sandbox_env

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None) if sys.platform == "linux" else None


class LocalSandbox:
    """Runs each request in a new folder under ``base_dir`` (default: the temp dir)."""

    name = "local"

    def __init__(self, base_dir: str | Path | None = None) -> None:
        self.base_dir = Path(base_dir) if base_dir else None
        if self.base_dir:
            self.base_dir.mkdir(parents=True, exist_ok=True)

    def execute(self, request: ExecRequest, cancel: threading.Event | None = None) -> ExecResult:
        t0 = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix="revtree-", dir=self.base_dir))
        try:
            ws, out = tmp / "ws", tmp / "out"
            out.mkdir()
            _extract(request.archive, ws)
            env = sandbox_env(request.env, home=ws, tmp=out)
            env["REVTREE_METRICS"] = str(out / "metrics.json")
            setup = time.monotonic() - t0
            result = _run(request.command, ws, env, request.limits, cancel, tmp / "pgid")
            metrics = out / "metrics.json"
            text = metrics.read_text(errors="replace")[: 1 << 20] if metrics.is_file() else None
            return dataclasses.replace(result, metrics_text=text, setup_seconds=setup)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def close(self) -> None:
        """Nothing is held between executions."""

    def reap(self) -> int:
        """Kill the process groups and remove the workspaces that a killed orchestrator
        left in ``base_dir``. Call it only while no execution of this sandbox runs."""
        if self.base_dir is None or not self.base_dir.is_dir():
            return 0
        n = 0
        for tmp in self.base_dir.glob("revtree-*"):
            with contextlib.suppress(OSError, ValueError):
                _kill_group(int((tmp / "pgid").read_text()))
            shutil.rmtree(tmp, ignore_errors=True)
            n += 1
        return n


def _extract(archive: bytes, dest: Path) -> None:
    dest.mkdir()
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as e:
        raise SandboxError(f"cannot unpack the workspace: {e}") from e


# Resolved in the parent: the child of a threaded process must not import or load
# libraries (another thread may hold the import lock; RLIMIT_AS may forbid the mmap).
_prctl = ctypes.CDLL(None).prctl if sys.platform == "linux" else None


def _limit_child(limits: Limits) -> None:  # runs in the child, before exec
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if limits.memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    if limits.cpu_seconds:
        cpu = max(1, int(limits.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


class _Tail(threading.Thread):
    """Drains a pipe, keeping the last ``cap`` bytes."""

    def __init__(self, pipe: IO[bytes], cap: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.cap, self.buf, self.total = pipe, cap, bytearray(), 0

    def run(self) -> None:
        fd = self.pipe.fileno()
        while chunk := os.read(fd, 1 << 16):
            self.total += len(chunk)
            self.buf += chunk
            if len(self.buf) > 2 * self.cap:
                del self.buf[: len(self.buf) - self.cap]

    def text(self) -> str:
        return bytes(self.buf[-self.cap :]).decode("utf-8", errors="replace")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _run(
    command: str,
    cwd: Path,
    env: dict[str, str],
    limits: Limits,
    cancel: threading.Event | None,
    pgid_file: Path,
) -> ExecResult:
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=lambda: _limit_child(limits),
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise SandboxError(f"cannot start {command!r}: {e}") from e
    assert proc.stdout is not None and proc.stderr is not None
    pgid_file.write_text(str(proc.pid))
    readers = [_Tail(proc.stdout, limits.output_cap), _Tail(proc.stderr, limits.output_cap)]
    for r in readers:
        r.start()
    done, why = threading.Event(), list[str]()
    guard = threading.Thread(
        target=watchdog,
        args=(start + limits.timeout, done, cancel, lambda: _kill_group(proc.pid), why),
        daemon=True,
    )
    guard.start()
    code = proc.wait()
    duration = time.monotonic() - start
    done.set()
    _kill_group(proc.pid)
    for r in readers:
        r.join(timeout=2.0)
    proc.stdout.close()
    proc.stderr.close()
    guard.join()
    if why == ["cancel"]:
        raise Cancelled("the evaluation was cancelled")
    return ExecResult(
        exit_code=code,
        stdout=readers[0].text(),
        stderr=readers[1].text(),
        duration=duration,
        timed_out=why == ["timeout"],
        truncated=any(r.total > limits.output_cap for r in readers),
    )
