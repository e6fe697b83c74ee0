"""What only the Docker backend does: hardened containers, reaping after kill -9, GPU
requests, warm pool, images, and clear errors when the engine or image is missing."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from pathlib import Path

import pytest

from revtree.errors import SandboxError
from revtree.orchestrator.gpus import GpuPool
from revtree.sandboxes import ExecRequest, Limits
from revtree.sandboxes.docker import LABEL, OWNER, DockerSandbox, reap
from revtree.sandboxes.images import PACKAGES, apt_mirror, base_tag, build_image, host_suite
from revtree.tasks.spec import SandboxConfig

ROOT = Path(__file__).resolve().parents[2]


def test_script_and_package_agree_on_the_base_tag():
    script = (ROOT / "scripts" / "bootstrap-base-image.sh").read_text()
    assert f"revtree-base:${{suite}}-v{base_tag().rsplit('-v', 1)[1]}" in script
    assert f"--include={PACKAGES} " in script  # the same Debian packages
    assert base_tag("trixie").startswith("revtree-base:trixie-v")
    assert host_suite() and apt_mirror().startswith("http")


def test_gpu_pool_hands_out_distinct_ids_and_queues():
    pool = GpuPool(["0", "1", "2"])
    a = pool.acquire(2)
    assert a == ["0", "1"] and pool.free == 1
    got: list[list[str]] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire(2)))
    waiter.start()
    time.sleep(0.3)
    assert got == []  # queued, not failed
    pool.release(a)
    waiter.join(timeout=5)
    assert len(got) == 1 and len(set(got[0])) == 2 and pool.free == 1
    with pytest.raises(SandboxError, match="pool has 3"):
        pool.acquire(4)


def test_gpu_pool_under_concurrency_never_shares():
    pool, held, clash = GpuPool(["0", "1"]), set[str](), []
    lock = threading.Lock()

    def work() -> None:
        ids = pool.acquire(1)
        with lock:
            clash.extend(i for i in ids if i in held)
            held.update(ids)
        time.sleep(0.01)
        with lock:
            held.difference_update(ids)
        pool.release(ids)

    threads = [threading.Thread(target=work) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert clash == [] and pool.free == 2


def test_no_engine_is_a_clear_error():
    with pytest.raises(SandboxError, match="no Docker engine answers at unix:///nonexistent"):
        DockerSandbox(base_url="unix:///nonexistent/docker.sock")


@pytest.mark.docker
def test_missing_image_is_named(docker_client):
    with pytest.raises(SandboxError, match="revtree-no-such-image:0"):
        DockerSandbox(SandboxConfig(image="revtree-no-such-image:0"))


@pytest.mark.docker
def test_container_is_hardened_and_requests_gpus(docker_client, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    config = SandboxConfig(gpus=2, cpus=1.5, memory="300m", mounts={"/data": str(data)})
    box = DockerSandbox(config, gpu_pool=GpuPool(["0", "1", "2"]))
    cid = box.create_for_inspection({"revtree.run": "r1", "revtree.node": "7"}, ["1", "2"])
    try:
        info = docker_client.api.inspect_container(cid)
        hc = info["HostConfig"]
        assert hc["DeviceRequests"] == [
            {
                "Driver": "",
                "Count": 0,
                "DeviceIDs": ["1", "2"],
                "Capabilities": [["gpu"]],
                "Options": {},
            }
        ]
        assert hc["ReadonlyRootfs"] is True and hc["NetworkMode"] == "none"
        assert hc["CapDrop"] == ["ALL"] and "no-new-privileges" in hc["SecurityOpt"]
        assert hc["Memory"] == hc["MemorySwap"] == 300 * 2**20
        assert hc["NanoCpus"] == 1_500_000_000 and hc["PidsLimit"] == 256
        assert "/tmp" in hc["Tmpfs"] and hc["Privileged"] is False
        assert info["Config"]["User"] == "10001:10001"
        labels = info["Config"]["Labels"]
        assert labels["revtree.run"] == "r1" and labels["revtree.node"] == "7"
        binds = [m for m in hc["Mounts"] if m["Type"] == "bind"]
        assert binds == [
            {"Type": "bind", "Source": str(data.resolve()), "Target": "/data", "ReadOnly": True}
        ]
        assert not any(
            "docker.sock" in str(m) or ".revtree" in str(m) for m in hc.get("Mounts") or []
        )
    finally:
        box.discard(cid)
        box.close()


@pytest.mark.docker
def test_mounts_are_read_only(docker_client, tmp_path, tar_of):
    data = tmp_path / "data"
    data.mkdir()
    (data / "set.csv").write_text("1,2\n")
    os.chmod(data / "set.csv", 0o644)
    os.chmod(data, 0o755)
    box = DockerSandbox(SandboxConfig(mounts={"/data": str(data)}))
    try:
        cmd = "cat /data/set.csv; touch /data/new 2>&1 || echo refused"
        result = box.execute(ExecRequest(tar_of({}), cmd, Limits(timeout=10)))
    finally:
        box.close()
    assert result.stdout.startswith("1,2\n") and "refused" in result.stdout
    assert not (data / "new").exists()


@pytest.mark.docker
def test_warm_pool_containers_are_never_reused(docker_client, tar_of):
    box = DockerSandbox(SandboxConfig(warm_pool=2))
    try:
        assert box.warm_ready(30)
        archive = tar_of({"a.txt": "a\n"})
        limits = Limits(timeout=10, memory_bytes=SandboxConfig().memory)
        results = [box.execute(ExecRequest(archive, "ls; touch b", limits)) for _ in range(4)]
    finally:
        box.close()
    assert all(r.stdout == "a.txt\n" for r in results)
    assert len({r.container for r in results}) == 4  # type: ignore[attr-defined]
    mine = {"label": [LABEL, f"{OWNER}={box.labels[OWNER]}"]}
    assert docker_client.api.containers(all=True, filters=mine) == []


KILLED_DRIVER = textwrap.dedent("""\
    import io, sys, tarfile
    from revtree.sandboxes.docker import DockerSandbox
    from revtree.sandboxes import ExecRequest, Limits
    buf = io.BytesIO(); tarfile.open(fileobj=buf, mode="w").close()
    box = DockerSandbox()
    print("ready", flush=True)
    box.execute(ExecRequest(buf.getvalue(), "echo go; sleep 300", Limits(timeout=300),
                            labels={"revtree.run": sys.argv[1], "revtree.node": "1"}))
""")


@pytest.mark.docker
def test_kill_9_of_the_orchestrator_leaves_nothing_after_reap(docker_client, tmp_path):
    run = f"killed-{os.getpid()}"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_DRIVER, run],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    by_run = {"label": [LABEL, f"revtree.run={run}"]}
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 20
        while not docker_client.api.containers(filters=by_run):
            assert time.monotonic() < deadline, "the evaluation never started"
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert docker_client.api.containers(filters=by_run)  # still running: orphaned
        assert reap(docker_client) >= 1
        assert docker_client.api.containers(all=True, filters=by_run) == []
        assert docker_client.api.volumes(filters=by_run).get("Volumes") in (None, [])
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.docker
def test_gc_command_removes_dead_owners(docker_client):
    out = subprocess.run(
        [sys.executable, "-m", "revtree.sandbox_cli", "gc"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert out.stdout.startswith("removed ")


@pytest.mark.docker
def test_build_image_from_dockerfile_and_a_failing_step(docker_client, tmp_path, tar_of):
    folder = tmp_path / "img"
    folder.mkdir()
    (folder / "Dockerfile").write_text("ARG BASE\nFROM $BASE\nRUN echo built > /etc/marker\n")
    tag = build_image(docker_client, "revtree-test-build:ok", dockerfile=folder / "Dockerfile")
    try:
        box = DockerSandbox(SandboxConfig(image=tag))
        result = box.execute(ExecRequest(tar_of({}), "cat /etc/marker", Limits(timeout=10)))
        box.close()
        assert result.stdout == "built\n"
    finally:
        docker_client.api.remove_image(tag, force=True)
    (folder / "Dockerfile").write_text("ARG BASE\nFROM $BASE\nRUN exit 3\n")
    with pytest.raises(SandboxError, match=r"revtree-test-build:bad.*RUN exit 3"):
        build_image(docker_client, "revtree-test-build:bad", dockerfile=folder / "Dockerfile")


@pytest.mark.docker
def test_through_the_api_only_as_with_a_remote_engine(docker_client, tar_of):
    box = DockerSandbox(SandboxConfig(outputs=("r.txt", "link.txt")), host_volumes=False)
    write = (
        'echo \'{"s": 1}\' > "$REVTREE_METRICS"; echo out > r.txt; cat in.txt; '
        "ln -s /etc/passwd link.txt"
    )
    try:
        with pytest.raises(SandboxError, match="refused"):
            box.execute(ExecRequest(tar_of({"in.txt": "in\n"}), write, Limits(timeout=10)))
        result = box.execute(
            ExecRequest(tar_of({"in.txt": "in\n"}), write.split("; ln")[0], Limits(timeout=10))
        )
    finally:
        box.close()
    assert (result.exit_code, result.stdout, result.metrics_text) == (0, "in\n", '{"s": 1}\n')
    assert result.files == {"r.txt": b"out\n"}  # type: ignore[attr-defined]
    mine = {"label": [LABEL, f"{OWNER}={box.labels[OWNER]}"]}
    assert docker_client.api.containers(all=True, filters=mine) == []


PROBE = (
    "tr '\\0' ' ' </proc/1/cmdline; echo; [ -w /sandbox/work ] && echo work-writable; "
    "for f in .run .go .workspace.tar; do [ -e /sandbox/$f ] && echo has $f; "
    "[ -w /sandbox/$f ] && echo writable $f; done; "
    "touch /sandbox/new 2>/dev/null && echo created; rm -f /sandbox/.run 2>/dev/null; "
    "[ -e /sandbox/.run ] || echo gone; exit 3"
)


@pytest.mark.docker
@pytest.mark.parametrize("warm_pool", [0, 1])
def test_resident_runner_is_the_only_process_and_its_files_are_the_hosts(
    docker_client, tar_of, warm_pool
):
    """Engine on this host, and root: the container's main process becomes the runner
    (no exec); the trigger FIFO, runner script and archive are beyond the command's
    reach; the exit code is the container's."""
    box = DockerSandbox(SandboxConfig(warm_pool=warm_pool))
    try:
        box.warm_ready(30)
        result = box.execute(ExecRequest(tar_of({"a.txt": "a"}), PROBE, Limits(timeout=10)))
        cid = result.container  # type: ignore[attr-defined]
        execs = docker_client.api.inspect_container(cid)["ExecIDs"]
    finally:
        box.close()
    assert result.exit_code == 3
    lines = result.stdout.splitlines()
    assert lines[0].strip() == "/bin/sh /sandbox/.run"
    assert lines[1:] == ["work-writable", "has .run", "has .go", "has .workspace.tar"]
    assert not execs


@pytest.mark.docker
def test_without_the_volume_folder_the_command_is_an_exec(docker_client, tar_of):
    box = DockerSandbox(SandboxConfig(warm_pool=0), host_volumes=False)
    try:
        result = box.execute(ExecRequest(tar_of({"a.txt": "a"}), PROBE, Limits(timeout=10)))
    finally:
        box.close()
    assert result.exit_code == 3
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert lines == ["sleep 2147483647", "work-writable", "gone"]


def make_wheel(folder: Path, name: str, version: str, code: str) -> Path:
    """A minimal pure-python wheel (a zip with the dist-info pip needs)."""
    files = {
        f"{name}/__init__.py": code,
        f"{name}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ),
        f"{name}-{version}.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{path},,\n" for path in files) + f"{name}-{version}.dist-info/RECORD,,\n"
    files[f"{name}-{version}.dist-info/RECORD"] = record
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return wheel


@pytest.mark.docker
def test_build_image_cli_installs_a_requirements_list_with_pip(docker_client, tmp_path, tar_of):
    """``revtree sandbox build-image -r`` on the bootstrapped base (Debian's PEP 668
    python, pip from python3-pip); the requirement is a wheel in the build context, as
    PyPI may not be trusted from inside a build here."""
    wheel = make_wheel(tmp_path, "revtree_tiny", "0.1", "VALUE = 'tiny ok'\n")
    tag = "revtree-test-build:reqs"
    cli = [sys.executable, "-m", "revtree", "sandbox", "build-image", "--tag", tag]
    cli += ["-r", f"./{wheel.name}", "--context", str(tmp_path)]
    out = subprocess.run(cli, cwd=ROOT, capture_output=True, text=True, check=False)
    try:
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(tag)
        box = DockerSandbox(SandboxConfig(image=tag))
        cmd = "python -c 'import revtree_tiny; print(revtree_tiny.VALUE)'"
        result = box.execute(ExecRequest(tar_of({}), cmd, Limits(timeout=20)))
        box.close()
        assert (result.exit_code, result.stdout) == (0, "tiny ok\n"), result.stderr
    finally:
        with contextlib.suppress(Exception):
            docker_client.api.remove_image(tag, force=True)
