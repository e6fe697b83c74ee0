"""One evaluation's cost in the local sandbox, today's tree against a baseline revision.

    python benchmarks/evaluation.py [--n 200] [--rounds 3] [--baseline fd38c7d]
                                    [--folder PATH]

The task is an OpenEvolve folder (``initial_program.py``, an ``evaluator.py`` that
scores ``-(A - 3)^2`` at once: what ``peer.py`` runs at S = 0; or ``--folder``, any
OpenEvolve folder, such as one of OpenEvolve's own examples), evaluated N times in a
row through ``Evaluator.evaluate`` and the ``local`` sandbox (its fork server warm after
the first), in a Python of its own per block. The baseline runs from a git worktree of
``--baseline`` (its modules first on ``PYTHONPATH``), the blocks alternating so that a
change of the machine's load hits both alike. Prints p50, p95 and the minimum of each,
and their ratios. Measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from rich.console import Console
from rich.table import Table
from worktree import worktree

PROGRAM = "# EVOLVE-BLOCK-START\nA = 0.0\n# EVOLVE-BLOCK-END\n\n\ndef value():\n    return A\n"
EVALUATOR = """\
import importlib.util


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("p", program_path)
    p = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(p)
    return {"combined_score": -((p.value() - 3.0) ** 2)}
"""


def child(n: int, source: str | None) -> None:
    """N evaluations with the revtree importable here (of the folder ``source``, else
    the built-in one); their wall times (s) as JSON."""
    from revtree.agents import Evaluator
    from revtree.orchestrator.commands.check import baseline_archive
    from revtree.sandboxes.local import LocalSandbox
    from revtree.tasks import load_task

    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / "task"
        if source is not None:
            shutil.copytree(source, folder)
        else:
            folder.mkdir()
            (folder / "initial_program.py").write_text(PROGRAM)
            (folder / "evaluator.py").write_text(EVALUATOR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec = load_task(folder)
        # the baseline's workspace and the protected files it overlays, as ``revtree
        # check`` makes them (and a run: what the fork server loads and compiles ahead
        # comes from those files)
        archive, protected = baseline_archive(spec, Path(d))
        sandbox = LocalSandbox(Path(d) / "boxes")
        evaluator = Evaluator(spec, sandbox, None, protected)
        times = []
        try:
            for _ in range(n + 1):  # the first starts the fork server: not counted
                t0 = time.perf_counter()
                out = evaluator.evaluate(1, archive, {}, lambda r: None)
                times.append(time.perf_counter() - t0)
                if not out.ok:
                    raise SystemExit(f"the evaluation failed: {out.error}")
        finally:
            sandbox.close()
    print(json.dumps(times[1:]))


def block(n: int, path: str | None, folder: Path | None) -> list[float]:
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = path
    cmd = [sys.executable, __file__, "--child", str(n)]
    cmd += ["--folder", str(folder)] if folder is not None else []
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    return list(json.loads(done.stdout.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="evaluations per block")
    parser.add_argument("--rounds", type=int, default=3, help="blocks of each side")
    parser.add_argument("--baseline", default="fd38c7d", help="a revision of this repository")
    parser.add_argument(
        "--folder", type=Path, help="an OpenEvolve folder to evaluate (default: built in)"
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    folder = args.folder.resolve() if args.folder else None
    if args.child is not None:
        child(args.child, None if folder is None else str(folder))
        return
    with worktree(args.baseline) as tree:
        got: dict[str, list[float]] = {"baseline": [], "today": []}
        for _ in range(args.rounds):
            got["baseline"] += block(args.n, str(tree), folder)
            got["today"] += block(args.n, None, folder)
    what = f", {folder.name}" if folder is not None else ""
    table = Table(title=f"one evaluation{what}, local sandbox, {args.rounds} x {args.n} each (ms)")
    for col in ("tree", "p50", "p95", "min"):
        table.add_column(col)
    stats = {}
    for name, xs in got.items():
        q = statistics.quantiles(xs, n=20)
        stats[name] = (statistics.median(xs), q[18], min(xs))
        table.add_row(
            f"{name} ({args.baseline})" if name == "baseline" else "today",
            *(f"{v * 1000:.2f}" for v in stats[name]),
        )
    ratio = [t / b for t, b in zip(stats["today"], stats["baseline"], strict=True)]
    table.add_row("today / baseline", *(f"{r:.2f}" for r in ratio))
    Console().print(table)


if __name__ == "__main__":
    main()
