"""Start cost of the namespace sandbox (bwrap) against today's local backend and Docker.

    python benchmarks/namespace_start.py [--n 40]

The wall time of ``execute`` for a trivial evaluation, ``python -c pass`` (workspace in,
process run, result and metrics out), p50 and p95 over ``--n`` runs per backend, the
backends interleaved run by run so that a change of load hits them alike. Docker rows
appear where an engine answers and has the evaluation image (``docker images``):
"docker cold" starts a container per evaluation, "docker warm pool" waits for a full
pool before each (the steady state of a run). The title carries the host's 1-minute
load average (start → end): on a shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from revtree.sandboxes import ExecRequest, Limits, Sandbox
from revtree.sandboxes.base import archive_of
from revtree.sandboxes.bwrap import BwrapSandbox, enforced, usable
from revtree.sandboxes.local import LocalSandbox
from revtree.tasks.spec import SandboxConfig

ARCHIVE = archive_of({"evaluate.py": b"\n"})


def docker_backends() -> dict[str, Callable[[Path], Sandbox]]:
    """The Docker rows, where an engine answers and has the evaluation image."""
    try:
        from revtree.sandboxes.docker import DockerSandbox, engine_answers
        from revtree.sandboxes.images import default_image, image_exists
    except ImportError:
        return {}
    client = engine_answers()
    if client is None:
        return {}
    try:
        if not image_exists(client, default_image(client)):
            return {}
    finally:
        client.close()
    return {
        "docker cold": lambda tmp: DockerSandbox(SandboxConfig(warm_pool=0)),
        "docker warm pool": lambda tmp: DockerSandbox(SandboxConfig(warm_pool=2)),
    }


def one(box: Sandbox, warm: bool) -> float:
    if warm:
        box.warm_ready(60)  # type: ignore[attr-defined]  # DockerSandbox's
    limits = Limits(timeout=30, memory_bytes=SandboxConfig().memory)
    t0 = time.monotonic()
    result = box.execute(ExecRequest(ARCHIVE, "python -c pass", limits))
    ms = (time.monotonic() - t0) * 1000
    assert result.exit_code == 0, result.stderr
    return ms


def pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100)[q - 1] if len(xs) > 1 else xs[0]


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40)
    n = ap.parse_args().n
    backends: dict[str, Callable[[Path], Sandbox]] = {
        "local (today)": lambda tmp: LocalSandbox(tmp / "local"),
    }
    if (why := usable()) is None:
        backends["bwrap (namespaces)"] = lambda tmp: BwrapSandbox(tmp / "bwrap")
    else:
        print(f"no bwrap row: {why}")
    backends.update(docker_backends())
    before = load()
    with tempfile.TemporaryDirectory() as tmp:
        boxes = {name: make(Path(tmp)) for name, make in backends.items()}
        times: dict[str, list[float]] = {name: [] for name in boxes}
        try:
            for name, box in boxes.items():
                one(box, "warm" in name)  # a first run each, not counted (imports, image checks)
            for _ in range(n):
                for name, box in boxes.items():
                    times[name].append(one(box, "warm" in name))
        finally:
            for box in boxes.values():
                box.close()
    title = f"start cost of `python -c pass`, {n} runs each, load {before} → {load()}"
    table = Table(title=title)
    for col in ("backend", "p50 ms", "p95 ms", "p50 / bwrap"):
        table.add_column(col)
    ref = pct(times.get("bwrap (namespaces)") or times["local (today)"], 50)
    for name, xs in times.items():
        p50 = pct(xs, 50)
        table.add_row(name, f"{p50:.1f}", f"{pct(xs, 95):.1f}", f"{p50 / ref:.2f}x")
    Console().print(table)
    if usable() is None:
        print(enforced())


if __name__ == "__main__":
    main()
