"""Start latency of the local sandbox against its pre-supervisor version, back to back.

    python benchmarks/local_start.py [--n 60] [--baseline 9e8ca1a]

Each round runs ``execute`` of ``true`` once with today's LocalSandbox (a subreaper
supervisor, metrics on descriptor 3, /dev/shm swept) and once with the LocalSandbox of
commit ``--baseline`` (a bare process group), loaded from git history, interleaved so
that a change of the machine's load hits both alike. Prints p50 and p95 of each and
their ratio, with the 1-minute load average (start → end).
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from revtree.sandboxes import ExecRequest, Limits
from revtree.sandboxes.local import LocalSandbox

ROOT = Path(__file__).resolve().parent.parent


def baseline_class(commit: str) -> Any:
    """``LocalSandbox`` as it was at ``commit`` (its module loaded from git)."""
    source = subprocess.run(
        ["git", "show", f"{commit}:revtree/sandboxes/local.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_local.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_local", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LocalSandbox


def archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"print('hi')\n"
        info = tarfile.TarInfo("main.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--baseline", default="9e8ca1a")
    args = ap.parse_args()
    boxes = {"today": LocalSandbox(), f"baseline {args.baseline}": baseline_class(args.baseline)()}
    request = ExecRequest(archive(), "true", Limits(timeout=30))
    times: dict[str, list[float]] = {k: [] for k in boxes}
    load0 = os.getloadavg()[0]
    for _ in range(args.n):
        for name, box in boxes.items():
            t0 = time.perf_counter()
            box.execute(request)
            times[name].append(time.perf_counter() - t0)
    load1 = os.getloadavg()[0]
    table = Table(
        title=f"local sandbox start, execute(true), n={args.n}, load {load0:.1f} → {load1:.1f}"
    )
    for col in ("sandbox", "p50 ms", "p95 ms", "p50 ratio"):
        table.add_column(col)
    base = statistics.median(times[f"baseline {args.baseline}"])
    for name, ts in times.items():
        p50, p95 = statistics.median(ts), statistics.quantiles(ts, n=20)[18]
        table.add_row(name, f"{p50 * 1000:.1f}", f"{p95 * 1000:.1f}", f"{p50 / base:.2f}")
    Console().print(table)


if __name__ == "__main__":
    sys.exit(main())
