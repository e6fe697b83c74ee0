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
from revtree.sandboxes import (
    AUTO_ENV,
    BackendChoice,
    ExecRequest,
    Limits,
    choose_backend,
    make_sandbox,
)
from revtree.sandboxes.docker import (
    LABEL,
    OWNER,
    DockerSandbox,
    glob_match,
    reap,
    runner_script,
)
from revtree.sandboxes.images import PACKAGES, apt_mirror, base_tag, build_image, host_suite
from revtree.tasks.sandbox import AutoConfig, DockerConfig
from tests.conftest import TASK_TOML

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
        DockerSandbox(DockerConfig(image="revtree-no-such-image:0"))


@pytest.mark.docker
def test_container_is_hardened_and_requests_gpus(docker_client, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    config = DockerConfig(gpus=2, cpus=1.5, memory="300m", mounts={"/data": str(data)})
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
    box = DockerSandbox(DockerConfig(mounts={"/data": str(data)}))
    try:
        cmd = "cat /data/set.csv; touch /data/new 2>&1 || echo refused"
        result = box.execute(ExecRequest(tar_of({}), cmd, Limits(timeout=10)))
    finally:
        box.close()
    assert result.stdout.startswith("1,2\n") and "refused" in result.stdout
    assert not (data / "new").exists()


@pytest.mark.docker
def test_warm_pool_containers_are_never_reused(docker_client, tar_of):
    box = DockerSandbox(DockerConfig(warm_pool=2))
    try:
        assert box.warm_ready(30)
        archive = tar_of({"a.txt": "a\n"})
        limits = Limits(timeout=10, memory_bytes=DockerConfig().memory)
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
        [sys.executable, "-m", "revtree", "sandbox", "gc"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert out.stdout.startswith("removed ")


@pytest.mark.docker
@pytest.mark.slow  # 7 s of --quick under -n 2 (issue 24)
def test_build_image_from_dockerfile_and_a_failing_step(docker_client, tmp_path, tar_of):
    folder = tmp_path / "img"
    folder.mkdir()
    (folder / "Dockerfile").write_text("ARG BASE\nFROM $BASE\nRUN echo built > /etc/marker\n")
    tag = build_image(docker_client, "revtree-test-build:ok", dockerfile=folder / "Dockerfile")
    try:
        box = DockerSandbox(DockerConfig(image=tag))
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
    box = DockerSandbox(DockerConfig(outputs=("r.txt",)), host_volumes=False)
    write = (
        "echo '{\"s\": 1}' >&3; echo out > r.txt; mkdir -p o/p; echo g > o/p/g.json; "
        "cat in.txt; ln -s /etc/passwd link.json; "
        "echo fine > fine.json; ln fine.json hard.json"
    )
    request = ExecRequest(
        tar_of({"in.txt": "in\n"}), write, Limits(timeout=10), outputs=("*.json", "o/**")
    )
    try:
        result = box.execute(request)
    finally:
        box.close()
    assert (result.exit_code, result.stdout, result.metrics_text) == (0, "in\n", '{"s": 1}\n')
    assert dict(result.files) == {"r.txt": b"out\n", "o/p/g.json": b"g\n", "fine.json": b"fine\n"}
    assert dict(result.refused) == {"link.json": "a symbolic link", "hard.json": "a hard link"}
    mine = {"label": [LABEL, f"{OWNER}={box.labels[OWNER]}"]}
    assert docker_client.api.containers(all=True, filters=mine) == []


@pytest.mark.docker
@pytest.mark.parametrize("host_volumes", [True, False], ids=["volume-folder", "api"])
def test_hostile_outputs_and_metrics_are_refused_not_raised(docker_client, tar_of, host_volumes):
    """Both ways of reading the volume: a link, FIFO, oversize file or climbing glob
    is named in ``refused``; a metrics file replaced by a link is not read."""
    box = DockerSandbox(DockerConfig(warm_pool=0), host_volumes=host_volumes, output_cap=1000)
    hostile = (
        "echo ok > a.out; ln -s /etc/passwd b.out; mkfifo c.out; head -c 1001 /dev/zero > d.out; "
        "ln -s /sandbox/out e; echo '{\"score\": 999}' >&3; "
        "rm /sandbox/out/metrics.json && ln -s /etc/shadow /sandbox/out/metrics.json"
    )
    globs = ("*.out", "e/*", "../out/*", "/etc/passwd")
    try:
        result = box.execute(ExecRequest(tar_of({}), hostile, Limits(timeout=10), outputs=globs))
    finally:
        box.close()
    assert result.exit_code == 0, result.stderr
    assert dict(result.files) == {"a.out": b"ok\n"}
    assert dict(result.refused) == {
        "b.out": "a symbolic link",
        "c.out": "a FIFO",
        "d.out": "1001 bytes, over the cap of 1000 per file",
        "../out/*": "a path out of the workspace",
        "/etc/passwd": "a path out of the workspace",
    }
    assert result.metrics_text is None
    assert "revtree: the metrics of descriptor 3 were not read" in result.stderr


def test_the_runner_script_names_no_metrics_path_and_opens_fd_3():
    script = runner_script(ExecRequest(b"", "python ev.py", Limits(timeout=5)), 2**20)
    assert "REVTREE_METRICS" not in script
    assert "</dev/null 3>/sandbox/out/metrics.json\n" in script


def test_globs_match_within_segments_and_across_with_double_star():
    assert glob_match("a.json", "*.json") and not glob_match("d/a.json", "*.json")
    assert glob_match("d/a.json", "**/*.json") and glob_match("a.json", "**/*.json")
    assert glob_match("x/y/z.txt", "x/**") and not glob_match("x", "x/*")
    assert glob_match("r1.csv", "r[0-9].csv") and not glob_match("../a", "*/a")


def test_auto_without_an_engine_runs_only_knob_candidates_locally(monkeypatch):
    """No engine: the knob proposer's candidates (constants of the user's own code) run
    locally with one line saying why; code a model writes is refused, naming both ways
    on; ``--sandbox local`` (asked) runs it with the full warning."""
    monkeypatch.delenv(AUTO_ENV, raising=False)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setenv("REVTREE_BWRAP", "/nonexistent/bwrap")  # and no bubblewrap
    choice = choose_backend("auto", AutoConfig(), knob_only=True)
    assert choice.name == "local"
    assert choice.reason == "auto: no Docker engine answers at unix:///nonexistent/docker.sock"
    assert choice.warning is not None and "\n" not in choice.warning
    assert "[[knobs]]" in choice.warning and "--sandbox local" in choice.warning
    for make in (
        lambda: choose_backend("auto", AutoConfig(), writer="LLM agents write them"),
        lambda: make_sandbox("auto", config=AutoConfig()),
    ):
        with pytest.raises(SandboxError) as caught:
            make()
        message = str(caught.value)
        assert "no Docker engine answers at unix:///nonexistent/docker.sock" in message
        assert "`revtree sandbox bootstrap-base`" in message and "--sandbox local" in message
    asked = choose_backend("local", AutoConfig())
    assert asked.warning is not None
    for word in ("same file system", "network", "database", "forge"):
        assert word in asked.warning


@pytest.mark.bwrap
def test_auto_without_an_engine_takes_bwrap_for_any_code(monkeypatch, bwrap_usable):
    """No engine, bubblewrap here: code a model writes runs in the namespace sandbox,
    the reason saying what it enforces; no warning (it isolates)."""
    monkeypatch.delenv(AUTO_ENV, raising=False)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    for how in ({"writer": "LLM agents write them"}, {"knob_only": True}):
        choice = choose_backend("auto", AutoConfig(), **how)  # type: ignore[arg-type]
        assert (choice.name, choice.warning) == ("bwrap", None)
        assert choice.reason.startswith("auto: no Docker engine answers at unix:///nonexistent")
        assert "no network" in choice.reason and "memory" in choice.reason
    assert make_sandbox("auto", config=AutoConfig()).name == "bwrap"


def test_forced_and_asked_choices_say_so(monkeypatch):
    monkeypatch.setenv(AUTO_ENV, "local")
    forced = choose_backend("auto", AutoConfig())
    assert (forced.name, forced.reason) == ("local", "forced by REVTREE_SANDBOX=local")
    assert forced.warning is not None
    asked = choose_backend("docker", AutoConfig())
    assert asked == BackendChoice("docker", "asked for in the task or --sandbox")


@pytest.mark.docker
def test_auto_with_the_engine_and_image_is_docker(docker_client, monkeypatch):
    monkeypatch.delenv(AUTO_ENV, raising=False)
    choice = choose_backend("auto", AutoConfig())
    assert choice.name == "docker" and choice.warning is None
    assert choice.reason.startswith("auto: the Docker engine at ")
    assert choice.reason.endswith(f"answers and has image {base_tag()}")


@pytest.mark.docker
def test_auto_with_a_missing_image_stops_instead_of_going_local(docker_client, monkeypatch):
    monkeypatch.delenv(AUTO_ENV, raising=False)
    config = AutoConfig(image="revtree-no-such-image:1")
    for make in (
        lambda: choose_backend("auto", config),
        lambda: make_sandbox("auto", config=config),
    ):
        with pytest.raises(SandboxError) as caught:
            make()
        message = str(caught.value)
        assert "'revtree-no-such-image:1'" in message
        assert "revtree sandbox bootstrap-base" in message
        assert "revtree sandbox build-image TASK" in message
        assert "docker pull python:3.11-slim" in message
        assert "--sandbox local" in message


MARKER_EVALUATE = """\
import json, pathlib
pathlib.Path({marker!r}).write_text("evaluated here")
print(json.dumps({{"score": 1.0}}))
"""


@pytest.mark.docker
@pytest.mark.slow  # 7 s of --quick under -n 2 (issue 24)
def test_cli_run_with_auto_and_a_missing_image_fails_without_evaluating(
    docker_client, write_task, tmp_path
):
    marker = tmp_path / "evaluated-on-the-host"
    toml = TASK_TOML + '\n[sandbox]\nimage = "revtree-no-such-image:1"\n'
    task = write_task(toml, files={"evaluate.py": MARKER_EVALUATE.format(marker=str(marker))})
    env = {k: v for k, v in os.environ.items() if k not in (AUTO_ENV, "REVTREE_DB")}
    env["REVTREE_HOME"] = str(tmp_path / "home")
    out = subprocess.run(
        [sys.executable, "-m", "revtree", "run", str(task), "--budget-nodes", "2", "--quiet"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    said = " ".join((out.stdout + out.stderr).split())
    assert out.returncode != 0, said
    assert "revtree-no-such-image:1" in said and "bootstrap-base" in said
    assert not marker.exists()  # nothing ran on the host


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
    box = DockerSandbox(DockerConfig(warm_pool=warm_pool))
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
    box = DockerSandbox(DockerConfig(warm_pool=0), host_volumes=False)
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
@pytest.mark.slow  # 19 s of --quick under -n 2 (issue 24)
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
        box = DockerSandbox(DockerConfig(image=tag))
        cmd = "python -c 'import revtree_tiny; print(revtree_tiny.VALUE)'"
        result = box.execute(ExecRequest(tar_of({}), cmd, Limits(timeout=20)))
        box.close()
        assert (result.exit_code, result.stdout) == (0, "tiny ok\n"), result.stderr
    finally:
        with contextlib.suppress(Exception):
            docker_client.api.remove_image(tag, force=True)
