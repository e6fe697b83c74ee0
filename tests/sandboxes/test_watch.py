"""The local backend watches its command from the calling thread (``sandboxes.watch``):
no thread per evaluation, with the fork server and without it, and, on a kernel with no
pidfds, one waiter thread; output tails, timeouts and cancels as before."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from revtree.sandboxes import watch as watching
from revtree.sandboxes.base import ExecRequest, Limits
from revtree.sandboxes.local import LocalSandbox
from tests.sandboxes.test_local import wait_dead

SCRIPT = """\
import sys, time
forked = b"zygote.py" in open("/proc/self/cmdline", "rb").read()
print('forked' if forked else 'cold', flush=True)
print('err', file=sys.stderr)
time.sleep(0.6)
"""


def pidfds() -> bool:
    """Whether this kernel gives pidfds (else the watch has one waiter thread)."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


def threads_during(run) -> set[str]:
    """The names of the threads that appear while ``run()`` runs (looked at every 10 ms
    from a thread of this test's own, which is left out)."""
    before = {t.ident for t in threading.enumerate()}
    seen: set[str] = set()
    done = threading.Event()

    def look() -> None:
        while not done.wait(0.01):
            seen.update(
                t.name for t in threading.enumerate() if t.ident not in before and t is not me
            )

    me = threading.Thread(target=look)
    me.start()
    try:
        run()
    finally:
        done.set()
        me.join()
    return seen


@pytest.mark.parametrize("forked", ["1", "0"])
@pytest.mark.skipif(not pidfds(), reason="no pidfds here: a command started cold has a waiter")
def test_an_evaluation_starts_no_thread_to_watch_its_command(forked, tmp_path, tar_of, monkeypatch):
    monkeypatch.setenv("REVTREE_FORK_SERVER", forked)
    local = LocalSandbox(tmp_path / "sandboxes")
    request = ExecRequest(tar_of({"slow.py": SCRIPT}), "python slow.py", Limits(timeout=30))
    try:
        local.execute(request)  # the fork server is up, the remover thread started
        results = []
        names = threads_during(lambda: results.append(local.execute(request)))
    finally:
        local.close()
    (result,) = results
    how = "forked" if forked == "1" else "cold"  # the fork server ran it, or it did not
    assert (result.exit_code, result.stdout, result.stderr) == (0, f"{how}\n", "err\n")
    assert result.duration >= 0.6
    # the workspace remover may run; nothing reads a pipe or waits on a process
    assert names <= {"revtree-trash"}, names


def popen(command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["sh", "-c", command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def watched(command: str, timeout: float, cancel: threading.Event | None = None):
    proc = popen(command)
    start = time.monotonic()
    try:
        return watching.watch(proc, 16, start, start + timeout, cancel, 1.0)
    finally:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_watch_keeps_the_tails_and_ends_at_the_exit(pidfd, monkeypatch):
    if not pidfd:  # a kernel older than 5.3, or not Linux: a waiter thread
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    seen = watched("seq 1 1000; echo bad >&2; exit 3", timeout=30)
    assert (seen.code, seen.why) == (3, None)
    out = "".join(f"{i}\n" for i in range(1, 1001))
    assert (seen.stdout.text(), seen.stdout.total) == (out[-16:], len(out))
    assert seen.stderr.text() == "bad\n"
    assert seen.duration < 10


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_deadline_and_a_cancel_stop_the_command(pidfd, monkeypatch):
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    t0 = time.monotonic()
    seen = watched("sleep 30", timeout=0.3)
    assert seen.why == "timeout" and seen.code != 0
    assert time.monotonic() - t0 < 5
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    timer.start()
    t0 = time.monotonic()
    try:
        seen = watched("trap '' TERM; sleep 30 & wait; sleep 30", timeout=60, cancel=cancel)
    finally:
        timer.cancel()
    assert seen.why == "cancel"
    assert 1.0 <= time.monotonic() - t0 < 5  # SIGTERM ignored: the group killed after grace


class Interrupt:
    """A cancel event whose look raises on its second call: an exception (an interrupt)
    inside the watch."""

    def __init__(self) -> None:
        self.looks = 0

    def is_set(self) -> bool:
        self.looks += 1
        if self.looks > 1:
            raise KeyboardInterrupt
        return False


@pytest.mark.parametrize("pidfd", [True, False])
def test_an_exception_inside_the_watch_kills_the_command(pidfd, monkeypatch, tmp_path):
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    pid_file = tmp_path / "pid"
    proc = popen(f"sleep 30 & echo $! > {pid_file}; wait")
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            watching.watch(proc, 16, start, start + 60, Interrupt(), 1.0)
    finally:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
    assert proc.wait(timeout=5) != 0
    sleeper = int(pid_file.read_text()) if pid_file.exists() else None
    if sleeper is not None:  # its group was killed with it
        assert wait_dead(sleeper), "the command's child outlived it"
    assert time.monotonic() - start < 10
