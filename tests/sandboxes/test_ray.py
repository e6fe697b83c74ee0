"""The Ray runner on real Ray: a multi-node cluster on this machine, loopback only.

Each cluster scenario runs in its own process inside a network namespace made for it
(``unshare --net``, only ``lo`` up; see ``ray_scenarios.py``): outside one, Ray binds to
the machine's own interface even when told 127.0.0.1. Where ``unshare`` is not
permitted, those tests skip with that reason. The address checks need no cluster: they
only ever try a closed loopback port.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from revtree.errors import SandboxError, TaskSpecError
from revtree.tasks.runner import RunnerConfig

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def cluster_problem() -> str | None:
    """Why a loopback-only Ray cluster cannot run here, or None."""
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install -e '.[ray]')"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip is missing (util-linux, iproute2)"
    try:
        r = subprocess.run(
            ["unshare", "--net", "sh", "-c", "ip link set lo up"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"unshare --net failed: {e}"
    if r.returncode != 0:
        return f"unshare --net is not permitted here: {r.stderr.strip()[:200]}"
    return None


def scenario(name: str, work: Path, timeout: float) -> dict[str, Any]:
    """Run scenario ``name`` in a new network namespace; what it saw."""
    if (problem := cluster_problem()) is not None:
        pytest.skip(problem)
    work.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("REVTREE_DB", "RAY_ADDRESS")}
    env.update(REVTREE_SANDBOX="local", PYTHONUNBUFFERED="1")
    script = 'ip link set lo up && exec "$0" -m tests.sandboxes.ray_scenarios "$1" "$2"'
    cmd = ["unshare", "--net", "sh", "-c", script, sys.executable, name, str(work)]
    log = work / "scenario.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(f"scenario {name} ran past {timeout}s:\n{log.read_text()[-4000:]}")
    assert rc == 0, f"scenario {name} failed ({rc}):\n{log.read_text()[-6000:]}"
    result: dict[str, Any] = json.loads((work / "result.json").read_text())
    return result


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return scenario("run", tmp_path_factory.mktemp("ray-run"), timeout=240)


def check_once_and_none_lost(out: dict[str, Any]) -> None:
    assert out["status"] == "completed", out["reason"]
    assert out["max_count"] == 1  # no (node, stage, repeat) evaluated twice
    evaluated = {e["node"] for e in out["evaluations"]}
    finished = [n for n in out["nodes"] if n["status"] == "succeeded"]
    assert len(finished) == len(out["nodes"])
    assert {n["id"] for n in finished} <= evaluated  # nothing lost
    assert all(e["ok"] and e["host"] for e in out["evaluations"])


@pytest.mark.ray
@pytest.mark.slow(seconds=25)  # 38 s of --quick under -n 2 (issue 24)
def test_a_whole_run_on_a_multi_node_cluster_records_every_evaluation_once(
    whole_run: dict[str, Any],
) -> None:
    check_once_and_none_lost(whole_run)
    assert len(whole_run["nodes"]) == 16
    assert len({e["host"] for e in whole_run["evaluations"]}) >= 2  # spread over raylets
    said = [e["message"] for e in whole_run["events"] if e["kind"] == "ray"]
    assert any("local sandbox" in m and "warning" in m for m in said), said  # its warning
    start = next(m for e in whole_run["events"] if "run started" in (m := e["message"]))
    assert "sandbox ray (runner ray at 127.0.0.1:" in start


@pytest.mark.ray
@pytest.mark.slow(seconds=25)  # 32 s of --quick under -n 2 (issue 24): a Ray cluster
def test_fake_gpus_are_exclusive_per_host_and_handed_to_the_evaluation(
    whole_run: dict[str, Any],
) -> None:
    evals = whole_run["evaluations"]
    held: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for e in evals:
        assert len(e["gpus"]) == 1, e
        assert e["cuda"] == e["gpus"][0]  # exactly Ray's ids reached the evaluation
        held[(e["host"], e["gpus"][0])].append((e["t0"], e["t1"]))
    for spans in held.values():
        spans.sort()
        for (_, end), (begin, _) in itertools.pairwise(spans):
            assert begin >= end, f"two evaluations held one GPU at once: {spans}"
    # 4 in flight for 3 GPUs: evaluations did run side by side, and one queued
    points = sorted([(e["t0"], 1) for e in evals] + [(e["t1"], -1) for e in evals])
    level = peak = 0
    for _, step in points:
        level += step
        peak = max(peak, level)
    assert 2 <= peak <= 3


@pytest.mark.ray
@pytest.mark.slow(seconds=25)  # 36 s of --quick under -n 2 (issue 24)
def test_a_stopped_evaluation_cancels_its_ray_task(whole_run: dict[str, Any]) -> None:
    cancel = whole_run["cancel"]
    assert cancel["outcome"] == "cancelled"
    assert cancel["seconds"] < 3.5


@pytest.mark.ray
@pytest.mark.slow(seconds=25)  # 29 s of --quick under -n 2 (issue 24): the cluster of whole_run; in
# --quick, test_a_cancelled_worker_reports_cancelled_and_a_raised_flag_stops_it_before_it_runs
def test_a_cancelled_ray_task_takes_its_evaluation_with_it(whole_run: dict[str, Any]) -> None:
    assert not whole_run["cancel"]["finished_anyway"]


@pytest.mark.ray
@pytest.mark.slow(seconds=25)  # 24 s of --quick under -n 2 (issue 24)
def test_a_cancel_at_any_moment_stops_the_evaluation_and_leaves_nothing(tmp_path: Path) -> None:
    out = scenario("cancel", tmp_path / "cancel", timeout=240)
    cases = {c["name"]: c for c in out["cases"]}
    assert set(cases) == {"busy0", "busy1", "queued", "at0", "at1", "at2", "at3", "at4"}
    for case in out["cases"]:
        assert case["outcome"] == "cancelled", case
        assert case["late"] < 1.0, case  # Cancelled comes at once
    assert out["finished"] == [], out  # no cancelled evaluation ran to its end
    assert out["survivors"] == [], out  # nor left a process behind
    assert "start-queued" not in out["started"]  # a queued task never started
    assert {"start-busy0", "start-busy1", "start-at3", "start-at4"} <= set(out["started"])


@pytest.mark.ray
@pytest.mark.slow(seconds=25)  # 29 s of --quick under -n 2 (issue 24)
def test_a_worker_node_killed_mid_evaluation_costs_one_retry_and_nothing_else(
    tmp_path: Path,
) -> None:
    out = scenario("kill", tmp_path / "kill", timeout=240)
    assert out["killed_at"] is not None
    check_once_and_none_lost(out)
    retries = [e for e in out["events"] if e["kind"] == "ray" and "re-submitted" in e["message"]]
    assert retries, [e["message"] for e in out["events"] if e["kind"] == "ray"]
    node = retries[0]["node"]
    assert node is not None
    rows = [e for e in out["evaluations"] if e["node"] == node]
    assert len(rows) == 1  # recorded once, from the node that survived
    assert not rows[0]["host"].endswith(out["killed_node"][:8])


@pytest.mark.ray
@pytest.mark.slow(seconds=25)  # 30 s of --quick under -n 2 (issue 24)
def test_kill_9_of_the_orchestrator_mid_run_then_resume_completes_with_no_duplicate(
    tmp_path: Path,
) -> None:
    out = scenario("kill9", tmp_path / "kill9", timeout=300)
    assert out["alive_at_kill"], out["at_kill"]  # killed mid-run, not after its end
    assert out["at_kill"]["status"] == "running"  # as a kill -9 leaves it
    assert out["resume_rc"] == 0, out["reason"]
    check_once_and_none_lost(out)
    keys = [(e["node"], e["stage"], e["repeat"], e["attempt"]) for e in out["evaluations"]]
    assert len(keys) == len(set(keys))  # no evaluation row twice
    assert len(out["nodes"]) == 12
    assert sum(n["score"] is not None for n in out["nodes"]) == 12  # every node scored once
    assert sorted(e["node"] for e in out["evaluations"]) == [n["id"] for n in out["nodes"]]
    # evaluations were in flight at the kill (started, not recorded): they were re-run
    # by the resume, and recorded once
    assert out["at_kill"]["started"] > out["at_kill"]["rows"]
    assert out["started_total"] > len(out["evaluations"])


@pytest.mark.ray
@pytest.mark.docker
@pytest.mark.slow(seconds=13)  # 13 s of --quick under -n 2 (issue 24)
def test_a_task_asking_for_docker_runs_in_a_container_on_the_ray_worker(
    docker_client: Any, tmp_path: Path
) -> None:
    out = scenario("docker", tmp_path / "docker", timeout=300)
    assert out["status"] == "completed", out["reason"]
    assert out["evaluations"] and all(e["ok"] for e in out["evaluations"])
    for e in out["evaluations"]:
        seen = e["metrics"]  # what the evaluator saw from where it ran
        assert seen["uid"] == 10001, seen  # the container's user (the worker runs as root)
        assert seen["root_writable"] is False, seen  # a read-only root file system
        assert seen["nets"] == ["lo"], seen  # network "none"
        assert seen["hostname"] != e["host"].split("/")[0], (seen, e["host"])  # its own
        assert e["gpus"] == [] and seen["cuda"] is None  # no GPU asked, none handed
    said = [e["message"] for e in out["events"] if e["kind"] == "ray"]
    # the task asked for docker: the worker's choice, over the REVTREE_SANDBOX=local it
    # inherited, with no local warning
    assert any("runs evaluations in its docker sandbox" in m for m in said), said
    assert not any("local sandbox" in m for m in said), said
    gpu = out["gpu"]
    assert len(gpu["created"]) == 1, gpu  # one container made for the GPU evaluation
    created = gpu["created"][0]
    assert len(created["ray_gpus"]) == 1, created  # Ray assigned the raylet's one GPU
    hc = created["host_config"]
    assert hc["DeviceRequests"] == [
        {
            "Driver": "",
            "Count": 0,
            "DeviceIDs": created["ray_gpus"],  # exactly Ray's id
            "Capabilities": [["gpu"]],
            "Options": {},
        }
    ], hc["DeviceRequests"]
    assert hc["NetworkMode"] == "none" and hc["ReadonlyRootfs"] is True
    assert hc["CapDrop"] == ["ALL"] and "no-new-privileges" in hc["SecurityOpt"]
    assert created["user"] == "10001:10001"
    if "error" in gpu:  # no NVIDIA runtime: the container fails to start, and the
        # evaluation fails on the worker rather than running unisolated
        assert "on the Ray worker" in gpu["error"] and "starting container" in gpu["error"]
    else:  # a GPU machine: it ran, with Ray's id
        assert gpu["exit_code"] == 0 and gpu["gpus"] == created["ray_gpus"], gpu


def peak_concurrency(evals: list[dict[str, Any]]) -> int:
    points = sorted([(e["t0"], 1) for e in evals] + [(e["t1"], -1) for e in evals])
    level = peak = 0
    for _, step in points:
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.ray
@pytest.mark.slow(seconds=25)  # 40 s of --quick under -n 2 (issue 24)
def test_parallel_auto_follows_the_nodes_joining_and_leaving(tmp_path: Path) -> None:
    out = scenario("auto", tmp_path / "auto", timeout=300)
    assert out["seen"] == {"start": True, "rise": True, "fall": True}, out["seen"]
    assert out["rc"] == 0, out["reason"]
    check_once_and_none_lost(out)
    assert len(out["nodes"]) == 30
    assert any(e["host"].endswith(out["third"][:8]) for e in out["evaluations"])  # it ran there
    assert peak_concurrency(out["evaluations"]) <= 3  # never more than the nodes hold
    said = [e["message"] for e in out["events"] if "parallel auto" in e["message"]]
    assert any("parallel auto (2 now)" in m for m in said), said


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.ray
def test_an_address_that_does_not_answer_fails_at_once_naming_it() -> None:
    pytest.importorskip("ray")
    from revtree.sandboxes.ray import RaySandbox

    address = f"127.0.0.1:{closed_port()}"
    t0 = time.monotonic()
    with pytest.raises(SandboxError, match=f"Ray cluster at {address} .*does not answer"):
        RaySandbox(RunnerConfig(kind="ray", address=address))
    assert time.monotonic() - t0 < 5


@pytest.mark.ray
def test_auto_without_a_cluster_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray")
    from revtree.sandboxes.ray import RaySandbox

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    with pytest.raises(SandboxError, match="ray start --head"):
        RaySandbox(RunnerConfig(kind="ray"))


@pytest.mark.slow  # a run in a subprocess waiting on a cluster, 6 s (issue 24)
@pytest.mark.ray
def test_run_with_an_unanswering_cluster_exits_non_zero_naming_it(
    write_task: Any, tmp_path: Path
) -> None:
    pytest.importorskip("ray")
    task = write_task()
    address = f"127.0.0.1:{closed_port()}"
    env = {k: v for k, v in os.environ.items() if k != "REVTREE_DB"}
    env.update(REVTREE_HOME=str(tmp_path / "home"), COLUMNS="200")
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "revtree", "run", str(task), "--runner", "ray"]
    r = subprocess.run(
        [*cmd, "--ray-address", address, "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode != 0
    assert address in r.stdout + r.stderr
    assert time.monotonic() - t0 < 60


def test_the_runner_section_checks_its_address_and_resources() -> None:
    assert RunnerConfig().kind == "local"
    assert RunnerConfig(kind="ray", address="ray://head:10001").address == "ray://head:10001"
    for bad in ({"address": "http://x"}, {"resources": {"GPU": 1}}, {"resources": {"A": -1}}):
        with pytest.raises((ValueError, TaskSpecError)):
            RunnerConfig(kind="ray", **bad)


# -- without a cluster: the worker's side, and the driver's retries against a fake Ray ---


def test_the_worker_hands_rays_gpu_ids_to_its_local_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from revtree.sandboxes.base import ExecRequest, Limits, archive_of
    from revtree.sandboxes.ray import worker
    from revtree.tasks.sandbox import AutoConfig

    monkeypatch.setattr(worker, "placement", lambda: ("box/0123abcd", ["3", "5"]))
    script = b"import os\nos.write(3, os.environ['CUDA_VISIBLE_DEVICES'].encode())\n"
    request = ExecRequest(b"", "python s.py", Limits(30))
    out = worker.run_request(archive_of({"s.py": script}), request, AutoConfig(), None)
    result = out["result"]
    assert result.exit_code == 0, result.stderr
    assert result.metrics_text == "3,5"
    assert (result.host, result.gpus) == ("box/0123abcd", ("3", "5"))
    assert out["backend"][0] == "local" and out["backend"][2]  # with its warning
    lease = worker.AssignedGpus()
    lease.ids = ["1"]
    assert lease.acquire(1) == ["1"]
    with pytest.raises(SandboxError, match="Ray assigned"):
        lease.acquire(2)


class FakeRay:
    """Just enough of Ray for RaySandbox: outcomes of successive tasks, in order."""

    def __init__(self, outcomes: list[Any]) -> None:
        import ray

        self.exceptions = ray.exceptions
        self.outcomes, self.submitted, self.puts = outcomes, 0, 0
        self.cancelled: list[Any] = []
        self.options: dict[str, Any] = {}

    def remote(self, fn: Any) -> Any:
        fake = self

        class Remote:
            def options(self, **kw: Any) -> Any:
                fake.options = kw
                return self

            def remote(self, *args: Any) -> object:
                fake.submitted += 1
                return object()

        return Remote()

    def put(self, value: bytes) -> object:
        self.puts += 1
        return object()

    def wait(
        self, refs: list[Any], timeout: float, num_returns: int = 1
    ) -> tuple[list[Any], list[Any]]:
        if self.outcomes and self.outcomes[0] == "hang":
            time.sleep(timeout)
            return [], refs
        return refs, []

    def get(self, ref: Any) -> Any:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def cancel(self, ref: Any, force: bool) -> None:
        self.cancelled.append((ref, force))

    def is_initialized(self) -> bool:
        return True

    def nodes(self) -> list[dict[str, Any]]:
        return self.cluster

    def available_resources(self) -> dict[str, float]:
        return self.free

    cluster: list[dict[str, Any]] = []
    free: dict[str, float] = {}


def fake_sandbox(monkeypatch: pytest.MonkeyPatch, outcomes: list[Any], **runner: Any) -> Any:
    pytest.importorskip("ray")
    from revtree.sandboxes.ray import sandbox as module

    fake = FakeRay(outcomes)
    monkeypatch.setattr(module, "ray_module", lambda: fake)
    events: list[tuple[str, str, int | None]] = []
    config = RunnerConfig(kind="ray", **runner)
    sb = module.RaySandbox(config, on_event=lambda *e: events.append(e))
    return sb, fake, events


def ok_result(host: str = "w/1") -> dict[str, Any]:
    from revtree.sandboxes.base import ExecResult

    result = ExecResult(0, "", "", 0.1, host=host, gpus=("0",))
    return {"result": result, "host": host, "backend": ("docker", "auto: ...", None)}


def test_a_lost_task_is_resubmitted_told_and_returned_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray

    from revtree.sandboxes.base import ExecRequest, Limits

    lost = [ray.exceptions.WorkerCrashedError(), ray.exceptions.NodeDiedError("node gone")]
    sb, fake, events = fake_sandbox(monkeypatch, [*lost, ok_result()], cpus=2, gpus=1)
    request = ExecRequest(b"tar", "python ev.py", Limits(5), labels={"revtree.node": "7"})
    result = sb.execute(request)
    assert result.host == "w/1" and fake.submitted == 3 and fake.puts == 1  # one put
    assert fake.options["num_cpus"] == 2 and fake.options["num_gpus"] == 1
    assert fake.options["max_retries"] == 0
    retries = [m for _, m, node in events if "re-submitted" in m and node == 7]
    assert [("attempt 2 of 4" in retries[0]), ("attempt 3 of 4" in retries[1])] == [True, True]
    assert any("docker sandbox" in m for _, m, _ in events)


def test_retries_are_bounded_and_a_worker_error_is_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray

    from revtree.sandboxes.base import ExecRequest, Limits

    request = ExecRequest(b"tar", "python ev.py", Limits(5))
    lost = [ray.exceptions.WorkerCrashedError() for _ in range(3)]
    sb, fake, _ = fake_sandbox(monkeypatch, lost, retries=2)
    with pytest.raises(SandboxError, match="lost 3 times"):
        sb.execute(request)
    missing = {"error": "SandboxError: image x missing", "host": "w/2"}
    sb, fake, _ = fake_sandbox(monkeypatch, [missing])
    with pytest.raises(SandboxError, match=r"on the Ray worker w/2: .*image x missing"):
        sb.execute(request)
    assert fake.submitted == 1


def test_a_cancelled_evaluation_cancels_its_ray_task(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from revtree.errors import Cancelled
    from revtree.sandboxes.base import ExecRequest, Limits
    from revtree.sandboxes.ray import sandbox as module

    flags: list[str] = []
    monkeypatch.setattr(module, "raise_flag", flags.append)
    monkeypatch.setattr(module, "lower_flag", flags.remove)
    monkeypatch.setattr(module, "GRACE", 0.3)
    sb, fake, _ = fake_sandbox(monkeypatch, ["hang"])
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    t0 = time.monotonic()
    with pytest.raises(Cancelled):
        sb.execute(ExecRequest(b"tar", "sleep 9", Limits(30)), cancel)
    assert time.monotonic() - t0 < 0.5 and len(flags) == 1  # at once, its flag raised
    assert not fake.cancelled  # the worker has its grace to stop the evaluation itself
    time.sleep(0.6)
    assert fake.cancelled and all(force is True for _, force in fake.cancelled)  # then Ray's


@pytest.mark.slow  # a Ray worker, 3.5 s (issue 24)
def test_a_cancelled_worker_reports_cancelled_and_a_raised_flag_stops_it_before_it_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import threading

    from revtree.errors import Cancelled
    from revtree.sandboxes.base import ExecRequest, Limits, archive_of
    from revtree.sandboxes.ray import worker
    from revtree.tasks.sandbox import AutoConfig

    up: set[str] = set()
    monkeypatch.setattr(worker, "placement", lambda: ("box/0123abcd", []))
    monkeypatch.setattr(worker, "flag_up", lambda token: token in up)
    monkeypatch.setattr(worker, "WATCH", 0.02)
    done = tmp_path / "done"
    script = f"import time, pathlib\ntime.sleep(3)\npathlib.Path({str(done)!r}).touch()\n"
    request = ExecRequest(b"", "python s.py", Limits(30))
    archive = archive_of({"s.py": script.encode()})
    up.add("before")
    t0 = time.monotonic()
    out = worker.run_request(archive, request, AutoConfig(), None, "before")
    assert out == {"cancelled": True, "host": "box/0123abcd"}
    assert time.monotonic() - t0 < 0.5
    threading.Timer(0.5, up.add, args=("during",)).start()
    out = worker.run_request(archive, request, AutoConfig(), None, "during")
    assert out["cancelled"] and time.monotonic() - t0 < 2.5
    time.sleep(3)
    assert not done.exists()  # the supervisor killed it
    sb, _, _ = fake_sandbox(monkeypatch, [out])
    with pytest.raises(Cancelled, match="on the Ray worker box/0123abcd"):
        sb.execute(request)


def test_capacity_counts_what_each_live_node_holds_capped_by_what_is_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sb, fake, _ = fake_sandbox(monkeypatch, [], cpus=2, gpus=1, resources={"A100": 1})
    node = {"CPU": 5.0, "GPU": 2.0, "A100": 4.0, "memory": 1e9}
    fake.cluster = [
        {"Alive": True, "Resources": {"CPU": 0.0}},  # a head without CPUs
        {"Alive": True, "Resources": node},  # 2 (by CPU and by GPU)
        {"Alive": True, "Resources": {**node, "CPU": 2.0}},  # 1 (by CPU)
        {"Alive": False, "Resources": node},  # gone
        {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 4.0}},  # no A100: 0
    ]
    fake.free = {"CPU": 9.0, "GPU": 3.0, "A100": 8.0}
    assert sb.capacity() == 3
    fake.free = {"CPU": 2.0, "GPU": 1.0, "A100": 8.0}  # another job holds the rest
    assert sb.capacity() == 1
    fake.cluster = []
    assert sb.capacity() == 1  # at least one: it queues until a node joins


def test_parallel_auto_on_this_machine_is_its_cpus_over_the_tasks_cpus(
    write_task: Any, tmp_path: Path
) -> None:
    from revtree.orchestrator.wiring import auto_parallel
    from revtree.sandboxes.local import LocalSandbox
    from revtree.tasks import load_task

    spec = load_task(write_task())
    cpus = os.cpu_count() or 1
    assert auto_parallel(spec, LocalSandbox(tmp_path)) == cpus
    half = spec.model_copy(update={"runner": RunnerConfig(cpus=0.5)})
    assert auto_parallel(half, LocalSandbox(tmp_path)) == 2 * cpus
    env = {k: v for k, v in os.environ.items() if k != "REVTREE_DB"}
    env.update(REVTREE_HOME=str(tmp_path / "home"), COLUMNS="200")
    cmd = [sys.executable, "-m", "revtree", "run", str(write_task()), "--parallel", "many"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0 and "auto" in r.stdout + r.stderr


def test_slots_follow_a_resize_up_and_down() -> None:
    import threading

    from revtree.orchestrator.wiring import Slots

    class NoBudget:
        def reason(self, starting: bool) -> None:
            return None

    slots = Slots(1, threading.Event(), NoBudget())  # type: ignore[arg-type]
    held, go = [], threading.Event()

    def hold() -> None:
        with slots.held():
            held.append(1)
            go.wait(5)

    threads = [threading.Thread(target=hold) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    assert len(held) == 1
    slots.resize(3)
    time.sleep(0.3)
    assert len(held) == 3 and slots.used == 3
    slots.resize(1)
    go.set()
    for t in threads:
        t.join()
    assert slots.used == 0 and slots.limit == 1
