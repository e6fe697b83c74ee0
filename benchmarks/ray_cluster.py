"""Steady state on a local Ray cluster against the local runner, back to back.

A whole run (offline knob agents, random policy, a 1 s evaluator, 40 candidates,
``parallel`` 4) on a local 4-node Ray cluster (``ray.cluster_utils.Cluster``: a head
without CPUs and 4 raylets of 1 CPU, loopback only, inside ``unshare --net``), and the
same run with the local runner, alternated ``--rounds`` times on this machine. Per run:

- wall: from the orchestrator's start to its end (Ray: joining the cluster and the
  workers' first start included);
- util run: the evaluator's own time (from its first line to its last: the 1 s sleep)
  summed, over wall x slots;
- util steady: the same over the evaluation window, from the first evaluator's start
  to the last one's end (without the run's start: Ray's connection and its workers'
  first start, git and the first proposals; and without its close);
- overhead/cand: slot time in that window not spent in the evaluator, per candidate
  ((window x slots - evaluator time) / candidates): what each candidate costs on top
  of its evaluation (proposal, git commit, archive, transport, sandbox and interpreter
  start and exit, recording, and the wait for a slot to be refilled);
- gap (Ray only, where each raylet is one slot): the median time a raylet sat between
  one evaluator's end and the next one's start;
- eval s: the mean duration of one evaluation as its sandbox timed it (the sleep plus
  the interpreter's start and exit).

    python benchmarks/ray_cluster.py [--rounds 2] [--candidates 40] [--slots 4] [--sleep 1]

It needs Ray (``pip install -e '.[ray]'``) and ``unshare --net`` (root, or user
namespaces); without them it says why and measures the local runner only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.sandboxes.test_ray import cluster_problem  # noqa: E402


def scenario(name: str, work: Path, shape: dict[str, str], netns: bool) -> dict[str, Any]:
    work.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("REVTREE_DB", "RAY_ADDRESS")}
    env.update(REVTREE_SANDBOX="local", PYTHONUNBUFFERED="1", **shape)
    cmd = [sys.executable, "-m", "tests.sandboxes.ray_scenarios", name, str(work)]
    if netns:
        script = 'ip link set lo up && exec "$0" -m tests.sandboxes.ray_scenarios "$1" "$2"'
        cmd = ["unshare", "--net", "sh", "-c", script, sys.executable, name, str(work)]
    log = work / "scenario.log"
    with log.open("w") as out:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"{name} failed ({rc}):\n{log.read_text()[-4000:]}")
    result: dict[str, Any] = json.loads((work / "result.json").read_text())
    return result


def measure(out: dict[str, Any], slots: int) -> dict[str, float]:
    evals = [e for e in out["evaluations"] if e["t0"] is not None]
    assert out["status"] == "completed" and out["max_count"] == 1, out["reason"]
    work = sum(e["t1"] - e["t0"] for e in evals)
    window = max(e["t1"] for e in evals) - min(e["t0"] for e in evals)
    gaps = []  # per slot: from one evaluation's end to the next one's start there
    by_host: dict[str, list[dict[str, Any]]] = {}
    for e in evals:
        by_host.setdefault(e["host"] or "local", []).append(e)
    for spans in by_host.values():
        spans.sort(key=lambda e: e["t0"])
        gaps += [b["t0"] - a["t1"] for a, b in itertools.pairwise(spans)]
    return {
        "candidates": len(evals),
        "wall": out["wall"],
        "util_run": work / (out["wall"] * slots),
        "util_steady": work / (window * slots),
        "overhead_ms": 1000 * (window * slots - work) / len(evals),
        "gap_ms": 1000 * statistics.median(gaps) if gaps and len(by_host) > 1 else float("nan"),
        "eval_s": statistics.mean(e["duration"] for e in evals),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--candidates", type=int, default=40, help="nodes, the root included")
    ap.add_argument("--slots", type=int, default=4, help="parallel, and raylets of 1 CPU")
    ap.add_argument("--sleep", type=float, default=1.0, help="seconds per evaluation")
    args = ap.parse_args()
    shape = {
        "BENCH_NODES": str(args.candidates),
        "BENCH_SLOTS": str(args.slots),
        "BENCH_SLEEP": str(args.sleep),
    }
    problem = cluster_problem()
    if problem is not None:
        print(f"no Ray cluster here: {problem}; the local runner only")
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="revtree-bench-") as tmp:
        for r in range(args.rounds):
            for name, runner, netns in (("bench_local", "local", False), ("bench", "ray", True)):
                if netns and problem is not None:
                    continue
                out = scenario(name, Path(tmp) / f"{name}-{r}", shape, netns)
                rows.append((runner, measure(out, args.slots)))
                print(f"round {r + 1}: {runner} done", file=sys.stderr, flush=True)
    print(
        f"\n{args.candidates} nodes, parallel {args.slots}, a {args.sleep:g} s evaluator, "
        f"{os.cpu_count()} CPUs; Ray: head 0 CPU + {args.slots} raylets x 1 CPU\n"
    )
    head = f"{'runner':<7}{'wall s':>8}{'util run':>10}{'util steady':>13}"
    print(head + f"{'overhead/cand':>15}{'gap':>9}{'eval s':>8}")
    for runner, m in rows:
        print(
            f"{runner:<7}{m['wall']:>8.1f}{m['util_run']:>10.3f}{m['util_steady']:>13.3f}"
            f"{m['overhead_ms']:>12.0f} ms{m['gap_ms']:>6.0f} ms{m['eval_s']:>8.3f}"
        )


if __name__ == "__main__":
    main()
