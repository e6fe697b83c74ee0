"""Sandbox start latency (cold container, warm pool, local process) and the overhead of a
whole run with --sandbox docker against --sandbox local.

    python benchmarks/sandbox_start.py [--n 50] [--nodes 8] [--rounds 1]

Start latency is the wall time of ``execute`` for the command ``true`` (workspace in,
process run, result and metrics out; removal runs in the background), p50 and p95 over
``--n`` runs. "docker warm pool" waits for a full pool before each run (the steady
state of a run whose evaluations outlast a container start). The run overhead drives
the same trivial task (an evaluator sleeping 0.5 s, parallel 1) in-process with each
sandbox object (a new one per run, its pool full at the start; the run closes it, and
its wall time includes that) and reports wall time per candidate, the median of
``--rounds`` runs (the backends interleaved, so that a change of load hits them
alike). Ratios are
against the local backend measured in the same process. Tables carry the host's
1-minute load average (start → end): on a shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from revtree.memory import Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.sandboxes import ExecRequest, Limits, Sandbox
from revtree.sandboxes.docker import DockerSandbox

sys.path.insert(0, str(Path(__file__).resolve().parent))  # runnable as a plain script
from overhead import sleep_task

from revtree.sandboxes.local import LocalSandbox
from revtree.tasks import load_task
from revtree.tasks.spec import SandboxConfig

console = Console()


def starts(box: Sandbox, n: int, warm: bool = False) -> list[float]:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("evaluate.py")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"\n"))
    limits = Limits(timeout=30, memory_bytes=SandboxConfig().memory)
    out = []
    for _ in range(n):
        if warm:
            assert isinstance(box, DockerSandbox) and box.warm_ready(60)
        t0 = time.monotonic()
        box.execute(ExecRequest(buf.getvalue(), "true", limits))
        out.append((time.monotonic() - t0) * 1000)
    return out


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1] if len(xs) > 1 else xs[0]


def run_wall(tmp: Path, box: Sandbox, name: str, nodes: int) -> float:
    home = tmp / f"home-{name}"
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    spec = load_task(sleep_task(tmp / f"task-{name}", 0.5, nodes, 1))
    run = create_run(store, spec, home)
    t0 = time.monotonic()
    Orchestrator(store, run.id, home=home, sandbox=box).drive()
    wall = time.monotonic() - t0
    n = len(store.nodes(run.id))
    store.close()
    return wall / n * 1000


BACKENDS: dict[str, Callable[[Path], Sandbox]] = {
    "local": lambda tmp: LocalSandbox(tmp / "local"),
    "docker cold": lambda tmp: DockerSandbox(SandboxConfig(warm_pool=0)),
    "docker warm pool": lambda tmp: DockerSandbox(SandboxConfig(warm_pool=2)),
}


def fresh(name: str, tmp: Path) -> Sandbox:
    """A new sandbox of backend ``name``, its warm pool full (the steady state)."""
    box = BACKENDS[name](tmp)
    if isinstance(box, DockerSandbox):
        box.warm_ready(60)
    return box


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report(Path(tmp), args.n, args.nodes, args.rounds)


def report(tmp: Path, n: int, nodes: int, rounds: int) -> None:
    """Print the start-latency table, then the whole-run table. Each run gets a new
    sandbox (a run closes its sandbox at the end: its wall time includes that)."""
    before, rows = load(), {}
    for name in BACKENDS:
        box = fresh(name, tmp)
        try:
            rows[name] = starts(box, n, warm="warm" in name)
        finally:
            box.close()
    table = Table(title=f"sandbox start latency, {n} runs of `true`, load {before} → {load()}")
    for col in ("backend", "p50 ms", "p95 ms", "p50 / local"):
        table.add_column(col)
    base = pct(rows["local"], 50)
    for name, xs in rows.items():
        p50 = pct(xs, 50)
        table.add_row(name, f"{p50:.1f}", f"{pct(xs, 95):.1f}", f"{p50 / base:.2f}x")
    console.print(table)
    before = load()
    runs: dict[str, list[float]] = {name: [] for name in BACKENDS}
    for r in range(rounds):
        for name in BACKENDS:
            box = fresh(name, tmp)
            try:
                runs[name].append(run_wall(tmp, box, f"{name.replace(' ', '-')}-{r}", nodes))
            finally:
                box.close()
    walls = {name: statistics.median(xs) for name, xs in runs.items()}
    title = f"whole run, evaluator sleeps 0.5 s, {nodes} nodes, parallel 1, median of {rounds}"
    t2 = Table(title=f"{title}, load {before} → {load()}")
    for col in ("sandbox", "ms / candidate", "ratio to local"):
        t2.add_column(col)
    for name, v in walls.items():
        t2.add_row(name, f"{v:.0f}", f"{v / walls['local']:.2f}x")
    console.print(t2)


if __name__ == "__main__":
    main()
