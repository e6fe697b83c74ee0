"""The sandbox contract, run against every backend (``local``; ``docker``, marked).

Every test takes the ``sandbox`` fixture (tests/sandboxes/conftest.py), so a backend
joins the suite by adding a parameter there.
"""

from __future__ import annotations

import concurrent.futures
import io
import tarfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from revtree.errors import Cancelled, SandboxError
from revtree.sandboxes import ExecRequest, ExecResult, Limits, Sandbox
from revtree.sandboxes.base import METRICS_FD, METRICS_FILE, OUTPUT_FILE_CAP
from tests.sandboxes.conftest import leftovers

BOUND = 30.0  # seconds any single execution may take before the test gives up on it


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
    outputs: tuple[str, ...] = (),
    **limits: object,
) -> ExecResult:
    """Run one request, waiting at most BOUND seconds for it to come back."""
    limit = Limits(timeout=timeout, **limits)
    request = ExecRequest(archive, command, limit, dict(env or {}), outputs=outputs)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(sandbox.execute, request, cancel).result(timeout=BOUND)


@pytest.mark.parametrize("code", [0, 1, 77])
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


def test_python_runs_in_the_workspace(sandbox, tar_of):
    archive = tar_of({"ev.py": "import json; print(json.dumps({'score': 2 + 1}))\n"})
    result = execute(sandbox, archive, "python ev.py")
    assert (result.exit_code, result.stdout) == (0, '{"score": 3}\n')


def test_timeout_kills_a_hanging_command(sandbox, workspace, tmp_path):
    result = execute(sandbox, workspace, "echo started; sleep 30", timeout=1.0)
    assert result.timed_out
    assert result.exit_code != 0
    assert result.stdout == "started\n"
    assert leftovers(sandbox, tmp_path) == []


def test_sigterm_ignoring_children_die_on_timeout(sandbox, workspace, tmp_path):
    stubborn = (
        'python -c "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); '
        "print('up', flush=True); time.sleep(60)\" & wait"
    )
    result = execute(sandbox, workspace, stubborn, timeout=1.5)
    assert result.timed_out and result.stdout == "up\n"
    assert leftovers(sandbox, tmp_path) == []


def test_output_cap_keeps_the_tail(sandbox, workspace):
    command = "python -c \"print('x' * 100000); print('THE-END')\"; echo small-err >&2"
    result = execute(sandbox, workspace, command, output_cap=1000)
    assert result.exit_code == 0
    assert result.truncated
    assert len(result.stdout) <= 1000
    assert result.stdout.endswith("xxx\nTHE-END\n")
    assert result.stderr == "small-err\n"


def test_metrics_written_to_fd_3_are_returned(sandbox, workspace, tar_of):
    result = execute(sandbox, workspace, f"""echo '{{"score": 2.5}}' >&{METRICS_FD}""")
    assert result.exit_code == 0
    assert result.metrics_text is not None and result.metrics_text.strip() == '{"score": 2.5}'
    assert execute(sandbox, workspace, "true").metrics_text is None
    code = """import os; os.write(3, b'{"score": 7}')\n"""
    result = execute(sandbox, tar_of({"ev.py": code}), "python ev.py")
    assert (result.exit_code, result.metrics_text) == (0, '{"score": 7}'), result.stderr


def test_no_metrics_path_is_in_the_environment(sandbox, workspace):
    result = execute(sandbox, workspace, "env")
    assert result.exit_code == 0
    variables = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert not [name for name in variables if "METRICS" in name.upper()]
    assert not [v for v in variables.values() if "metrics.json" in v or METRICS_FILE in v]


FORGER = """\
import subprocess, sys
child = "import os; os.write(3, b'999')"
print("child exit", subprocess.run([sys.executable, "-c", child]).returncode, flush=True)
"""


def test_a_child_of_a_shell_less_subprocess_cannot_write_fd_3(sandbox, tar_of):
    result = execute(sandbox, tar_of({"ev.py": FORGER}), "python ev.py")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "child exit 1\n"
    assert "Bad file descriptor" in result.stderr
    assert result.metrics_text is None


MAKE_OUTPUTS = (
    "mkdir -p res/sub deep/a/b && echo 1 > res/a.json && echo 2 > res/b.json && "
    "echo no > res/c.txt && echo 3 > res/sub/d.json && echo top > top.json && "
    "echo deep > deep/a/b/x.txt && echo {} >&3"
)


def test_outputs_globs_copy_matching_regular_files(sandbox, workspace):
    globs = ("res/*.json", "top.json", "**/x.txt", "./top.json", "missing-*.bin")
    result = execute(sandbox, workspace, MAKE_OUTPUTS, outputs=globs)
    assert result.exit_code == 0, result.stderr
    assert dict(result.files) == {
        "res/a.json": b"1\n",
        "res/b.json": b"2\n",
        "top.json": b"top\n",
        "deep/a/b/x.txt": b"deep\n",
    }
    assert dict(result.refused) == {}
    assert execute(sandbox, workspace, "true").files == {}


def test_links_fifos_and_oversize_outputs_are_refused_with_reasons(sandbox, workspace):
    big = OUTPUT_FILE_CAP + 1
    command = (
        "echo ok > fine.out && ln -s /etc/passwd abs.out && ln -s fine.out rel.out && "
        f"mkfifo fifo.out && truncate -s {big} big.out && mkdir dir.out"
    )
    result = execute(sandbox, workspace, command, outputs=("*.out",))
    assert result.exit_code == 0, result.stderr
    assert dict(result.files) == {"fine.out": b"ok\n"}
    refused = dict(result.refused)
    assert set(refused) == {"abs.out", "rel.out", "fifo.out", "big.out"}, refused
    assert "link" in refused["abs.out"] and "link" in refused["rel.out"]
    assert "fifo" in refused["fifo.out"].lower()
    assert str(big) in refused["big.out"] and "cap" in refused["big.out"]


def test_outputs_cannot_reach_out_of_the_workspace(sandbox, workspace, tmp_path):
    (tmp_path / "host.txt").write_text("host secret\n")
    globs = ("../*", "../out/metrics.json", "sub/../../x", str(tmp_path / "host.txt"))
    result = execute(sandbox, workspace, "echo '{}' >&3; mkdir sub; echo x > x", outputs=globs)
    assert result.exit_code == 0, result.stderr
    assert dict(result.files) == {}
    assert set(result.refused) == set(globs)


SECRETS = {
    "OPENAI_API_KEY": "sk-host-openai-9f2",
    "ANTHROPIC_API_KEY": "sk-host-anthropic-77",
    "GITHUB_TOKEN": "ghp-host-token-31",
    "REVTREE_DB": "postgresql://u:pw-host-db@h/revtree",
    "DATABASE_URL": "postgresql://u:pw-host-url@h/x",
    "AWS_SECRET_ACCESS_KEY": "aws-host-secret-5",
}


def test_environment_is_an_allow_list(sandbox, workspace, monkeypatch):
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
    assert "REVTREE_METRICS" not in names  # the metrics channel is descriptor 3


def test_files_in_and_workspace_removed_afterwards(sandbox, workspace, tmp_path):
    result = execute(sandbox, workspace, "pwd; touch made-here.txt; ls")
    lines = result.stdout.splitlines()
    assert {"hello.txt", "made-here.txt", "bin"} <= set(lines[1:])
    assert leftovers(sandbox, tmp_path) == []
    assert not Path(lines[0]).exists() or sandbox.name != "local"


def test_concurrent_executions_get_separate_workspaces(sandbox, workspace):
    def one(i: int) -> ExecResult:
        return execute(
            sandbox, workspace, f"touch mine-{i}; sleep 0.2; ls; echo $(pwd)@$(hostname)"
        )

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


def test_cancel_raises_and_cleans_up(sandbox, workspace, tmp_path):
    cancel = threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    try:
        with pytest.raises(Cancelled):
            execute(sandbox, workspace, "sleep 30 & wait", timeout=30, cancel=cancel)
    finally:
        timer.cancel()
    assert leftovers(sandbox, tmp_path) == []


def test_cancel_set_before_start_runs_nothing(sandbox, workspace, tmp_path):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        execute(sandbox, workspace, f"sleep 5; touch {tmp_path / 'ran'}", cancel=cancel)
    assert not (tmp_path / "ran").exists()
    assert leftovers(sandbox, tmp_path) == []


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
    assert leftovers(sandbox, tmp_path) == []  # (and the workspace's removal done)
    assert [p for p in tmp_path.rglob("*escape*")] == []


def test_absolute_member_lands_inside_the_workspace(sandbox, tmp_path):
    target = tmp_path / "outside" / "absolute.txt"
    archive = _tar_with(_member(str(target)))
    result = execute(sandbox, archive, f"cat .{target}")
    assert result.stdout == "escaped\n"
    assert not target.exists()


def test_archive_that_is_not_a_tar_is_a_sandbox_error(sandbox):
    with pytest.raises(SandboxError, match="unpack"):
        execute(sandbox, b"this is not a tar archive at all" * 40, "true")
