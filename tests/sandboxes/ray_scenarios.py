"""Ray cluster scenarios, each run in its own process inside a network namespace that
``tests/sandboxes/test_ray.py`` makes (``unshare --net``, only ``lo`` up), so that every
Ray process binds to and connects to loopback only.

``python -m tests.sandboxes.ray_scenarios NAME WORKDIR`` runs scenario NAME with a
local multi-node cluster (``ray.cluster_utils.Cluster``: a head without CPUs and
raylets with their own CPUs and fake GPU counts, a small object store each) and writes
what it saw as JSON to WORKDIR/result.json; the test asserts on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

STORE_BYTES = 80 * 1024 * 1024
EVALUATOR = """\
import json, os, time
import sol
t0 = time.time()
mark = os.environ.get("MARK")
if mark:
    open(os.path.join(mark, f"start-{os.getpid()}-{t0}"), "w").close()
time.sleep(float(os.environ.get("SLEEP", "0")))
t1 = time.time()
f = (sol.X - 1.2) ** 2 + (sol.N - 7) ** 2
os.write(3, json.dumps(
    {"f": f, "t0": t0, "t1": t1, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}
).encode())
"""


def write_task(
    root: Path,
    *,
    budget: int,
    parallel: int,
    sleep: float,
    runner: str,
    env: str = "",
    sandbox: str = "",
    evaluator: str = EVALUATOR,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "sol.py").write_text("X = 3.0\nN = 2\n")
    (root / "ev.py").write_text(evaluator)
    (root / "task.toml").write_text(
        textwrap.dedent(f"""\
        name = "quad"
        goal = "minimise f"
        editable = ["sol.py"]
        protected = ["ev.py"]

        [evaluate]
        command = "python ev.py"
        metric = "f"
        direction = "minimize"
        timeout = 60

        [sandbox]
        env = {{ SLEEP = "{sleep}"{env} }}
        {sandbox}

        [runner]
        {runner}

        [search]
        policy = "random"
        parallel = {parallel}
        seed = 7

        [budget]
        max_nodes = {budget}

        [trust]
        verify_repeats = 1

        [[knobs]]
        name = "X"
        type = "float"
        low = -5
        high = 5
        file = "sol.py"

        [[knobs]]
        name = "N"
        type = "int"
        low = 1
        high = 10
        file = "sol.py"
        """)
    )
    return root


def start_cluster(nodes: list[dict[str, Any]]) -> tuple[Any, list[Any]]:
    from ray.cluster_utils import Cluster

    head = {
        "num_cpus": 0,
        "num_gpus": 0,
        "object_store_memory": STORE_BYTES,
        "include_dashboard": False,
        "include_log_monitor": False,
        "node_ip_address": "127.0.0.1",
        "_system_config": {
            "health_check_initial_delay_ms": 0,
            "health_check_period_ms": 500,
            "health_check_failure_threshold": 4,
            # several raylets share this machine's few cores: no metrics, no task events
            "enable_metrics_collection": False,
            "task_events_report_interval_ms": 0,
        },
    }
    cluster = Cluster(initialize_head=True, head_node_args=head)
    added = [add_node(cluster, n) for n in nodes]
    cluster.wait_for_nodes()
    return cluster, added


def add_node(cluster: Any, resources: dict[str, Any]) -> Any:
    return cluster.add_node(
        object_store_memory=STORE_BYTES,
        node_ip_address="127.0.0.1",
        include_log_monitor=False,
        **resources,
    )


def drive(task: Path, work: Path, parallel: int | str | None = None) -> dict[str, Any]:
    """Create and drive a run of ``task``; what SQL holds afterwards."""
    from revtree.memory import Store
    from revtree.orchestrator import Orchestrator, create_run
    from revtree.tasks import load_task

    home = work / "home"
    store = Store(f"sqlite:///{work / 'revtree.db'}")
    run = create_run(store, load_task(task), home)
    t0 = time.monotonic()
    orch = Orchestrator(store, run.id, home=home, parallel=parallel)
    orch.drive()
    wall = time.monotonic() - t0
    out = summary(store, run.id)
    out["wall"] = wall
    store.close()
    return out


def summary(store: Any, run_id: str) -> dict[str, Any]:
    """What SQL holds of run ``run_id``."""
    final = store.get_run(run_id)
    evals = store.evaluations(run_id)
    counts = store.evaluation_counts(run_id)
    return {
        "status": final.status.value,
        "reason": final.reason,
        "nodes": [
            {"id": n.id, "status": n.status.value, "n_evals": n.n_evals, "score": n.score}
            for n in store.nodes(run_id)
        ],
        "evaluations": [
            {
                "node": e.node_id,
                "stage": e.stage,
                "repeat": e.repeat,
                "attempt": e.attempt,
                "ok": e.ok,
                "host": e.host,
                "gpus": list(e.gpus),
                "duration": e.duration,
                "t0": e.metrics.get("t0"),
                "t1": e.metrics.get("t1"),
                "cuda": e.metrics.get("cuda"),
                "metrics": e.metrics,
            }
            for e in evals
        ],
        "max_count": max(counts.values(), default=0),
        "events": [
            {"kind": ev.kind, "message": ev.message, "node": ev.node_id}
            for ev in store.events_since(run_id)
        ],
    }


def scenario_run(work: Path) -> dict[str, Any]:
    """A whole run; 3 raylets with 2 CPUs and 1 fake GPU each, 4 evaluations in flight
    asking for 1 GPU each: one always queues for a GPU."""
    cluster, _ = start_cluster([{"num_cpus": 2, "num_gpus": 1} for _ in range(3)])
    try:
        runner = f'kind = "ray"\naddress = "{cluster.address}"\ngpus = 1'
        task = write_task(work / "task", budget=16, parallel=4, sleep=0.4, runner=runner)
        out = drive(task, work)
        out["cancel"] = cancel_check(cluster.address, work)
        return out
    finally:
        cluster.shutdown()


def cancel_check(address: str, work: Path) -> dict[str, Any]:
    """A cancelled execute returns at once, and its evaluation never finishes (the Ray
    task's worker, and the local evaluation with it, were killed)."""
    from revtree.errors import Cancelled
    from revtree.sandboxes.base import ExecRequest, Limits, archive_of
    from revtree.sandboxes.ray import RaySandbox
    from revtree.tasks.runner import RunnerConfig

    done = work / "cancel-done"
    script = f"import time, pathlib\ntime.sleep(4)\npathlib.Path({str(done)!r}).touch()\n"
    sandbox = RaySandbox(RunnerConfig(kind="ray", address=address, gpus=0))
    cancel = threading.Event()
    threading.Timer(1.5, cancel.set).start()
    t0 = time.monotonic()
    try:
        sandbox.execute(
            ExecRequest(archive_of({"s.py": script.encode()}), "python s.py", Limits(30)),
            cancel,
        )
        outcome = "returned"
    except Cancelled:
        outcome = "cancelled"
    took = time.monotonic() - t0
    sandbox.close()
    time.sleep(4)
    return {"outcome": outcome, "seconds": took, "finished_anyway": done.exists()}


def survivors(marker: str) -> list[str]:
    """Command lines of live processes that mention ``marker``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmd and int(pid) != os.getpid():
            found.append(f"{pid}: {cmd}")
    return found


def scenario_cancel(work: Path) -> dict[str, Any]:
    """Cancels at several moments (while Ray dispatches the task, while its worker
    starts, mid-evaluation, and a task queued behind a busy cluster): each execute
    raises Cancelled at once, and no evaluation finishes or leaves a process behind."""
    from revtree.errors import Cancelled
    from revtree.sandboxes.base import ExecRequest, Limits, archive_of
    from revtree.sandboxes.ray import RaySandbox
    from revtree.tasks.runner import RunnerConfig

    cluster, _ = start_cluster([{"num_cpus": 1}, {"num_cpus": 1}])
    marks = work / "marks"
    marks.mkdir()
    cases: list[dict[str, Any]] = []
    try:
        sandbox = RaySandbox(RunnerConfig(kind="ray", address=cluster.address))

        def request(name: str, seconds: float) -> ExecRequest:
            done = marks / f"done-{name}"
            script = (
                f"import time, pathlib\npathlib.Path({str(marks)!r}, 'start-{name}').touch()\n"
                f"time.sleep({seconds})\npathlib.Path({str(done)!r}).touch()\n"
            )
            files = {f"cancel_{name}.py": script.encode()}
            return ExecRequest(archive_of(files), f"python cancel_{name}.py", Limits(60))

        def attempt(
            name: str, delay: float, seconds: float = 3.0, told: threading.Event | None = None
        ) -> None:
            """Execute, cancelled ``delay`` s after it starts, or when ``told`` is set (at
            ``cancel_at[0]``)."""
            cancel = told or threading.Event()
            t0 = time.monotonic()
            if told is None:
                threading.Timer(delay, cancel.set).start()
            try:
                sandbox.execute(request(name, seconds), cancel)
                outcome = "returned"
            except Cancelled:
                outcome = "cancelled"
            late = time.monotonic() - (t0 + delay if told is None else cancel_at[0])
            cases.append({"name": name, "outcome": outcome, "late": late})

        # the cluster busy with two long ones (cancelled once both have started, however
        # long a loaded machine takes to start Ray's workers): a third queues behind
        # them and is cancelled while queued
        stop_busy, cancel_at = threading.Event(), [0.0]
        busy = [
            threading.Thread(target=attempt, args=(f"busy{i}", 0.0, 60, stop_busy)) for i in (0, 1)
        ]
        for t in busy:
            t.start()
        deadline = time.monotonic() + 120
        while not all((marks / f"start-busy{i}").exists() for i in (0, 1)):
            assert time.monotonic() < deadline, "the busy evaluations did not start in 120 s"
            time.sleep(0.05)
        attempt("queued", 1.0)
        cancel_at[0] = time.monotonic()
        stop_busy.set()
        for t in busy:
            t.join()
        for i, delay in enumerate((0.01, 0.1, 0.4, 1.5, 2.5)):
            attempt(f"at{i}", delay)
        sandbox.close()
        time.sleep(4.0)  # past the end of every evaluation that was left running
        finished = sorted(m.name for m in marks.iterdir() if m.name.startswith("done-"))
        started = sorted(m.name for m in marks.iterdir() if m.name.startswith("start-"))
        return {
            "cases": cases,
            "finished": finished,
            "started": started,
            "survivors": survivors("python cancel_"),
        }
    finally:
        cluster.shutdown()


def raylet_pid(node: Any) -> int:
    return int(node.all_processes["raylet"][0].process.pid)


def node_running(pid: int, nodes: list[Any]) -> Any:
    """The Ray node whose raylet is an ancestor of process ``pid`` (None if gone)."""
    raylets = {raylet_pid(n): n for n in nodes}
    while pid > 1:
        if pid in raylets:
            return raylets[pid]
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return None
        pid = int(next(x for x in status.splitlines() if x.startswith("PPid:")).split()[1])
    return None


def scenario_kill(work: Path) -> dict[str, Any]:
    """Two worker raylets (1 CPU each); once an evaluation has started, the raylet it
    runs under is removed: the evaluation in flight is lost and re-submitted."""
    cluster, nodes = start_cluster([{"num_cpus": 1}, {"num_cpus": 1}])
    marks = work / "marks"
    marks.mkdir()
    killed: dict[str, Any] = {}

    def killer() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            for mark in sorted(marks.iterdir()):
                node = node_running(int(mark.name.split("-")[1]), nodes)
                if node is not None:
                    time.sleep(0.5)  # mid-evaluation (it sleeps 2 s)
                    cluster.remove_node(node, allow_graceful=False)
                    killed.update(at=time.time(), node=node.node_id)
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        runner = f'kind = "ray"\naddress = "{cluster.address}"\nretries = 3'
        task = write_task(
            work / "task",
            budget=6,
            parallel=1,
            sleep=2.0,
            runner=runner,
            env=f', MARK = "{marks}"',
        )
        out = drive(task, work)
        thread.join(5)
        out["killed_at"] = killed.get("at")
        out["killed_node"] = killed.get("node")
        return out
    finally:
        cluster.shutdown()


def cli(work: Path, *args: str) -> subprocess.Popen[bytes]:
    """A ``revtree`` CLI process (the orchestrator) on this scenario's database."""
    env = {**os.environ, "REVTREE_HOME": str(work / "home"), "COLUMNS": "200"}
    db = f"sqlite:///{work / 'revtree.db'}"
    log = (work / f"cli-{args[0]}-{time.time():.0f}.log").open("ab")
    cmd = [sys.executable, "-m", "revtree", *args, "--db", db, "--quiet"]
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def scenario_kill9(work: Path) -> dict[str, Any]:
    """``kill -9`` of the orchestrator (a ``revtree run --runner ray`` process) while
    evaluations are in flight on the cluster, then ``revtree resume``: the run completes
    and no evaluation is recorded twice."""
    from revtree.memory import Store

    cluster, _ = start_cluster([{"num_cpus": 1} for _ in range(3)])
    marks = work / "marks"
    marks.mkdir()
    try:
        task = write_task(
            work / "task", budget=12, parallel=3, sleep=1.0, runner="", env=f', MARK = "{marks}"'
        )
        address = ["--runner", "ray", "--ray-address", cluster.address]
        proc = cli(work, "run", str(task / "task.toml"), *address)
        store = Store(f"sqlite:///{work / 'revtree.db'}")
        deadline, rows = time.monotonic() + 120, 0
        while time.monotonic() < deadline and proc.poll() is None:
            runs = store.list_runs()
            rows = len(store.evaluations(runs[0].id)) if runs else 0
            if rows >= 4:
                break
            time.sleep(0.05)
        time.sleep(0.5)  # mid-way through the evaluations in flight
        alive = proc.poll() is None
        proc.kill()
        proc.wait()
        run_id = store.list_runs()[0].id
        at_kill = {
            "rows": len(store.evaluations(run_id)),
            "started": len(list(marks.iterdir())),
            "status": store.get_run(run_id).status.value,
        }
        time.sleep(3.0)
        orphans = survivors("python ev.py")
        resumed = cli(work, "resume", run_id)
        rc = resumed.wait(180)
        out = summary(store, run_id)
        store.close()
        out.update(alive_at_kill=alive, at_kill=at_kill, orphans=orphans, resume_rc=rc)
        out["started_total"] = len(list(marks.iterdir()))
        return out
    finally:
        cluster.shutdown()


def scenario_auto(work: Path) -> dict[str, Any]:
    """``revtree run --parallel auto`` on 2 raylets of 1 CPU: 2 at once; a third raylet
    joins: 3; one leaves: 2 again. The live log tells each change."""
    from revtree.memory import Store

    cluster, _ = start_cluster([{"num_cpus": 1} for _ in range(2)])
    try:
        task = write_task(work / "task", budget=30, parallel=1, sleep=1.0, runner="")
        address = ["--runner", "ray", "--ray-address", cluster.address]
        proc = cli(work, "run", str(task / "task.toml"), *address, "--parallel", "auto")
        store = Store(f"sqlite:///{work / 'revtree.db'}")

        def until(what: str, seconds: float = 90) -> bool:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and proc.poll() is None:
                runs = store.list_runs()
                if runs and any(what in e.message for e in store.events_since(runs[0].id)):
                    return True
                time.sleep(0.1)
            return False

        seen = {"start": until("parallel auto (2 now)")}
        third = add_node(cluster, {"num_cpus": 1})
        seen["rise"] = until("3 evaluations at once (was 2)")
        deadline = time.monotonic() + 90  # until an evaluation has run on the third
        while time.monotonic() < deadline and proc.poll() is None:
            hosts = {e.host or "" for e in store.evaluations(store.list_runs()[0].id)}
            if any(h.endswith(third.node_id[:8]) for h in hosts):
                break
            time.sleep(0.1)
        cluster.remove_node(third)
        seen["fall"] = until("2 evaluations at once (was 3)")
        rc = proc.wait(180)
        out = summary(store, store.list_runs()[0].id)
        store.close()
        out.update(seen=seen, rc=rc, third=third.node_id)
        return out
    finally:
        cluster.shutdown()


IN_CONTAINER = """\
import json, os, socket
import sol
def writable(path):
    try:
        open(path, "w").close()
        return True
    except OSError:
        return False
f = (sol.X - 1.2) ** 2 + (sol.N - 7) ** 2
os.write(3, json.dumps({
    "f": f,
    "uid": os.getuid(),
    "hostname": socket.gethostname(),
    "nets": sorted(os.listdir("/sys/class/net")),
    "root_writable": writable("/revtree-probe"),
    "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
}).encode())
"""
RECORD = "REVTREE_TEST_CREATED"  # the file where recording_run_request notes containers


def recording_run_request(*args: Any) -> dict[str, Any]:
    """The worker's ``run_request``, noting each container its Docker backend creates
    (the engine's HostConfig of it, and Ray's GPU ids of the task) just before the
    container starts: a GPU container cannot start without NVIDIA's runtime, but what
    the worker asked the engine for is there to see."""
    from revtree.sandboxes.docker.containers import Containers
    from revtree.sandboxes.ray import worker

    if not getattr(Containers.start, "recording", False):
        start = Containers.start

        def recording_start(self: Any, box: Any) -> None:
            info = self.api.inspect_container(box.cid)
            seen = {"host_config": info["HostConfig"], "user": info["Config"]["User"]}
            seen["ray_gpus"] = worker.placement()[1]
            with open(os.environ[RECORD], "a") as out:
                out.write(json.dumps(seen) + "\n")
            start(self, box)

        recording_start.recording = True  # type: ignore[attr-defined]
        Containers.start = recording_start  # type: ignore[method-assign]
    out: dict[str, Any] = worker.run_request(*args)
    return out


def remove_ray_containers() -> int:
    """Remove the containers (and volumes) the killed Ray workers left (their warm
    pools); only this scenario's: labelled by the Ray runner, their owner gone."""
    from revtree.sandboxes.docker import connect
    from revtree.sandboxes.docker.engine import OWNER, owner_alive

    client = connect(None)
    api, n = client.api, 0
    try:
        for c in api.containers(all=True, filters={"label": "revtree.runner=ray"}):
            if not owner_alive(c["Labels"].get(OWNER, "")):
                api.remove_container(c["Id"], force=True, v=True)
                n += 1
        for v in api.volumes(filters={"label": "revtree.runner=ray"}).get("Volumes") or []:
            if not owner_alive((v.get("Labels") or {}).get(OWNER, "")):
                api.remove_volume(v["Name"], force=True)
    finally:
        client.close()
    return n


def scenario_docker(work: Path) -> dict[str, Any]:
    """A task that asks for Docker (``[sandbox] backend = "docker"``) run on a raylet
    with 1 fake GPU: its evaluations run in the worker's Docker backend (the
    evaluator reports what it sees from inside); then one evaluation asking for
    ``gpus = 1``, whose container must request exactly the GPU id Ray assigned."""
    from revtree.sandboxes.base import ExecRequest, Limits, archive_of
    from revtree.sandboxes.ray import RaySandbox
    from revtree.sandboxes.ray import sandbox as driver
    from revtree.tasks.runner import RunnerConfig
    from revtree.tasks.sandbox import DockerConfig

    os.environ[RECORD] = str(work / "created.jsonl")  # the raylet's workers inherit it
    cluster, _ = start_cluster([{"num_cpus": 1, "num_gpus": 1}])
    try:
        runner = f'kind = "ray"\naddress = "{cluster.address}"'
        task = write_task(
            work / "task",
            budget=3,
            parallel=1,
            sleep=0,
            runner=runner,
            sandbox='backend = "docker"',
            evaluator=IN_CONTAINER,
        )
        out = drive(task, work)
        driver.run_request = recording_run_request  # type: ignore[assignment]
        sandbox = RaySandbox(
            RunnerConfig(kind="ray", address=cluster.address, gpus=1),
            DockerConfig(),
        )
        request = ExecRequest(archive_of({"s.py": b"print('ran')\n"}), "python s.py", Limits(60))
        gpu: dict[str, Any] = {}
        try:
            result = sandbox.execute(request)
            gpu.update(exit_code=result.exit_code, gpus=list(result.gpus), host=result.host)
        except Exception as e:  # no NVIDIA runtime here: the container cannot start
            gpu.update(error=f"{type(e).__name__}: {e}")
        finally:
            sandbox.close()
        record = work / "created.jsonl"
        lines = record.read_text().splitlines() if record.exists() else []
        gpu["created"] = [json.loads(line) for line in lines]
        out["gpu"] = gpu
        return out
    finally:
        cluster.shutdown()
        out_left = remove_ray_containers()
        print(f"removed {out_left} container(s) the Ray workers left", flush=True)


def bench_shape() -> tuple[int, int, float]:
    """(candidates, slots, evaluator seconds) of the bench scenarios: the issue's 40, 4
    and 1 s unless BENCH_NODES, BENCH_SLOTS and BENCH_SLEEP say otherwise."""
    env = os.environ
    return (
        int(env.get("BENCH_NODES", "40")),
        int(env.get("BENCH_SLOTS", "4")),
        float(env.get("BENCH_SLEEP", "1.0")),
    )


def scenario_bench(work: Path) -> dict[str, Any]:
    """The issue's measurement: a head without CPUs and 4 raylets x 1 CPU (one per
    slot), a 1 s evaluator, 40 candidates (``benchmarks/ray_cluster.py``)."""
    nodes, slots, sleep = bench_shape()
    cluster, _ = start_cluster([{"num_cpus": 1} for _ in range(slots)])
    try:
        runner = f'kind = "ray"\naddress = "{cluster.address}"'
        task = write_task(work / "task", budget=nodes, parallel=slots, sleep=sleep, runner=runner)
        return drive(task, work)
    finally:
        cluster.shutdown()


def scenario_bench_local(work: Path) -> dict[str, Any]:
    nodes, slots, sleep = bench_shape()
    task = write_task(
        work / "task", budget=nodes, parallel=slots, sleep=sleep, runner='kind = "local"'
    )
    return drive(task, work)


SCENARIOS = {
    "run": scenario_run,
    "cancel": scenario_cancel,
    "kill": scenario_kill,
    "kill9": scenario_kill9,
    "docker": scenario_docker,
    "auto": scenario_auto,
    "bench": scenario_bench,
    "bench_local": scenario_bench_local,
}


def main() -> None:
    name, work = sys.argv[1], Path(sys.argv[2])
    os.environ.setdefault("REVTREE_SANDBOX", "local")
    os.environ["REVTREE_HOME"] = str(work / "home")
    # Ray's files (and its "current cluster" address file) in a folder of this test's,
    # with a short path: Ray's unix sockets live there
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    os.environ["RAY_TMPDIR"] = ray_tmp
    try:
        result = SCENARIOS[name](work)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    (work / "result.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
