"""What only the local backend does: host processes killed by pid, reaping its folders."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from revtree.errors import Cancelled
from revtree.sandboxes import make_sandbox, resolve_auto
from revtree.sandboxes.local import LocalSandbox
from tests.sandboxes.test_contract import BOUND, execute


@pytest.fixture
def local(tmp_path: Path) -> LocalSandbox:
    return LocalSandbox(tmp_path / "sandboxes")


@pytest.fixture
def workspace(tar_of) -> bytes:
    return tar_of({"hello.txt": "hello\n"})


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_dead(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return not alive(pid)


def test_make_sandbox_by_name_and_dotted_path(monkeypatch):
    assert isinstance(make_sandbox("local"), LocalSandbox)
    assert isinstance(make_sandbox("revtree.sandboxes.local.LocalSandbox"), LocalSandbox)
    assert isinstance(make_sandbox("local", config=object()), LocalSandbox)  # dropped
    monkeypatch.setenv("REVTREE_SANDBOX", "local")
    assert isinstance(make_sandbox("auto"), LocalSandbox)
    monkeypatch.delenv("REVTREE_SANDBOX")
    assert resolve_auto() in ("local", "docker")
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        make_sandbox("vm")


def test_background_child_dies_when_the_command_exits(local, workspace):
    result = execute(local, workspace, "sleep 300 & echo $!")
    assert result.exit_code == 0 and not result.timed_out
    pid = int(result.stdout.strip())
    assert wait_dead(pid), f"background child {pid} outlived its sandbox"


def test_child_ignoring_sigterm_is_killed_on_timeout(local, workspace):
    stubborn = (
        'python -c "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); '
        'print(os.getpid(), flush=True); time.sleep(60)" & wait'
    )
    result = execute(local, workspace, stubborn, timeout=1.0)
    assert result.timed_out
    pid = int(result.stdout.strip())
    assert wait_dead(pid), f"SIGTERM-ignoring child {pid} survived the timeout"


def test_cancel_kills_the_process(local, workspace, tmp_path):
    pid_file = tmp_path / "pid"
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    try:
        with pytest.raises(Cancelled):
            execute(
                local,
                workspace,
                'sleep 30 & echo $! > "$PID_FILE"; wait',
                timeout=30,
                env={"PID_FILE": str(pid_file)},
                cancel=cancel,
            )
    finally:
        timer.cancel()
    pid = int(pid_file.read_text())
    assert wait_dead(pid), f"process {pid} survived the cancel"


def test_reap_kills_and_removes_what_a_killed_session_left(tmp_path):
    base = tmp_path / "work"
    box = LocalSandbox(base)
    leftover = base / "revtree-left"
    (leftover / "ws").mkdir(parents=True)
    orphan = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        (leftover / "pgid").write_text(str(orphan.pid))
        (base / "revtree-nopgid").mkdir()
        (base / "unrelated").mkdir()
        assert box.reap() == 2
        assert orphan.wait(timeout=BOUND) == -signal.SIGKILL
        assert sorted(p.name for p in base.iterdir()) == ["unrelated"]
        assert LocalSandbox().reap() == 0  # no base_dir: nothing of its own to reap
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()
