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
    root: Path, *, budget: int, parallel: int, sleep: float, runner: str, env: str = ""
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "sol.py").write_text("X = 3.0\nN = 2\n")
    (root / "ev.py").write_text(EVALUATOR)
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
        "node_ip_address": "127.0.0.1",
        "_system_config": {
            "health_check_initial_delay_ms": 0,
            "health_check_period_ms": 500,
            "health_check_failure_threshold": 4,
        },
    }
    cluster = Cluster(initialize_head=True, head_node_args=head)
    added = [add_node(cluster, n) for n in nodes]
    cluster.wait_for_nodes()
    return cluster, added


def add_node(cluster: Any, resources: dict[str, Any]) -> Any:
    return cluster.add_node(
        object_store_memory=STORE_BYTES, node_ip_address="127.0.0.1", **resources
    )


def drive(task: Path, work: Path) -> dict[str, Any]:
    """Create and drive a run of ``task``; what SQL holds afterwards."""
    from revtree.memory import Store
    from revtree.orchestrator import Orchestrator, create_run
    from revtree.tasks import load_task

    home = work / "home"
    store = Store(f"sqlite:///{work / 'revtree.db'}")
    run = create_run(store, load_task(task), home)
    t0 = time.monotonic()
    orch = Orchestrator(store, run.id, home=home)
    final = orch.drive()
    wall = time.monotonic() - t0
    evals = store.evaluations(run.id)
    counts = store.evaluation_counts(run.id)
    out = {
        "status": final.status.value,
        "reason": final.reason,
        "wall": wall,
        "nodes": [
            {"id": n.id, "status": n.status.value, "n_evals": n.n_evals}
            for n in store.nodes(run.id)
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
            }
            for e in evals
        ],
        "max_count": max(counts.values(), default=0),
        "events": [
            {"kind": ev.kind, "message": ev.message, "node": ev.node_id}
            for ev in store.events_since(run.id)
        ],
    }
    store.close()
    return out


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


def scenario_bench(work: Path) -> dict[str, Any]:
    """The issue's measurement: 4 raylets x 1 CPU, a 1 s evaluator, 40 candidates."""
    cluster, _ = start_cluster([{"num_cpus": 1} for _ in range(4)])
    try:
        runner = f'kind = "ray"\naddress = "{cluster.address}"'
        task = write_task(work / "task", budget=40, parallel=4, sleep=1.0, runner=runner)
        return drive(task, work)
    finally:
        cluster.shutdown()


def scenario_bench_local(work: Path) -> dict[str, Any]:
    task = write_task(work / "task", budget=40, parallel=4, sleep=1.0, runner='kind = "local"')
    return drive(task, work)


SCENARIOS = {
    "run": scenario_run,
    "kill": scenario_kill,
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
