"""Storage cost and start-up times as a run grows.

    python benchmarks/storage.py [--nodes 1000] [--big 10000]

1. Drives a real run of ``--nodes`` candidates (a trivial evaluator, local sandbox,
   SQLite with LangGraph checkpoints) and reports database bytes per node before and
   after ``revtree gc`` (which prunes the checkpoints of finished candidates), and the
   checkpoints' share. Evaluation logs live in files and are not counted.
2. Grows a copy of that run to ``--big`` nodes (history inserted in bulk, as a fork
   does) and times, at both sizes: ``show`` (the run summary), ``watch`` start-up (the
   first page of events) and ``resume`` start-up (building the orchestrator: mirror,
   knob study, tree snapshot, policy), each as the median of 3.
"""

from __future__ import annotations

import argparse
import dataclasses
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from revtree.memory import Store
from revtree.memory.checkpoints import gc
from revtree.memory.records import NodeStatus
from revtree.orchestrator import Orchestrator, create_run
from revtree.orchestrator.commands.report import summarize
from revtree.sandboxes.local import LocalSandbox
from revtree.tasks import load_task

sys.path.insert(0, str(Path(__file__).resolve().parent))  # runnable as a plain script
from overhead import sleep_task

console = Console(width=160)


def db_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


def checkpoint_bytes(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        try:
            rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
        except sqlite3.OperationalError:  # no dbstat in this SQLite build
            return -1
    return sum(size for name, size in rows if "checkpoint" in name or name.startswith("writes"))


def median_ms(fn: Callable[[], object], n: int = 3) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def grow(store: Store, run_id: str, total: int) -> None:
    """Add copies of the run's nodes (fresh ids, same commits) until it has ``total``."""
    nodes = store.nodes(run_id)
    evals = {e.node_id: e for e in store.evaluations(run_id)}
    next_id, batch, batch_evals = max(n.id for n in nodes) + 1, [], []
    template = [n for n in nodes if n.status is NodeStatus.SUCCEEDED and n.id in evals]
    while next_id < total:
        src = template[next_id % len(template)]
        node = dataclasses.replace(
            src, id=next_id, parent_id=src.parent_id or 0, thread_id=f"copy-{next_id}"
        )
        batch.append(node)
        batch_evals.append(dataclasses.replace(evals[src.id], node_id=next_id))
        next_id += 1
        if len(batch) == 2000 or next_id == total:
            store.copy_history(run_id, batch, batch_evals, ("run", f"grown to {next_id}", None))
            batch, batch_evals = [], []


def timings(store: Store, run_id: str, home: Path) -> dict[str, float]:
    run = store.get_run(run_id)

    def resume_startup() -> None:
        Orchestrator(store, run_id, home=home, sandbox=LocalSandbox()).close()

    return {
        "show": median_ms(lambda: summarize(store, run, with_nodes=True)),
        "watch": median_ms(lambda: store.events_since(run_id, 0, 1000)),
        "resume": median_ms(resume_startup),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--big", type=int, default=10000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="revtree-storage-") as d:
        tmp = Path(d)
        home, db = tmp / "home", tmp / "home" / "revtree.db"
        store = Store(f"sqlite:///{db}")
        spec = load_task(sleep_task(tmp / "task", 0.0, args.nodes, 2))
        run = create_run(store, spec, home)
        t0 = time.monotonic()
        Orchestrator(store, run.id, home=home, sandbox=LocalSandbox(home / "work")).drive()
        wall = time.monotonic() - t0
        n = len(store.nodes(run.id))
        before, cp_before = db_bytes(db), checkpoint_bytes(db)
        removed = gc(store)
        after, cp_after = db_bytes(db), checkpoint_bytes(db)
        size = Table(
            "",
            "bytes",
            "bytes / node",
            "checkpoints (bytes)",
            title=f"database after a real run of {n} nodes ({wall:.0f} s)",
        )
        size.add_row("before gc", f"{before:,}", f"{before / n:,.0f}", f"{cp_before:,}")
        size.add_row("after gc", f"{after:,}", f"{after / n:,.0f}", f"{cp_after:,}")
        console.print(size)
        console.print(
            f"gc removed {removed.get('checkpoints', 0)} checkpoints and "
            f"{removed.get('writes', 0)} writes of {removed.get('threads', 0)} threads"
        )
        small = timings(store, run.id, home)
        grow(store, run.id, args.big)
        big = timings(store, run.id, home)
        table = Table(
            "operation",
            f"{n} nodes (ms)",
            f"{args.big} nodes (ms)",
            "ratio",
            title="start-up times (median of 3)",
        )
        for key in ("show", "watch", "resume"):
            table.add_row(
                key, f"{small[key]:.1f}", f"{big[key]:.1f}", f"{big[key] / small[key]:.1f}x"
            )
        console.print(table)
        store.close()


if __name__ == "__main__":
    main()
