"""What only the local backend does: host processes killed by pid (setsid daemons
included), reaping its folders, fd 3 and outputs details, /dev/shm, /proc protection."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from revtree.errors import Cancelled, SandboxError
from revtree.sandboxes import ExecRequest, ExecResult, Limits, make_sandbox, resolve_auto
from revtree.sandboxes.bwrap import usable
from revtree.sandboxes.local import LocalSandbox, ShmJanitor
from revtree.tasks.sandbox import AutoConfig
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
    # auto's keys, narrowed to the local backend's (Docker's do not apply there)
    assert isinstance(make_sandbox("local", config=AutoConfig(image="x")), LocalSandbox)
    with pytest.raises(TypeError, match=r"config is a object, not a \[sandbox\] model"):
        make_sandbox("local", config=object())
    monkeypatch.setenv("REVTREE_SANDBOX", "local")
    assert isinstance(make_sandbox("auto"), LocalSandbox)
    monkeypatch.delenv("REVTREE_SANDBOX")
    assert resolve_auto(knob_only=True) in ("local", "bwrap", "docker")
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        make_sandbox("vm")


def test_make_sandbox_refuses_an_argument_the_backend_does_not_take(monkeypatch):
    with pytest.raises(TypeError, match=r"backend 'local' .*does not take colour, pids\b"):
        make_sandbox("local", colour="red", pids=3)
    with pytest.raises(TypeError, match=r"LocalSandbox\) does not take colour; it takes base_dir"):
        make_sandbox("revtree.sandboxes.local.LocalSandbox", colour="red")
    # "auto" asks the engine at base_url; where none answers, code that is not the knob
    # proposer's is refused (never run unisolated), before base_url reaches a backend
    monkeypatch.delenv("REVTREE_SANDBOX", raising=False)
    monkeypatch.setenv("REVTREE_BWRAP", "/nonexistent/bwrap")  # and no bubblewrap
    with pytest.raises(SandboxError, match="no Docker engine answers at unix:///nonexistent"):
        make_sandbox("auto", base_url="unix:///nonexistent/docker.sock")
    monkeypatch.delenv("REVTREE_BWRAP")  # with it, base_url served the choice and is dropped
    if usable() is None:
        assert make_sandbox("auto", base_url="unix:///nonexistent/docker.sock").name == "bwrap"


def test_the_supervisors_parent_pid_is_not_passed_to_the_command(local, workspace):
    # the supervisor binds itself to the orchestrator (PDEATHSIG) from an environment
    # variable, and takes it out before the command starts
    result = execute(local, workspace, 'echo "[$REVTREE_SUPERVISOR_PARENT]"')
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "[]\n", result.stdout


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
    # a leftover evaluation: its group leader works in the workspace
    orphan = subprocess.Popen(["sleep", "300"], start_new_session=True, cwd=leftover / "ws")
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


# ------------------------------------------------------- fd 3, outputs, environment


def test_metrics_come_on_fd_3_from_a_nameless_file(local, tar_of):
    code = (
        "import os, json\n"
        "print(os.readlink('/proc/self/fd/3'))\n"
        "print(sorted(os.listdir(os.environ['TMPDIR'])), sorted(os.listdir('.')))\n"
        "os.write(3, json.dumps({'score': 4}).encode())\n"
    )
    result = execute(local, tar_of({"ev.py": code}), "python ev.py")
    assert result.exit_code == 0, result.stderr
    link, listing = result.stdout.splitlines()
    assert link.endswith("(deleted)")  # no path anyone could open
    assert listing == "[] ['ev.py']"
    assert result.metrics_text == '{"score": 4}'
    assert "REVTREE_METRICS" not in execute(local, tar_of({}), "env").stdout


def test_metrics_are_capped_at_1_mib(local, workspace):
    result = execute(local, workspace, "head -c 3000000 /dev/zero | tr '\\0' x >&3")
    assert result.exit_code == 0
    assert result.metrics_text == "x" * (1 << 20)


def test_outputs_never_go_through_a_linked_folder(local, workspace):
    command = "ln -s / root && ln -s /etc etc && mkdir real && echo hi > real/passwd"
    globs = ("root/etc/passwd", "etc/*", "**/passwd", "*")
    result = execute(local, workspace, command, outputs=globs)
    assert dict(result.files) == {"real/passwd": b"hi\n", "hello.txt": b"hello\n"}
    assert dict(result.refused) == {"etc": "a symbolic link", "root": "a symbolic link"}


def test_task_env_values_carrying_secrets_are_dropped(local, workspace, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret-123456")
    env = {
        "INNOCENT": "prefix-sk-host-secret-123456",
        "ENDPOINT": "postgresql://user:pw-hidden@db/x",
        "PLAIN_URL": "https://example.org/data",
        "FLAG": "on",
    }
    names = execute(local, workspace, "env", env=env).stdout
    assert "sk-host-secret" not in names and "pw-hidden" not in names
    assert "PLAIN_URL=https://example.org/data" in names and "FLAG=on" in names


# ------------------------------------------------------- processes that leave the group

DAEMON = """\
import os, sys, time
pid_file = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open(pid_file, "w").write(str(os.getpid()))
        time.sleep(300)
        os._exit(0)
    os._exit(0)
os.wait()
while not os.path.exists(pid_file) or not open(pid_file).read():
    time.sleep(0.01)
print("daemon up", flush=True)
"""


def test_setsid_double_forked_daemon_dies_with_the_command(local, tar_of, tmp_path):
    pid_file = tmp_path / "daemon.pid"
    result = execute(local, tar_of({"d.py": DAEMON}), f"python d.py {pid_file}")
    assert (result.exit_code, result.stdout) == (0, "daemon up\n"), result.stderr
    pid = int(pid_file.read_text())
    assert not alive(pid), f"setsid daemon {pid} outlived its evaluation"


@pytest.mark.slow  # two sandbox timeouts, 3 s (issue 24)
def test_setsid_daemon_dies_on_timeout_and_cancel(local, tar_of, tmp_path):
    archive = tar_of({"d.py": DAEMON})
    result = execute(local, archive, f"python d.py {tmp_path / 'a'}; sleep 30", timeout=1.5)
    assert result.timed_out and result.stdout == "daemon up\n"
    assert not alive(int((tmp_path / "a").read_text()))
    cancel = threading.Event()
    timer = threading.Timer(1.5, cancel.set)
    timer.start()
    with pytest.raises(Cancelled):
        execute(local, archive, f"python d.py {tmp_path / 'b'}; sleep 30", cancel=cancel)
    assert not alive(int((tmp_path / "b").read_text()))


def test_exit_status_is_the_commands(local, workspace):
    assert execute(local, workspace, "exit 3").exit_code == 3
    assert execute(local, workspace, "kill -TERM $$").exit_code == -signal.SIGTERM
    assert execute(local, workspace, "kill -SEGV $$").exit_code == -signal.SIGSEGV


KILLED_ORCHESTRATOR = """\
import sys
from revtree.sandboxes import ExecRequest, Limits
from revtree.sandboxes.local import LocalSandbox, ShmJanitor
archive, pid_file = open(sys.argv[1], "rb").read(), sys.argv[2]
command = f"python d.py {pid_file}; sleep 60"
LocalSandbox(sys.argv[3]).execute(ExecRequest(archive, command, Limits(timeout=60)))
"""


def test_a_killed_orchestrator_leaves_no_daemon(tar_of, tmp_path):
    (tmp_path / "ws.tar").write_bytes(tar_of({"d.py": DAEMON}))
    pid_file = tmp_path / "daemon.pid"
    argv = [sys.executable, "-c", KILLED_ORCHESTRATOR, str(tmp_path / "ws.tar"), str(pid_file)]
    orchestrator = subprocess.Popen([*argv, str(tmp_path / "box")])
    try:
        deadline = time.monotonic() + BOUND
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline and orchestrator.poll() is None
            time.sleep(0.05)
        pid = int(pid_file.read_text())
        assert alive(pid)
        orchestrator.kill()
        orchestrator.wait()
        assert wait_dead(pid), f"daemon {pid} outlived its killed orchestrator"
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()
            orchestrator.wait()


# ------------------------------------------------------- /dev/shm


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this host")
def test_files_written_to_dev_shm_are_removed(local, workspace):
    name = f"revtree-test-shm-{os.getpid()}-{time.monotonic_ns()}"
    command = f"echo x > /dev/shm/{name} && mkdir /dev/shm/{name}.d && touch /dev/shm/{name}.d/f"
    result = execute(local, workspace, command)
    assert result.exit_code == 0, result.stderr
    assert not Path(f"/dev/shm/{name}").exists() and not Path(f"/dev/shm/{name}.d").exists()


def test_shm_janitor_keeps_what_was_there_or_is_in_use(tmp_path):
    janitor = ShmJanitor(tmp_path)
    (tmp_path / "before").write_text("kept")
    with janitor.window():
        with janitor.window():  # a second evaluation in flight: nothing removed yet
            (tmp_path / "new").write_text("x")
        assert (tmp_path / "new").exists()
        (tmp_path / "held").write_text("open")
        holder = subprocess.Popen(["sleep", "30"], stdin=(tmp_path / "held").open())
        (tmp_path / "dir").mkdir()
        (tmp_path / "dir" / "f").write_text("x")
    try:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["before", "held"]
        assert janitor.removed == ["dir", "new"]
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------- /proc/<orchestrator>/environ

PROTECTED = """\
import os, sys
from revtree.sandboxes import ExecRequest, Limits
from revtree.sandboxes.local import LocalSandbox, protect_orchestrator
if sys.argv[1] == "protect":
    assert protect_orchestrator()
reader = '''
import os
pid, blob = os.getppid(), ""
while pid > 1:
    try:
        blob += open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
    except OSError as e:
        blob += type(e).__name__
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
print("LEAK" if "sk-orchestrator-secret" in blob else "clean")
'''
open(os.path.join(sys.argv[2], "r.py"), "w").write(reader)
import io, tarfile
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w") as tar:
    tar.add(os.path.join(sys.argv[2], "r.py"), "r.py")
box = LocalSandbox(sys.argv[2])
print(box.execute(ExecRequest(buf.getvalue(), "python r.py", Limits(timeout=20))).stdout.strip())
"""


def _as_nobody(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    """Run PROTECTED as uid 65534; CAP_DAC_READ_SEARCH only lets it reach the
    interpreter under /root (it grants no access to a non-dumpable process's /proc)."""
    caps = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *caps]
    env = {"PATH": os.environ["PATH"], "SK_TEST_API_KEY": "sk-orchestrator-secret-1"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    argv = [*nobody, sys.executable, "-c", PROTECTED, mode, str(tmp_path)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=BOUND)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root+setpriv")
def test_protect_orchestrator_hides_its_environ_from_a_non_root_sandbox(tmp_path):
    tmp_path.chmod(0o777)
    probe = _as_nobody(tmp_path, "plain")
    if probe.returncode != 0 and "setpriv" in probe.stderr:
        pytest.skip(f"setpriv cannot drop to uid 65534 here: {probe.stderr.strip()}")
    assert probe.stdout.strip() == "LEAK", probe.stderr  # the attack works unprotected
    protected = _as_nobody(tmp_path, "protect")
    assert protected.stdout.strip() == "clean", protected.stderr


def test_protect_orchestrator_as_root_is_no_protection():
    """Running as root, a sandbox reads any /proc/<pid>/environ: this is documented, and
    the function still reports whether the flag was set (here in a throw-away child)."""
    code = "from revtree.sandboxes.local import protect_orchestrator; print(protect_orchestrator())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == ("True" if sys.platform == "linux" else "False"), out.stderr


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this machine")
def test_the_shm_sweep_keeps_a_semaphore_another_process_still_uses() -> None:
    """glibc maps a POSIX semaphore under a temporary name, then links it to its real
    one: the sweep must know it is in use by its inode, not by its name (a local run
    once removed a process pool's semaphore from under it)."""
    import multiprocessing

    janitor = ShmJanitor(Path("/dev/shm"))
    with janitor.window():
        lock = multiprocessing.get_context("spawn").Lock()  # a named sem.mp-* file
        name = next(
            n
            for n in os.listdir("/dev/shm")
            if n.startswith("sem.mp-") and n not in {e for e, _ in janitor._before}
        )
    assert name not in janitor.removed and (Path("/dev/shm") / name).exists()
    del lock


def test_reap_never_kills_a_group_that_a_candidate_named_in_its_pgid_file(
    tmp_path: Path,
) -> None:
    """The pgid file sits beside a workspace the candidate can write (``../pgid``): reap
    kills a group only if its leader still works in that workspace."""
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        for planted in (str(victim.pid), "0", "1", str(os.getpgrp())):
            left = tmp_path / "base" / f"revtree-{planted}"
            (left / "ws").mkdir(parents=True)
            (left / "pgid").write_text(planted)
        assert LocalSandbox(tmp_path / "base").reap() == 4
        assert victim.poll() is None  # alive, and so are we
        assert not list((tmp_path / "base").glob("revtree-*"))
    finally:
        victim.kill()
        victim.wait()


def _tree(root: Path) -> dict[str, tuple[str, int, bytes, int]]:
    """Every entry under ``root``: kind, permission bits, content, a file's mtime."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        kind = "dir" if p.is_dir() else "file"
        out[p.relative_to(root).as_posix()] = (
            kind,
            st.st_mode & 0o7777,
            p.read_bytes() if kind == "file" else b"",
            int(st.st_mtime) if kind == "file" else 0,
        )
    return out


def test_a_plain_archive_unpacks_as_tarfiles_data_filter_unpacks_it(tmp_path: Path) -> None:
    """The direct writer (a workspace of files and folders, as the git store makes
    them) lands the same files, contents and modes as tarfile's ``data`` filter:
    setuid and group/other write bits dropped, owner read and write added, execute
    bits kept only with the owner's, the archive's times; gzip archives and an explicit
    folder member too."""
    import gzip
    import io
    import tarfile

    from revtree.memory.gitstore import EXEC_MODE, GitStore
    from revtree.sandboxes.workspace import extract

    git = GitStore(tmp_path / "r.git")
    sha = git.commit_files(
        {"a.py": b"A = 1\n", "run.sh": b"#!/bin/sh\n", "pkg/sub/m.py": b"x" * 300_000},
        "root",
        modes={"run.sh": EXEC_MODE},
    )
    made = git.archive(sha, {"support/r.py": b"print(1)\n"})
    git.close()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, mode in (("odd", 0o6777), ("noexec", 0o511), ("locked", 0o000)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = 2, mode, 1_000_000
            tar.addfile(info, io.BytesIO(b"hi"))
        folder = tarfile.TarInfo("emptydir")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
    for i, archive in enumerate((made, buf.getvalue(), gzip.compress(buf.getvalue()))):
        ours, theirs = tmp_path / f"ours{i}", tmp_path / f"theirs{i}"
        extract(archive, ours)
        theirs.mkdir()
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(theirs, filter="data")
        assert _tree(ours) == _tree(theirs) and len(_tree(ours)) >= 4


def test_an_archive_with_a_link_still_goes_through_the_data_filter(tmp_path: Path) -> None:
    import io
    import tarfile

    from revtree.sandboxes.workspace import extract

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("f.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"ok"))
        link = tarfile.TarInfo("inside")
        link.type, link.linkname = tarfile.SYMTYPE, "f.txt"
        tar.addfile(link)
        dot = tarfile.TarInfo("./g.txt")
        dot.size = 1
        tar.addfile(dot, io.BytesIO(b"g"))
    extract(buf.getvalue(), tmp_path / "ws")
    assert (tmp_path / "ws" / "inside").is_symlink()
    assert (tmp_path / "ws" / "g.txt").read_bytes() == b"g"
    with pytest.raises(SandboxError, match="unpack"):  # a file, then a folder of its name
        bad = io.BytesIO()
        with tarfile.open(fileobj=bad, mode="w") as tar:
            for name, kind in (("x", tarfile.REGTYPE), ("x/y", tarfile.REGTYPE)):
                info = tarfile.TarInfo(name)
                info.type, info.size = kind, 0
                tar.addfile(info, io.BytesIO(b""))
        extract(bad.getvalue(), tmp_path / "ws2")


def test_a_workspace_deeper_than_the_recursion_limit_is_removed_and_drain_returns(
    tmp_path: Path,
) -> None:
    """A candidate can leave folders 1,100 deep: ``shutil.rmtree`` recurses per level
    and raises RecursionError; the remover goes on (``rm -rf``), later workspaces are
    removed too and ``drain`` returns, as does ``close`` after a real execution."""
    from revtree.sandboxes.workspace import Trash

    deep = tmp_path / "deep"
    here = os.open(".", os.O_RDONLY)
    try:
        deep.mkdir()
        os.chdir(deep)
        for _ in range(1100):
            os.mkdir("a")
            os.chdir("a")
    finally:
        os.fchdir(here)
        os.close(here)
    after = tmp_path / "after"
    (after / "x").mkdir(parents=True)
    trash = Trash()
    trash.put(deep)
    trash.put(after)
    done = threading.Event()
    threading.Thread(target=lambda: (trash.drain(), done.set()), daemon=True).start()
    assert done.wait(BOUND), "drain hung: the remover died"
    assert not deep.exists() and not after.exists()


def test_the_remover_ends_when_idle_and_a_later_workspace_starts_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that makes many sandboxes keeps no idle remover threads: one ends after
    ``IDLE`` seconds with nothing to do, and the next workspace starts another."""
    from revtree.sandboxes import workspace

    monkeypatch.setattr(workspace, "IDLE", 0.05)
    trash = workspace.Trash()
    for name in ("one", "two"):
        (tmp_path / name / "x").mkdir(parents=True)
        trash.put(tmp_path / name)
        assert trash.running
        trash.drain()
        assert not (tmp_path / name).exists()
        deadline = time.monotonic() + BOUND
        while trash.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not trash.running, "the remover did not end when idle"


def _folders(root: Path) -> set[str]:
    return {p.name for p in root.glob("revtree-*")} if root.is_dir() else set()


def here(sandbox: LocalSandbox, archive: bytes, command: str) -> ExecResult:
    """One request executed in this thread (a staged workspace serves its own thread)."""
    return sandbox.execute(ExecRequest(archive, command, Limits(timeout=BOUND)))


def test_a_staged_workspace_is_the_one_its_execution_runs_in_and_started_sees_it_run(
    local: LocalSandbox, tar_of, tmp_path: Path
) -> None:
    mark = tmp_path / "mark"
    script = f"import pathlib, time\npathlib.Path({str(mark)!r}).write_text('up')\n"
    script += "time.sleep(0.3)\n"
    archive = tar_of({"run.py": script})
    seen: list[str] = []

    def started() -> None:  # the command's process runs as it is called: its mark comes
        deadline = time.monotonic() + BOUND  # (whole: write_text makes the file, then writes)
        while not (mark.exists() and mark.read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(mark.read_text() if mark.exists() else "no mark")

    with local.staged(archive, started) as staged:
        assert staged
        (folder,) = _folders(local.base_dir)  # unpacked before any execution
        assert (local.base_dir / folder / "ws" / "run.py").is_file()
        result = here(local, archive, "python run.py")
        assert result.exit_code == 0, result.stderr
    assert seen == ["up"]
    local.drain()
    assert _folders(local.base_dir) == set()  # removed after its execution, as any


def test_a_staged_workspace_serves_one_execution_of_that_archive_in_that_thread(
    local: LocalSandbox, tar_of
) -> None:
    archive = tar_of({"a.txt": "a\n"})
    calls: list[str] = []
    with local.staged(archive, lambda: calls.append("started")):
        # another thread, or a copy of the same bytes: each unpacks its own
        other = threading.Thread(target=execute, args=(local, archive, "cat a.txt"))
        other.start()
        other.join(BOUND)
        here(local, bytes(bytearray(archive)), "cat a.txt")
        assert calls == []
        assert here(local, archive, "cat a.txt").stdout == "a\n"
        assert here(local, archive, "cat a.txt").stdout == "a\n"  # unpacked its own
        assert calls == ["started"]
    local.drain()
    assert _folders(local.base_dir) == set()


def test_an_unused_staged_workspace_is_removed_and_a_bad_archive_is_not_staged(
    local: LocalSandbox, tar_of
) -> None:
    with local.staged(tar_of({"a.txt": "a\n"}), lambda: None) as staged:
        assert staged and len(_folders(local.base_dir)) == 1
    local.drain()
    assert _folders(local.base_dir) == set()
    with local.staged(b"not a tar", lambda: None) as staged:
        assert not staged
        with pytest.raises(SandboxError, match="cannot unpack"):
            here(local, b"not a tar", "true")
    local.drain()
    assert _folders(local.base_dir) == set()


def test_a_started_callback_that_raises_kills_the_command_it_was_told_of(
    local: LocalSandbox, tar_of, tmp_path: Path
) -> None:
    pid_file, late = tmp_path / "pid", tmp_path / "late"
    script = (
        "import os, pathlib, time\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n"
        f"time.sleep(1.0)\npathlib.Path({str(late)!r}).write_text('ran on')\n"
    )
    archive = tar_of({"run.py": script})

    def started() -> None:
        deadline = time.monotonic() + BOUND
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        raise RuntimeError("the store is gone")

    with local.staged(archive, started), pytest.raises(RuntimeError, match="store is gone"):
        here(local, archive, "python run.py")
    assert wait_dead(int(pid_file.read_text()))
    time.sleep(1.2)
    assert not late.exists()
