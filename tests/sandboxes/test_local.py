"""The sandbox contract, run against the local subprocess backend.

Every test takes the ``sandbox`` fixture, so another backend joins the suite by adding
a parameter to it.
"""

from __future__ import annotations

import concurrent.futures
import io
import os
import signal
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from revtree.errors import Cancelled, SandboxError
from revtree.sandboxes import ExecRequest, ExecResult, Limits, Sandbox, make_sandbox
from revtree.sandboxes.local import LocalSandbox

BOUND = 20.0  # seconds any single execution may take before the test gives up on it


@pytest.fixture(params=["local"])
def sandbox(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sandbox]:
    box = make_sandbox(request.param, base_dir=tmp_path / "sandboxes")
    yield box
    box.close()


@pytest.fixture
def workspace(tar_of: Callable[..., bytes]) -> bytes:
    return tar_of(
        {"hello.txt": "hello from the archive\n", "bin/run.sh": "#!/bin/sh\necho ran\n"},
        {"bin/run.sh": 0o755},
    )


def execute(
    sandbox: Sandbox,
    archive: bytes,
    command: str,
    timeout: float = 10.0,
    env: Mapping[str, str] | None = None,
    cancel: threading.Event | None = None,
    **limits: object,
) -> ExecResult:
    """Run one request, waiting at most BOUND seconds for it to come back."""
    request = ExecRequest(archive, command, Limits(timeout=timeout, **limits), dict(env or {}))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(sandbox.execute, request, cancel).result(timeout=BOUND)


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


def test_make_sandbox_by_name_and_dotted_path(tmp_path):
    assert isinstance(make_sandbox("local"), LocalSandbox)
    assert isinstance(make_sandbox("auto"), LocalSandbox)
    assert isinstance(make_sandbox("revtree.sandboxes.local.LocalSandbox"), LocalSandbox)
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        make_sandbox("vm")


@pytest.mark.parametrize("code", [0, 1, 3, 77])
def test_exit_code_propagates(sandbox, workspace, code):
    result = execute(sandbox, workspace, f"exit {code}")
    assert result.exit_code == code
    assert not result.timed_out


def test_stdout_and_stderr_are_captured_separately(sandbox, workspace):
    result = execute(sandbox, workspace, "cat hello.txt; echo to-err >&2; ./bin/run.sh")
    assert result.exit_code == 0
    assert result.stdout == "hello from the archive\nran\n"
    assert result.stderr == "to-err\n"
    assert not result.truncated
    assert result.duration >= 0 and result.setup_seconds >= 0


def test_timeout_kills_a_hanging_command(sandbox, workspace):
    result = execute(sandbox, workspace, "echo started; sleep 30", timeout=0.5)
    assert result.timed_out
    assert result.exit_code != 0
    assert result.stdout == "started\n"


def test_background_child_dies_when_the_command_exits(sandbox, workspace):
    result = execute(sandbox, workspace, "sleep 300 & echo $!")
    assert result.exit_code == 0 and not result.timed_out
    pid = int(result.stdout.strip())
    assert wait_dead(pid), f"background child {pid} outlived its sandbox"


def test_child_ignoring_sigterm_is_killed_on_timeout(sandbox, workspace):
    stubborn = (
        'python -c "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); '
        'print(os.getpid(), flush=True); time.sleep(60)" & wait'
    )
    result = execute(sandbox, workspace, stubborn, timeout=1.0)
    assert result.timed_out
    pid = int(result.stdout.strip())
    assert wait_dead(pid), f"SIGTERM-ignoring child {pid} survived the timeout"


def test_output_cap_keeps_the_tail(sandbox, workspace):
    command = "python -c \"print('x' * 100000); print('THE-END')\"; echo small-err >&2"
    result = execute(sandbox, workspace, command, output_cap=1000)
    assert result.exit_code == 0
    assert result.truncated
    assert len(result.stdout) <= 1000
    assert result.stdout.endswith("xxx\nTHE-END\n")
    assert result.stderr == "small-err\n"


def test_metrics_file_is_returned(sandbox, workspace):
    result = execute(sandbox, workspace, """echo '{"score": 2.5}' > "$REVTREE_METRICS" """)
    assert result.exit_code == 0
    assert result.metrics_text is not None and result.metrics_text.strip() == '{"score": 2.5}'
    assert execute(sandbox, workspace, "true").metrics_text is None


SECRETS = {
    "OPENAI_API_KEY": "sk-host-openai-9f2",
    "ANTHROPIC_API_KEY": "sk-host-anthropic-77",
    "GITHUB_TOKEN": "ghp-host-token-31",
    "REVTREE_DB": "postgresql://u:pw-host-db@h/revtree",
    "DATABASE_URL": "postgresql://u:pw-host-url@h/x",
    "AWS_SECRET_ACCESS_KEY": "aws-host-secret-5",
}


def test_secrets_never_enter_the_environment(sandbox, workspace, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOST_ONLY_HARMLESS", "not-passed")
    requested_secrets = {
        "OPENAI_API_KEY": "sk-requested-1",
        "GITHUB_TOKEN": "ghp-requested-2",
        "DATABASE_URL": "sqlite:///requested.db",
    }
    result = execute(sandbox, workspace, "env", env={**requested_secrets, "HARMLESS_FLAG": "on"})
    assert result.exit_code == 0
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines() if "=" in line}
    assert names.isdisjoint(SECRETS), sorted(names & SECRETS.keys())
    for value in [*SECRETS.values(), *requested_secrets.values()]:
        assert value not in result.stdout
    assert "HARMLESS_FLAG=on" in result.stdout.splitlines()
    assert "HOST_ONLY_HARMLESS" not in names  # host variables pass only by allow-list
    assert "REVTREE_METRICS" in names


def test_workspace_is_removed_afterwards(sandbox, workspace):
    result = execute(sandbox, workspace, "pwd; touch made-here.txt; ls")
    lines = result.stdout.splitlines()
    where = Path(lines[0])
    assert {"hello.txt", "made-here.txt", "bin"} <= set(lines[1:])
    assert not where.exists()


def test_concurrent_executions_get_separate_workspaces(sandbox, workspace):
    def one(i: int) -> ExecResult:
        return execute(sandbox, workspace, f"touch mine-{i}; sleep 0.2; ls; pwd")

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(4)))
    for i, result in enumerate(results):
        mine = {ln for ln in result.stdout.splitlines() if ln.startswith("mine-")}
        assert mine == {f"mine-{i}"}
    assert len({r.stdout.splitlines()[-1] for r in results}) == 4


def test_memory_limit_stops_a_big_allocation(sandbox, workspace):
    small = "python -c \"b = bytearray(32 * 2**20); print('ok')\""
    assert execute(sandbox, workspace, small, memory_bytes=512 * 2**20).stdout == "ok\n"
    big = "python -c \"b = bytearray(2 * 2**30); print('allocated')\""
    result = execute(sandbox, workspace, big, memory_bytes=512 * 2**20)
    assert result.exit_code != 0
    assert "allocated" not in result.stdout
    assert "MemoryError" in result.stderr


def test_cancel_raises_and_kills_the_process(sandbox, workspace, tmp_path):
    pid_file = tmp_path / "pid"
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    try:
        with pytest.raises(Cancelled):
            execute(
                sandbox,
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


def test_cancel_set_before_start_runs_nothing_to_completion(sandbox, workspace, tmp_path):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        execute(sandbox, workspace, f"sleep 5; touch {tmp_path / 'ran'}", cancel=cancel)
    assert not (tmp_path / "ran").exists()


def _tar_with(member: tarfile.TarInfo, data: bytes = b"escaped\n") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        ok = tarfile.TarInfo("fine.txt")
        ok.size = 3
        tar.addfile(ok, io.BytesIO(b"ok\n"))
        if member.isreg():
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
        else:
            tar.addfile(member)
    return buf.getvalue()


def _member(name: str, link: str | None = None) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    if link is not None:
        info.type, info.linkname = tarfile.SYMTYPE, link
    return info


@pytest.mark.parametrize(
    "make_member",
    [
        lambda root: _member("../escape.txt"),
        lambda root: _member("../../../escape.txt"),
        lambda root: _member("escape-link", link=str(root)),
        lambda root: _member("escape-rel-link", link="../../../"),
    ],
    ids=["parent", "grandparent", "absolute-symlink", "relative-symlink"],
)
def test_archive_escaping_the_workspace_is_refused(sandbox, tmp_path, make_member):
    archive = _tar_with(make_member(tmp_path))
    marker = tmp_path / "ran"
    with pytest.raises(SandboxError, match="unpack"):
        execute(sandbox, archive, f"touch {marker}")
    assert not marker.exists()
    assert [p for p in tmp_path.rglob("*escape*")] == []
    leftovers = list((tmp_path / "sandboxes").iterdir())
    assert leftovers == []


def test_absolute_member_lands_inside_the_workspace(sandbox, tmp_path):
    target = tmp_path / "outside" / "absolute.txt"
    archive = _tar_with(_member(str(target)))
    result = execute(sandbox, archive, f"cat .{target}")
    assert result.stdout == "escaped\n"
    assert not target.exists()


def test_archive_that_is_not_a_tar_is_a_sandbox_error(sandbox):
    with pytest.raises(SandboxError, match="unpack"):
        execute(sandbox, b"this is not a tar archive at all" * 40, "true")


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
