"""The dashboard's server side: page data for big runs, and the live stream's throughput.

    python benchmarks/dashboard.py [--sizes 1000,10000] [--seconds 5]

1. Page data: builds runs of each size in a fresh SQLite store (nodes and evaluations
   inserted in bulk, as a fork copies history), starts a real dashboard server on
   127.0.0.1 and times what opening a run asks for, ``GET /api/runs/ID`` plus
   ``GET /api/runs/ID/nodes``, over HTTP: *cold* (the run just changed, so its summary
   is computed again) and *warm* (the summary cached). The baseline reads the same data
   straight from the Store, in process, as ``revtree show --json`` does
   (``summarize(store, run)`` plus ``store.nodes(run)``). Medians of 5.
2. Stream: a writer process adds events to a run at 50/s, then flat out, for
   ``--seconds`` each; a client reads ``/api/runs/ID/stream`` over HTTP until ``end``.
   Reported: events/s written, events/s delivered, the delivery lag (receipt time minus
   the event's timestamp, median and max) and whether every event arrived once, in
   order. The baseline is a reader polling ``Store.events_since`` directly at the same
   0.2 s cadence (what ``revtree watch`` does), run back to back with the same writer.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from revtree.memory import Store
from revtree.memory.records import EvalResult, Node, NodeStatus, RunStatus
from revtree.orchestrator.commands.report import summarize
from revtree.tasks import load_task
from revtree.web import Dashboard

sys.path.insert(0, str(Path(__file__).resolve().parent))  # runnable as a plain script
from overhead import sleep_task

console = Console(width=160)


def median_ms(
    fn: Callable[[], object], n: int = 5, before: Callable[[], object] | None = None
) -> float:
    times = []
    for _ in range(n):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def big_run(store: Store, spec: dict[str, Any], run_id: str, n: int) -> None:
    """A finished run of ``n`` nodes: a random tree, 80% succeeded, one evaluation each."""
    store.create_run(run_id, "sleep", "greedy", "maximize", 7, spec)
    rng, now = random.Random(n), time.time()
    nodes, evals = [], []
    for i in range(n):
        parent = None if i == 0 else rng.randrange(max(0, i - 200), i)
        ok = i == 0 or rng.random() > 0.2
        score = rng.random() if ok else None
        nodes.append(
            Node(
                run_id, i, parent, "improve" if i else "baseline",
                NodeStatus.SUCCEEDED if ok else NodeStatus.FAILED,
                depth=0 if parent is None else nodes[parent].depth + 1,
                commit=f"{i:040x}", score=score, n_evals=1,
                proposal={"hypothesis": f"candidate {i}: " + "try a change " * 12, "knobs": {}},
                error=None if ok else "exit 1", error_kind=None if ok else "crash",
                created_at=now + i * 0.01, finished_at=now + i * 0.01 + 0.005,
                lesson=f"lesson of node {i} " * 5,
            )
        )  # fmt: skip
        evals.append(EvalResult(i, "full", 0, ok, score, {"score": score}, 0, 0.5, "out", "err"))
    for k in range(0, n, 2000):
        store.copy_history(run_id, nodes[k : k + 2000], evals[k : k + 2000], ("run", "bulk", None))
    store.update_run(run_id, ("run", "run completed", None), status=RunStatus.COMPLETED)


def page_data(store: Store, dash: Dashboard, spec: dict[str, Any], sizes: list[int]) -> Table:
    table = Table(
        "nodes",
        "HTTP cold (ms)",
        "HTTP warm (ms)",
        "Store direct (ms)",
        "cold / direct",
        "nodes JSON (KB)",
        title="page data: GET /api/runs/ID + /api/runs/ID/nodes",
    )
    http = httpx.Client(base_url=dash.base, timeout=60)
    for n in sizes:
        run_id = f"big-{n}"
        big_run(store, spec, run_id, n)

        def fetch(rid: str = run_id) -> int:
            a = http.get(f"/api/runs/{rid}")
            b = http.get(f"/api/runs/{rid}/nodes")
            assert a.status_code == b.status_code == 200, (a.text[:200], b.text[:200])
            return len(b.content)

        def touch(rid: str = run_id) -> None:  # the run moves: its cached summary is stale
            store.add_event(rid, "bench", "a change", None)

        def direct(rid: str = run_id) -> None:
            summarize(store, store.get_run(rid))
            store.nodes(rid)

        size = fetch()
        cold = median_ms(fetch, before=touch)
        warm = median_ms(fetch)
        base = median_ms(direct)
        table.add_row(
            f"{n:,}", f"{cold:.0f}", f"{warm:.0f}", f"{base:.0f}", f"{cold / base:.2f}",
            f"{size / 1024:.0f}",
        )  # fmt: skip
    return table


def writer(db: str, run_id: str, rate: float, seconds: float, done: Any) -> None:
    """Add events at ``rate`` per second (0: flat out) for ``seconds``, then finish."""
    store = Store(db)
    t0 = time.monotonic()
    k = 0
    while (now := time.monotonic()) - t0 < seconds:
        if rate and k >= (now - t0) * rate:
            time.sleep(max(0.0, t0 + k / rate - now))
            continue
        store.add_event(run_id, "bench", f"event {k}", None, {"k": k})
        k += 1
    done.value = k / (time.monotonic() - t0)
    store.update_run(run_id, ("run", "run completed", None), status=RunStatus.COMPLETED)


def read_sse(dash: Dashboard, run_id: str, got: list[tuple[int, float, float]]) -> None:
    with (
        httpx.Client(base_url=dash.base, timeout=60) as c,
        c.stream("GET", f"/api/runs/{run_id}/stream?after=0") as r,
    ):
        event = None
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
                if event == "end":
                    return
            elif line.startswith("data:") and event == "log":
                ev = json.loads(line[5:])
                got.append((ev["seq"], ev["ts"], time.time()))


def read_direct(store: Store, run_id: str, got: list[tuple[int, float, float]]) -> None:
    seq = 0
    while True:
        finished = store.get_run(run_id).status.is_finished()
        batch = store.events_since(run_id, seq, 500)
        now = time.time()
        got.extend((e.seq, e.ts, now) for e in batch)
        if batch:
            seq = batch[-1].seq
        if len(batch) == 500:
            continue
        if finished:
            return
        time.sleep(0.2)


def stream_row(
    store: Store, dash: Dashboard, spec: dict[str, Any], rate: float, seconds: float, how: str
) -> list[str]:
    run_id = f"stream-{how}-{rate or 'max'}"
    store.create_run(run_id, "sleep", "greedy", "maximize", 7, spec)
    got: list[tuple[int, float, float]] = []
    if how == "SSE":
        target: Callable[[], None] = lambda: read_sse(dash, run_id, got)  # noqa: E731
    else:
        target = lambda: read_direct(store, run_id, got)  # noqa: E731
    reader = threading.Thread(target=target, daemon=True)
    reader.start()
    time.sleep(0.5)  # the reader is connected and caught up
    done = multiprocessing.get_context("spawn").Value("d", 0.0)
    proc = multiprocessing.get_context("spawn").Process(
        target=writer, args=(store.url, run_id, rate, seconds, done)
    )
    proc.start()
    proc.join(seconds + 60)
    reader.join(60)
    assert not reader.is_alive(), f"{how} reader did not see the end"
    mine = got[1:]  # the writer's events (the first is the run's creation)
    elapsed = max(t[2] for t in mine) - min(t[1] for t in mine) if mine else float("nan")
    every = [t[0] for t in got] == [e.seq for e in store.events_since(run_id, 0, 10**6)]
    lags = [(recv - ts) * 1000 for _, ts, recv in mine]
    return [
        how,
        "50/s" if rate else "flat out",
        f"{done.value:.0f}",
        f"{len(mine) / elapsed:.0f}",
        f"{statistics.median(lags):.0f}" if lags else "-",
        f"{max(lags):.0f}" if lags else "-",
        "yes" if every else "NO",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="revtree-dashboard-") as d:
        tmp = Path(d)
        home = tmp / "home"
        home.mkdir()
        db = f"sqlite:///{home / 'revtree.db'}"
        store = Store(db)
        spec = load_task(sleep_task(tmp / "task", 0.0, 10**6, 1)).model_dump(mode="json")
        dash = Dashboard(db, "127.0.0.1", 0, token="bench", home=home)
        dash.start()
        try:
            console.print(page_data(store, dash, spec, sizes))
            table = Table(
                "reader",
                "writer",
                "written (ev/s)",
                "delivered (ev/s)",
                "lag p50 (ms)",
                "lag max (ms)",
                "all, in order",
                title=f"live log: {args.seconds:g} s of events per row",
            )
            for rate in (50.0, 0.0):
                for how in ("SSE", "Store direct"):
                    table.add_row(*stream_row(store, dash, spec, rate, args.seconds, how))
            console.print(table)
        finally:
            dash.stop()
            store.close()


if __name__ == "__main__":
    main()
