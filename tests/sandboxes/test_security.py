"""Hostile candidates against the Docker sandbox: each must be contained, with a reason.

Every case runs real code in a real container; nothing is mocked.
"""

from __future__ import annotations

import concurrent.futures
import socket
import threading
from pathlib import Path

import pytest

from revtree.sandboxes import ExecRequest, ExecResult, Limits
from revtree.sandboxes.base import OUTPUT_FILE_CAP
from revtree.sandboxes.docker import DockerSandbox
from revtree.tasks.sandbox import DockerConfig
from tests.sandboxes.conftest import leftovers

pytestmark = pytest.mark.docker


@pytest.fixture
def box(docker_client):
    sb = DockerSandbox(DockerConfig(disk="64m", outputs=("result.txt",)))
    yield sb
    sb.close()


def run(box, tar_of, code: str, timeout: float = 10.0, files=None, **limits) -> ExecResult:
    archive = tar_of({"evil.py": code, **(files or {})})
    limits.setdefault("memory_bytes", 512 * 2**20)
    return box.execute(ExecRequest(archive, "python evil.py", Limits(timeout=timeout, **limits)))


def test_network_host_tcp_and_dns_are_unreachable(box, tar_of):
    server = socket.socket()
    server.bind(("0.0.0.0", 0))
    server.listen()
    server.settimeout(0.1)
    port = server.getsockname()[1]
    code = f"""
import socket
for host in ("127.0.0.1", "172.17.0.1", "10.0.0.1"):
    try:
        socket.create_connection((host, {port}), timeout=2); print("CONNECTED", host)
    except OSError as e:
        print("blocked", host, type(e).__name__)
try:
    print("RESOLVED", socket.getaddrinfo("deb.debian.org", 80))
except OSError as e:
    print("dns blocked", type(e).__name__)
"""
    try:
        result = run(box, tar_of, code)
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()
    assert result.exit_code == 0, result.stderr
    assert "CONNECTED" not in result.stdout and "RESOLVED" not in result.stdout
    assert result.stdout.count("blocked") == 4


def test_host_files_are_invisible(box, tar_of, tmp_path):
    secrets = {
        "repo.git/HEAD": "ref: refs/heads/main",
        "revtree.db": "SQLite format 3",
        "home/.ssh/id_ed25519": "PRIVATE KEY",
    }
    for rel, text in secrets.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    paths = [str(tmp_path / rel) for rel in secrets] + [
        str(Path.home() / ".ssh"),
        "/root/.ssh",
        str(Path.cwd() / ".git" / "HEAD"),
        "/var/run/docker.sock",
    ]
    code = f"""
import os
for p in {paths!r}:
    print("READ" if os.path.exists(p) else "absent", p)
"""
    result = run(box, tar_of, code)
    assert result.exit_code == 0, result.stderr
    assert "READ" not in result.stdout, result.stdout


@pytest.mark.slow  # 3.4 s (issue 24)
def test_another_candidates_workspace_is_invisible(box, tar_of):
    writer = "import time; open('marker-of-a.txt', 'w').write('a'); time.sleep(3)"
    finder = (
        "import os, time\ntime.sleep(1)\n"
        "hits = [os.path.join(d, f) for d, _, fs in os.walk('/') for f in fs "
        "if f == 'marker-of-a.txt']\nprint('HITS', hits)\n"
    )
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        a = pool.submit(run, box, tar_of, writer)
        b = pool.submit(run, box, tar_of, finder)
        ra, rb = a.result(timeout=30), b.result(timeout=30)
    assert ra.exit_code == 0 and rb.exit_code == 0, rb.stderr
    assert "HITS []" in rb.stdout


def test_secrets_in_environment_and_proc_1_environ(box, tar_of, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret-42")
    monkeypatch.setenv("REVTREE_DB", "postgresql://u:pw-secret-7@h/db")
    code = """
import os, glob
blob = repr(dict(os.environ))
for p in glob.glob('/proc/*/environ'):
    try:
        blob += open(p, 'rb').read().decode(errors='replace')
    except OSError:
        pass
print('LEAK' if ('sk-very-secret' in blob or 'pw-secret' in blob) else 'clean')
"""
    result = run(box, tar_of, code)
    assert result.stdout.strip() == "clean", result.stdout + result.stderr


def test_writes_outside_the_workspace_fail(box, tar_of):
    code = """
for p in ('/etc/pwned', '/usr/local/bin/pwned', '/sandbox/pwned', '/pwned', '/root/pwned'):
    try:
        open(p, 'w').write('x'); print('WROTE', p)
    except OSError as e:
        print('refused', p, e.strerror)
open('/tmp/scratch', 'w').write('tmp is fine')
"""
    result = run(box, tar_of, code)
    assert result.exit_code == 0, result.stderr
    assert "WROTE" not in result.stdout
    assert "Read-only file system" in result.stdout
    after = run(box, tar_of, "import os; print(os.path.exists('/tmp/scratch'))")
    assert after.stdout == "False\n"


@pytest.mark.slow  # 5 s (issue 24)
def test_fork_bomb_is_contained(box, tar_of, tmp_path):
    code = """
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(60); os._exit(0)
        n += 1
except OSError as e:
    print('fork refused after', n, type(e).__name__, flush=True)
time.sleep(60)
"""
    result = run(box, tar_of, code, timeout=4)
    assert result.timed_out
    assert "fork refused after" in result.stdout
    assert int(result.stdout.split("after")[1].split()[0]) < 300
    assert leftovers(box, tmp_path) == []


def test_memory_bomb_is_killed(box, tar_of):
    code = """
import os
for _ in range(3):
    if os.fork() == 0:
        break
chunks = []
while True:
    chunks.append(bytearray(os.urandom(1)) * (16 * 2**20))
"""
    result = run(box, tar_of, code, timeout=20, memory_bytes=256 * 2**20)
    assert not result.timed_out
    assert result.exit_code != 0
    assert "MemoryError" in result.stderr or "out of memory" in result.stderr


def test_disk_filling_is_capped(box, tar_of):
    one_file = "f = open('big', 'wb')\nwhile True: f.write(b'x' * 2**20)\n"
    result = run(box, tar_of, one_file, timeout=20)
    assert result.exit_code != 0 and not result.timed_out  # SIGXFSZ at the cap
    many = "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'x' * 2**20); i += 1\n"
    result = run(box, tar_of, many, timeout=30)
    assert result.exit_code != 0 and not result.timed_out
    assert "disk cap" in result.stderr
    tmp = "f = open('/tmp/big', 'wb')\nwhile True: f.write(b'x' * 2**20)\n"
    result = run(box, tar_of, tmp, timeout=20)
    assert result.exit_code != 0
    assert "No space left" in result.stderr or "File too large" in result.stderr


@pytest.fixture(params=[True, False], ids=["host-volume", "engine-api"])
def roomy_box(docker_client, request):
    """A box whose disk cap leaves room for a file over ``OUTPUT_FILE_CAP``; outputs read
    in the volume's folder on this host, or through the engine's API."""
    sb = DockerSandbox(
        DockerConfig(disk="256m", outputs=("result.txt",)), host_volumes=request.param
    )
    yield sb
    sb.close()


@pytest.mark.parametrize(
    ("make", "why"),
    [
        ("import os; os.symlink('/etc/passwd', 'result.txt')", "symbolic link"),
        ("import os; os.symlink('../out/metrics.json', 'result.txt')", "symbolic link"),
        ("import os; os.mkdir('result.txt'); open('result.txt/x', 'w').write('x')", None),
        (f"open('result.txt', 'wb').truncate({OUTPUT_FILE_CAP + 1})", "over the cap"),
    ],
    ids=["symlink-absolute", "symlink-relative", "directory", "over-cap"],
)
@pytest.mark.slow  # 8 s of --quick under -n 2 (issue 24)
def test_hostile_outputs_are_refused(roomy_box, tar_of, make, why):
    make += "\nimport os; os.write(3, b'{\"score\": 1}')"
    result = run(roomy_box, tar_of, make)
    assert result.exit_code == 0, result.stderr
    assert result.files == {}  # nothing copied: no link followed, no folder, no huge file
    if why is None:  # a folder is walked, never copied (its x matches no declared output)
        assert result.refused == {}
    else:
        assert why in result.refused["result.txt"], result.refused
    assert result.metrics_text == '{"score": 1}'  # the run itself still counts


def test_declared_output_is_copied_out(box, tar_of):
    result = run(box, tar_of, "open('result.txt', 'w').write('the answer')")
    assert result.files == {"result.txt": b"the answer"}  # type: ignore[attr-defined]


def test_overwritten_evaluator_is_fresh_next_time(box, tar_of):
    files = {"evaluate.py": "print('honest')\n"}
    cheat = "open('evaluate.py', 'w').write(\"print('cheated')\")\nexec(open('evaluate.py').read())"
    first = run(box, tar_of, cheat, files=files)
    assert first.stdout == "cheated\n"
    archive = tar_of({"evaluate.py": "print('honest')\n"})
    again = box.execute(ExecRequest(archive, "python evaluate.py", Limits(timeout=10)))
    assert again.stdout == "honest\n"


@pytest.mark.parametrize(
    "tamper",
    [
        "os.symlink(SECRET, path)",
        "os.symlink('/etc/shadow', path)",
        "os.symlink('/proc/self/fd/3', path)",  # the host's own descriptor 3, if followed
        "os.symlink('/proc/1/root' + SECRET, path)",
        "os.mkfifo(path)",  # a reader that follows it would block
        "os.mkdir(path)",
    ],
    ids=["host-secret", "etc-shadow", "proc-self-fd-3", "proc-1-root", "fifo", "directory"],
)
@pytest.mark.parametrize("host_volumes", [True, False], ids=["host-volume", "engine-api"])
@pytest.mark.slow  # 8 s of --quick under -n 2 (issue 24)
def test_a_metrics_symlink_does_not_leak_host_files(
    docker_client, tar_of, tmp_path, tamper, host_volumes
):
    """The candidate finds fd 3's file through /proc/self/fd/3, writes honest metrics,
    then swaps the file for a link to a host secret (or a FIFO, a folder): the host
    reads nothing through it, and drops the metrics rather than trust the swapped file."""
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST-SECRET-8d1f")
    code = f"""
import os
SECRET = {str(secret)!r}
path = os.readlink('/proc/self/fd/3')
assert path == '/sandbox/out/metrics.json', path
os.write(3, b'{{"score": 1}}')
os.unlink(path)
{tamper}
print('tampered')
"""
    box = DockerSandbox(DockerConfig(disk="64m"), host_volumes=host_volumes)
    try:
        result = run(box, tar_of, code)
    finally:
        box.close()
    assert result.exit_code == 0 and result.stdout == "tampered\n", result.stderr
    assert result.metrics_text is None
    assert "metrics of descriptor 3 were not read" in result.stderr, result.stderr
    everything = result.stdout + result.stderr + repr(result.files)
    assert "HOST-SECRET" not in everything and "root:" not in everything


def test_metrics_written_through_proc_self_fd_3_come_back(box, tar_of):
    """Writing the metrics through ``/proc/self/fd/3`` reaches the same regular file as
    descriptor 3: what comes back is what was written, nothing of the host."""
    code = "open('/proc/self/fd/3', 'w').write('{\"score\": 2}')"
    result = run(box, tar_of, code)
    assert result.exit_code == 0, result.stderr
    assert result.metrics_text == '{"score": 2}'


def test_hostile_cases_leave_nothing_running(box, tmp_path):
    threading.Event().wait(0.1)
    assert leftovers(box, tmp_path) == []
