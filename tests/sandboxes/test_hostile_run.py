"""Whole orchestrated runs with hostile candidates, through the real CLI or orchestrator.

Docker (marked): the run goes on, each hostile node fails with its reason stored, the
others succeed, and no container or volume is left; a ``revtree run`` killed with
SIGKILL mid-evaluation is cleaned up by ``revtree sandbox gc``.

Local: a candidate that ``setsid``-double-forks a heartbeat daemon and writes into
``/dev/shm`` leaves neither behind, whether ``revtree run`` ends normally or is killed
with SIGKILL mid-evaluation. Real processes, real git, real SQLite; nothing mocked."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from revtree.agents import Proposal
from revtree.agents.base import Job, Refusal
from revtree.memory import NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, RunPaths, create_run
from revtree.sandboxes.docker import LABEL, OWNER
from revtree.tasks import load_task

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-revtree-test-secret-0123456789"
MODES = ("ok", "forkbomb", "membomb", "network", "secret", "sigterm", "ok")

EVALUATOR = """\
import json, os, signal, socket, sys, time
import sol
mode = sol.MODE
if mode == "forkbomb":
    n = 0
    try:
        while True:
            if os.fork() == 0:
                time.sleep(60); os._exit(0)
            n += 1
    except OSError:
        print("fork refused after", n, flush=True)
    time.sleep(60)
if mode == "membomb":  # the cgroup's limit is hit before any process's RLIMIT_AS
    for _ in range(2):
        if os.fork() == 0:
            hog = bytearray(b"x" * (50 * 2**20)); time.sleep(60)
    time.sleep(0.5)
    open("/proc/self/oom_score_adj", "w").write("1000")  # be the one the kernel kills
    chunks = []
    while True:
        chunks.append(bytearray(b"x" * 2**20))
if mode == "network":
    for host, port in (("1.1.1.1", 53), ("172.17.0.1", 2375), ("deb.debian.org", 80)):
        try:
            socket.create_connection((host, port), timeout=2)
            os.write(3, json.dumps({"f": -1e9}).encode())
            raise SystemExit(0)
        except OSError:
            pass
    raise SystemExit("no network: every connection refused")
if mode == "sigterm":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
seen = [k for k, v in os.environ.items() if "revtree-test-secret" in v or "HOSTILE" in k]
os.write(3, json.dumps({"f": (sol.X - 1.2) ** 2, "seen": seen, "mode": mode}).encode())
"""


def write_task(
    root: Path, name: str, sol: str, evaluator: str, sandbox: str, **vals: object
) -> Path:
    """A task minimising f over the knob X of sol.py, greedy with 2 evaluations at once;
    ``sandbox`` is the body of its [sandbox] section, ``vals`` its timeout and budget."""
    root.mkdir(parents=True)
    (root / "sol.py").write_text(sol)
    (root / "ev.py").write_text(evaluator)
    (root / "task.toml").write_text(
        textwrap.dedent(f"""\
        name = "{name}"
        editable = ["sol.py"]
        protected = ["ev.py"]
        [evaluate]
        command = "python ev.py"
        metric = "f"
        direction = "minimize"
        timeout = {vals["timeout"]}
        [sandbox]
        """)
        + sandbox
        + textwrap.dedent(f"""
        [search]
        policy = "greedy"
        parallel = 2
        seed = 3
        [budget]
        max_nodes = {vals["budget"]}
        [[knobs]]
        name = "X"
        type = "float"
        low = 0
        high = 4
        file = "sol.py"
        """)
    )
    return root


def hostile_task(root: Path, budget: int, timeout: float, memory: str) -> Path:
    sandbox = f'backend = "docker"\nmemory = "{memory}"\n'
    sol = "X = 3.0\nMODE = 'ok'\n"
    return write_task(root, "hostile", sol, EVALUATOR, sandbox, timeout=timeout, budget=budget)


class HostileCoder:
    """Writes the next hostile mode into each candidate (the proposal is ignored)."""

    def __init__(self) -> None:
        self.modes = itertools.cycle(MODES[1:])
        self.lock = threading.Lock()

    repairs = 0

    def code(
        self, job: Job, proposal: Proposal, refusal: Refusal | None = None
    ) -> dict[str, bytes | None]:
        with self.lock:
            mode = next(self.modes)
        return {"sol.py": f"X = 1.0\nMODE = {mode!r}\n".encode()}


def revtree_objects(client: Any, label: str) -> list[str]:
    """Containers and volumes carrying ``label`` (``key=value``)."""
    filters = {"label": [LABEL, label]}
    containers = [c["Id"][:12] for c in client.api.containers(all=True, filters=filters)]
    volumes = [v["Name"] for v in client.api.volumes(filters=filters).get("Volumes") or []]
    return containers + volumes


def mode_of(repo: Path, commit: str) -> str:
    text = subprocess.run(
        ["git", "-C", str(repo), "show", f"{commit}:sol.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return text.split("MODE = ")[1].strip().strip("'")


@pytest.mark.docker
@pytest.mark.slow  # 9 s of --quick under -n 2 (issue 24)
def test_hostile_candidates_fail_with_reasons_and_the_run_goes_on(
    docker_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOSTILE_TEST_SECRET_TOKEN", SECRET)
    home = tmp_path / "home"
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    task = hostile_task(tmp_path / "task", budget=len(MODES), timeout=4, memory="200m")
    run = create_run(store, load_task(task), home)
    orch = Orchestrator(store, run.id, home=home)
    orch.agents.coder = HostileCoder()  # type: ignore[assignment]
    started = time.monotonic()
    orch.drive()
    assert time.monotonic() - started < 120
    assert store.get_run(run.id).status is RunStatus.COMPLETED
    repo = RunPaths(home, run.id).repo
    nodes = {mode_of(repo, n.commit): n for n in store.nodes(run.id) if n.id > 0 and n.commit}
    assert set(nodes) == set(MODES), nodes
    for mode in ("forkbomb", "sigterm"):
        assert nodes[mode].status is NodeStatus.FAILED and nodes[mode].error_kind == "timeout"
    membomb = nodes["membomb"]
    assert membomb.status is NodeStatus.FAILED and membomb.error_kind == "crash"
    assert "exit code 137" in (membomb.error or "")
    assert "out of memory (limit 200 MiB)" in (membomb.error or "")
    assert nodes["network"].status is NodeStatus.FAILED
    assert "no network" in (nodes["network"].error or "")
    for mode in ("ok", "secret"):
        assert nodes[mode].status is NodeStatus.SUCCEEDED, nodes[mode].error
    evals = {e.node_id: e for e in store.evaluations(run.id)}
    assert evals[nodes["secret"].id].metrics["seen"] == []
    assert all(SECRET not in e.stdout_tail + e.stderr_tail for e in evals.values())
    assert "fork refused after" in evals[nodes["forkbomb"].id].stdout_tail
    store.close()
    assert revtree_objects(docker_client, f"revtree.run={run.id}") == []


@pytest.mark.docker
@pytest.mark.slow  # 12 s of --quick under -n 2 (issue 24)
def test_kill_9_of_revtree_run_then_gc_leaves_nothing(docker_client: Any, tmp_path: Path) -> None:
    task = hostile_task(tmp_path / "task", budget=4, timeout=60, memory="200m")
    (task / "ev.py").write_text("import time\ntime.sleep(60)\n")
    env = {**os.environ, "REVTREE_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "revtree", "run", str(task), "--quiet"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        owner = f"{OWNER}={socket.gethostname()}:{proc.pid}:{_start_time(proc.pid)}"
        _wait_for_an_evaluation(docker_client, owner, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert revtree_objects(docker_client, owner)  # orphaned by the kill
        gc = [sys.executable, "-m", "revtree", "sandbox", "gc"]
        out = subprocess.run(gc, cwd=ROOT, capture_output=True, text=True, check=True)
        assert out.stdout.startswith("removed ")
        assert revtree_objects(docker_client, owner) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def _start_time(pid: int) -> str:
    from revtree.sandboxes.docker import start_time

    return start_time(pid)


def _wait_for_an_evaluation(client: Any, owner: str, proc: subprocess.Popen[bytes]) -> None:
    """Until a container of ``owner`` runs a command (more processes than its idle main
    process: an exec, or a resident runner and its command), or fail."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "revtree run ended early"
        for c in client.api.containers(filters={"label": [LABEL, owner]}):
            with contextlib.suppress(Exception):  # it may have just ended
                if len(client.api.top(c["Id"])["Processes"]) > 1:
                    return
        time.sleep(0.2)
    raise AssertionError("no evaluation started within 60 s")


# ---------------------------------------------------------------- local backend

LOCAL_EVALUATOR = """\
import json, os, sys, time
import sol
TOKEN, BEAT = {token!r}, {beat!r}
DAEMON = (
    "import sys, time\\n"
    "for _ in range(600):\\n"
    "    open(sys.argv[2], 'a').write('beat\\\\n'); time.sleep(0.1)\\n"
)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", DAEMON, TOKEN, BEAT])
    os._exit(0)
os.wait()
open(f"/dev/shm/revtree-hostile-{{TOKEN}}-{{os.getpid()}}", "w").write("left behind")
time.sleep({sleep})
os.write(3, json.dumps({{"f": (sol.X - 1.2) ** 2}}).encode())
"""


def local_task(root: Path, token: str, beat: Path, sleep: float, budget: int) -> Path:
    evaluator = LOCAL_EVALUATOR.format(token=token, beat=str(beat), sleep=sleep)
    sandbox = 'backend = "local"\n'
    return write_task(
        root, "hostile-local", "X = 3.0\n", evaluator, sandbox, timeout=60, budget=budget
    )


def processes_with(token: str) -> list[int]:
    """Live processes whose command line carries ``token`` (zombies do not count)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError):
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if token.encode() in (entry / "cmdline").read_bytes() and state not in "ZX":
                found.append(int(entry.name))
    return found


def shm_files(token: str) -> list[str]:
    return [p.name for p in Path("/dev/shm").glob(f"revtree-hostile-{token}-*")]


def assert_nothing_left(token: str, beat: Path, shm: bool = True) -> None:
    """No daemon process (and, with ``shm``, no /dev/shm file) of ``token``; the
    heartbeat has stopped."""
    deadline = time.monotonic() + 5
    while processes_with(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(token) == [], f"setsid daemons survived: {processes_with(token)}"
    size = beat.stat().st_size
    time.sleep(0.5)
    assert beat.stat().st_size == size, "a heartbeat is still being written"
    if shm:
        assert shm_files(token) == [], f"/dev/shm files survived: {shm_files(token)}"


def _revtree_run(task: Path, home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "REVTREE_HOME": str(home)}
    argv = [sys.executable, "-m", "revtree", "run", str(task), "--quiet"]
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this host")
@pytest.mark.slow  # 9 s of --quick under -n 2 (issue 24)
def test_local_run_leaves_no_setsid_daemon_and_no_dev_shm_file(tmp_path: Path) -> None:
    token = f"revtree-hostile-daemon-{os.getpid()}-{time.monotonic_ns()}"
    beat = tmp_path / "heartbeat"
    task = local_task(tmp_path / "task", token, beat, sleep=0.3, budget=3)
    proc = _revtree_run(task, tmp_path / "home")
    try:
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "3 ok" in out, out  # every candidate was scored: the daemons did not block it
    assert beat.exists(), "the daemon never started: the test proves nothing"
    assert_nothing_left(token, beat)


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this host")
@pytest.mark.slow  # 7 s of --quick under -n 2 (issue 24)
def test_kill_9_of_a_local_revtree_run_leaves_no_setsid_daemon(tmp_path: Path) -> None:
    token = f"revtree-hostile-daemon-{os.getpid()}-{time.monotonic_ns()}"
    beat = tmp_path / "heartbeat"
    task = local_task(tmp_path / "task", token, beat, sleep=60, budget=4)
    proc = _revtree_run(task, tmp_path / "home")
    try:
        deadline = time.monotonic() + 120
        while not (beat.exists() and processes_with(token)):
            assert proc.poll() is None, "revtree run ended early"
            assert time.monotonic() < deadline, "no evaluation started within 120 s"
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        # the supervisors' PDEATHSIG, no gc needed; /dev/shm is swept by a live
        # orchestrator only (documented in local.py), so its files are not checked
        assert_nothing_left(token, beat, shm=False)
    finally:
        for name in shm_files(token):
            (Path("/dev/shm") / name).unlink(missing_ok=True)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
