"""Issue 23, item 5: the attacks that took over the local backend, run on ``local``
(where each must still get through: the test reproduces it) and on ``bwrap`` (where
each must be held). ``pytest -v`` on this file is the before/after table.

Each attack is a candidate's ``attack.py``; what it achieved is checked on the host
where the host can see it (a file in the venv or the store, a process left running, a
connection received), else from what the candidate reports (bytes written, processes
that held their memory, the secret it read).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sysconfig
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from revtree.sandboxes import ExecRequest, ExecResult, Limits, Sandbox, make_sandbox
from revtree.sandboxes.base import archive_of

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ["local", pytest.param("bwrap", marks=pytest.mark.bwrap)]
MiB = 1 << 20


@pytest.fixture(params=BACKENDS)
def box(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sandbox]:
    if request.param == "bwrap":
        request.getfixturevalue("bwrap_usable")
        sandbox = make_sandbox("bwrap", base_dir=tmp_path / "sb", disk_bytes=128 * MiB)
    else:
        sandbox = make_sandbox("local", base_dir=tmp_path / "sb")
    yield sandbox
    sandbox.close()


def attack(box: Sandbox, code: str, memory: int | None = None, timeout: float = 60) -> ExecResult:
    archive = archive_of({"attack.py": code.encode()})
    limits = Limits(timeout=timeout, memory_bytes=memory)
    return box.execute(ExecRequest(archive, "python attack.py", limits))


def expect(box: Sandbox, got_through: bool, result: ExecResult) -> None:
    """Local: the attack reproduces. Namespace sandbox: it is held."""
    detail = f"stdout={result.stdout[-500:]!r} stderr={result.stderr[-500:]!r}"
    assert got_through == (box.name == "local"), detail


def test_pth_written_into_the_venv(box):
    site = Path(sysconfig.get_paths()["purelib"])
    planted = site / f"revtree_attack_{uuid.uuid4().hex}.pth"
    try:
        attack(box, f"open({str(planted)!r}, 'w').write('# planted\\n')")
        expect(box, planted.exists(), attack(box, "print('again')"))
    finally:
        planted.unlink(missing_ok=True)


DAEMON = """
import os, signal, subprocess
subprocess.Popen(["sh", "-c", "sleep 30; : {marker}"], start_new_session=True)
leader = os.getsid(0)  # the supervisor (started, or forked by the fork server) leads our session
cmdline = open(f"/proc/{{leader}}/cmdline", "rb").read()
if b"supervise.py" in cmdline or b"zygote.py" in cmdline:
    os.kill(leader, signal.SIGKILL)
"""


def _holding(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
    return found


@pytest.mark.slow  # 5 s of --quick under -n 2 (issue 24)
def test_setsid_daemon_after_killing_the_supervisor(box):
    marker = f"revtree-daemon-{uuid.uuid4().hex}"
    try:
        result = attack(box, DAEMON.format(marker=marker))
        time.sleep(0.5)  # the kernel tears a PID namespace down asynchronously
        expect(box, bool(_holding(marker)), result)
    finally:
        for pid in _holding(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A REVTREE_HOME outside the temp folders and the home folder (the checkout's
    .pytest_cache), with a revtree.db and a run's repo.git holding refs/revtree/holdout."""
    home = ROOT / ".pytest_cache" / f"revtree-attack-{uuid.uuid4().hex[:8]}"
    repo = home / "runs" / "r1" / "repo.git"
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    (repo / "refs" / "revtree").mkdir(parents=True)
    (repo / "refs" / "revtree" / "holdout").write_text("0" * 40 + "\n")
    with sqlite3.connect(home / "revtree.db") as db:
        db.execute("create table baseline (score real)")
        db.execute("insert into baseline values (1.0)")
    db.close()
    monkeypatch.setenv("REVTREE_HOME", str(home))
    try:
        yield home
    finally:
        subprocess.run(["rm", "-rf", str(home)], check=False)


WRITES = """
import os, sqlite3, sys
home, store, name = sys.argv[1:] if len(sys.argv) > 1 else ({args})
done = []
for how, act in [
    ("ssh", lambda: (os.makedirs(f"{{home}}/.ssh", exist_ok=True),
                     open(f"{{home}}/.ssh/{{name}}", "w").write("ssh-ed25519 AAAA attacker"))),
    ("db", lambda: sqlite3.connect(f"{{store}}/revtree.db").execute(
        "update baseline set score = 99").connection.commit()),
    ("ref", lambda: open(f"{{store}}/runs/r1/repo.git/refs/revtree/holdout", "w").write(
        "1" * 40 + chr(10))),
]:
    try:
        act()
        done.append(how)
    except Exception as e:
        print(how, "refused:", e)
print("done:", ",".join(done))
"""


def test_writes_to_ssh_the_store_and_the_runs_repository(box, store):
    home = Path.home()
    name = f"revtree-attack-{uuid.uuid4().hex}"
    had_ssh = (home / ".ssh").exists()
    try:
        result = attack(box, WRITES.format(args=repr((str(home), str(store), name))))
        with sqlite3.connect(store / "revtree.db") as db:
            (score,) = db.execute("select score from baseline").fetchone()
        db.close()
        ref = (store / "runs/r1/repo.git/refs/revtree/holdout").read_text()
        changed = [(home / ".ssh" / name).exists(), score != 1.0, ref != "0" * 40 + "\n"]
        assert len(set(changed)) == 1, (changed, result.stdout)  # all three, or none
        expect(box, changed[0], result)
    finally:
        (home / ".ssh" / name).unlink(missing_ok=True)
        if not had_ssh:
            with contextlib.suppress(OSError):
                (home / ".ssh").rmdir()


MEMORY = """
import subprocess, sys
child = "b = b'x' * (400 << 20); print('held', flush=True); import time; time.sleep(2)"
procs = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(4)]
print("exits", [p.wait() for p in procs])
"""


@pytest.mark.slow  # 1.6 GiB of children per backend, 3-6 s (issue 24)
def test_four_children_of_400_mib_under_a_600_mib_limit(box):
    if box.name == "bwrap":
        from revtree.sandboxes import cgroups

        if cgroups.available() is None:
            pytest.skip("no writable cgroup here: memory is capped per process only")
    result = attack(box, MEMORY, memory=600 * MiB)
    held = result.stdout.count("held")
    expect(box, held == 4, result)


DISK = """
import os
written, chunk = 0, b"x" * (1 << 20)
try:
    with open("big.bin", "wb") as f:
        while written < 1536 << 20:
            written += f.write(chunk)
            f.flush()
except OSError as e:
    print("stopped:", e)
os.remove("big.bin")
print("written", written >> 20)
"""


@pytest.mark.slow  # 6 s of --quick under -n 2 (issue 24)
def test_one_and_a_half_gib_written(box):
    result = attack(box, DISK)
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("written"))
    expect(box, int(line.split()[1]) >= 1536, result)


NETWORK = """
import socket, sys
port = int(sys.argv[1]) if len(sys.argv) > 1 else {port}
got = []
try:
    socket.create_connection(("127.0.0.1", port), timeout=5).sendall(b"pwned")
    got.append("tcp")
except OSError as e:
    print("tcp refused:", e)
servers = [ln.split()[1] for ln in open("/etc/resolv.conf") if ln.startswith("nameserver")]
for server in servers[:1]:
    try:
        s = socket.socket(socket.AF_INET6 if ":" in server else socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00", (server, 53))
        got.append("dns")
    except OSError as e:
        print("dns refused:", e)
for sock in ("/var/run/docker.sock", "/run/docker.sock"):
    if __import__("os").path.exists(sock):
        got.append("docker.sock")
print("got:", ",".join(got))
"""


def test_tcp_to_loopback_dns_and_the_docker_socket(box):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(1.0)
    received: list[bytes] = []

    def accept() -> None:
        for _ in range(30):  # bounded: at most 30 s
            with contextlib.suppress(TimeoutError):
                conn, _ = server.accept()
                conn.settimeout(5)
                received.append(conn.recv(16))
                conn.close()
                return
            if done.is_set():
                return

    done = threading.Event()
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        result = attack(box, NETWORK.format(port=server.getsockname()[1]))
    finally:
        done.set()
        thread.join(5)
        server.close()
    got = result.stdout.rsplit("got:", 1)[1].strip()
    if box.name == "local":
        assert received == [b"pwned"], result.stdout
    expect(box, bool(received) or got != "", result)


ENVIRON = """
import sys
pid = {pid}
try:
    print("read:", open(f"/proc/{{pid}}/environ", "rb").read().decode(errors="replace"))
except OSError as e:
    print("refused:", e)
"""


def test_reading_the_orchestrators_environ(box):
    # /proc/<pid>/environ shows the block a process started with: a process started
    # with the key, as the orchestrator is, stands for it
    secret = f"sk-orchestrator-{uuid.uuid4().hex}"
    env = {**os.environ, "OPENAI_API_KEY": secret}
    holder = subprocess.Popen(["sleep", "60"], env=env)
    try:
        result = attack(box, ENVIRON.format(pid=holder.pid))
    finally:
        holder.kill()
        holder.wait()
    expect(box, secret in result.stdout, result)


ENGINE = "/var/lib/docker"  # where a container engine mounts its containers' files

PEEK = """
import os
try:
    print("listed:", sorted(os.listdir({engine!r})))
except OSError as e:
    print("refused:", e)
"""


@pytest.mark.bwrap
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not Path(ENGINE).is_dir(), reason="root and Docker")
def test_a_container_engine_mounting_meanwhile_breaks_no_evaluation(bwrap_usable, tmp_path):
    # CI (stop 28): bwrap's recursive bind of / failed ("Unable to apply mount flags:
    # remount .../var/lib/docker/fuse-overlayfs/.../merged") when a test's container
    # started beside it. Here 64 tmpfs mounts come and go under the engine's folder
    # while 30 evaluations start: a recursive bind of / fails about 1 start in 11 so.
    box = make_sandbox("bwrap", base_dir=tmp_path / "sb")
    base = Path(ENGINE) / f"revtree-churn-{uuid.uuid4().hex[:8]}"
    base.mkdir()
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set() and i < 100_000:  # bounded
            (base / f"m{i % 64}").mkdir(exist_ok=True)
            subprocess.run(["mount", "-t", "tmpfs", "none", str(base / f"m{i % 64}")])
            gone = base / f"m{(i + 32) % 64}"
            subprocess.run(["umount", str(gone)], stderr=subprocess.DEVNULL)
            i += 1

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        results = [attack(box, PEEK.format(engine=ENGINE)) for _ in range(30)]
    finally:
        stop.set()
        thread.join(30)
        for mount in base.iterdir():
            subprocess.run(["umount", str(mount)], stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", str(base)])
        box.close()
    failed = [r.stderr[-300:] for r in results if r.exit_code != 0]
    assert failed == [], failed
    # and the engine's folder (other containers' filesystems) is not there to read
    assert all("refused:" in r.stdout for r in results), results[0].stdout
