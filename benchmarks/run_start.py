"""How long ``revtree run`` takes, as a user types it, to send its first proposal to a
model that answers after a latency, against an earlier commit and OpenEvolve's
``openevolve-run``, back to back.

    python benchmarks/run_start.py [--reps 5] [--latency 0 0.5 1] [--baseline d7df1fe]
                                   [--cache ~/.cache/revtree-bench]

One OpenEvolve-format folder (``benchmarks/peer.py``'s: S = 0, one candidate) and one
fake OpenAI-compatible server in a process of its own that answers every request after
``--latency`` seconds, as a hosted model does. Per round, interleaved: ``python -m
revtree run FOLDER --model ... --base-url ... --budget-nodes 2 --sandbox local
--quiet`` with this tree and with the tree of ``--baseline`` (a git worktree; each put
first on PYTHONPATH; the default is the commit before the model check overlapped the
imports), and ``openevolve-run`` where ``peer.py`` installed it under
``--cache``. Per latency, the median over the rounds of:

- model check: from the command's start to revtree's call of one token that checks its
  model before a run is created (OpenEvolve makes none);
- 1st proposal: from the command's start to the first request that asks for a program
  (revtree evaluates the baseline beside it; OpenEvolve evaluates its initial program
  first). The fake answers a review prompt with a program too, so the rest of the run
  is not timed.

Measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))  # peer.py, beside this file
import peer
from worktree import ROOT, worktree

from revtree.agents.llm.fake_server import FakeRequest

SLOTS = 64  # requests whose arrival times a server keeps


class Timed:
    """``peer.Model``'s answers after ``latency`` seconds, noting when each request came
    (wall-clock seconds, in memory shared with the benchmark) and whether it asked for a
    program (not revtree's check of one token)."""

    def __init__(self, latency: float, times: Any, asks: Any, n: Any) -> None:
        self.model, self.latency = peer.Model(7), latency
        self.times, self.asks, self.n = times, asks, n

    def __call__(self, req: FakeRequest) -> str:
        with self.n.get_lock():
            i = self.n.value
            self.n.value += 1
        if i < SLOTS:
            self.times[i] = time.time()
            self.asks[i] = int(req.body.get("max_tokens") != 1)
        time.sleep(self.latency)
        return self.model(req)


@contextlib.contextmanager
def served(latency: float) -> Iterator[tuple[str, Timed]]:
    """The fake server (``peer.forked_server``) answering after ``latency``: its URL and
    the responder, whose notes the benchmark reads."""
    ctx = multiprocessing.get_context("fork")
    responder = Timed(latency, ctx.Array("d", SLOTS), ctx.Array("i", SLOTS), ctx.Value("i", 0))
    with peer.forked_server(responder) as url:
        yield url, responder


def arrivals(responder: Timed, since: float) -> tuple[float, float]:
    """Seconds from ``since`` to the first request since then that checked the model (one
    token; NaN for OpenEvolve, which makes none) and to the first that asked for a
    program."""
    n = min(responder.n.value, SLOTS)
    since_then = [i for i in range(n) if responder.times[i] >= since]
    first = {
        ask: min((responder.times[i] - since for i in since_then if responder.asks[i] == ask),
                 default=float("nan"))
        for ask in (0, 1)
    }  # fmt: skip
    return first[0], first[1]


def run_one(
    cmd: list[str], env: dict[str, str], cwd: Path, responder: Timed
) -> tuple[float, float]:
    """One command (in ``cwd``: ``python -m`` puts its folder first on the path, before
    PYTHONPATH): seconds to its model check and to its first proposal."""
    t0 = time.time()
    out = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return arrivals(responder, t0)


def _secs(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.5, 1.0])
    ap.add_argument("--baseline", default="d7df1fe")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "revtree-bench")
    args = ap.parse_args()
    oe_run = args.cache / f"openevolve-{peer.OE_VERSION}" / "bin" / "openevolve-run"
    rev = subprocess.run(
        ["git", "rev-parse", "--short", args.baseline], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    table = Table(
        "latency (s)", "system", "model check (s)", "1st proposal (s)", title="revtree run: start"
    )
    with tempfile.TemporaryDirectory() as tmp_name, worktree(rev) as old:
        tmp = Path(tmp_name)
        for latency in args.latency:
            rows = measure(tmp / f"l{latency}", latency, old, oe_run, args.reps)
            for name, got in rows.items():
                checks, firsts = zip(*got, strict=True)
                table.add_row(
                    f"{latency:g}",
                    name.replace("BASELINE", rev),
                    _secs(statistics.median(checks)),
                    _secs(statistics.median(firsts)),
                )
    load = os.getloadavg()[0]
    Console(width=120).print(table, f"reps {args.reps} per cell; 1-minute load {load:.2f}")


def measure(
    tmp: Path, latency: float, old: Path, oe_run: Path, reps: int
) -> dict[str, list[tuple[float, float]]]:
    rows: dict[str, list[tuple[float, float]]] = {"revtree (this tree)": [], "BASELINE": []}
    if oe_run.exists():
        rows["openevolve-run"] = []
    with served(latency) as (url, responder):
        folder = peer.make_folder(tmp / "task", 0.0, 1, 1, url)
        model = ["--model", "openai-compatible:fake-model", "--base-url", url]
        for i in range(reps):
            for name in rows:
                home = tmp / f"home-{i}-{len(rows[name])}-{name[:3]}"
                env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
                env |= {"HOME": str(home), "REVTREE_HOME": str(home), "OPENAI_API_KEY": "x"}
                if name == "openevolve-run":
                    cmd = [str(oe_run), str(folder / "initial_program.py")]
                    cmd += [str(folder / "evaluator.py"), "--config", str(folder / "config.yaml")]
                    cmd += ["--iterations", "1", "--output", str(home / "out")]
                else:
                    env["PYTHONPATH"] = str(old if name == "BASELINE" else ROOT)
                    cmd = [sys.executable, "-m", "revtree", "run", str(folder), *model]
                    cmd += ["--budget-nodes", "2", "--sandbox", "local", "--quiet"]
                rows[name].append(run_one(cmd, env, tmp, responder))
    return rows


if __name__ == "__main__":
    main()
