"""Search policies on synthetic research landscapes: quality, speed, determinism.

    python benchmarks/policies.py [--quick | --full] [--seeds N] [--jobs J] [--out DIR]

Part 1 drives every policy directly against the simulated landscapes of
:mod:`revtree.orchestrator.policies.sim` (deceptive, narrow_band, noisy, deep,
wide_shallow, failure_prone), with ``Tree.of`` snapshots as the orchestrator builds
them, one candidate in flight. The score of a run is the *true* quality of the node it
reports as best (best observed mean), normalised: 0 = the baseline, 1 = the optimum.
It prints the mean with a 95% CI (1.96 standard errors over seeds) per policy, task and
budget, and the suite mean per policy at budgets <= 100, and checks the issue's target
(exts or bgmcts >= the best of greedy, mcts and evolution). Default: 10 seeds, budgets
25/50/100; --full adds 200 (and --seeds more); --quick: 3 seeds, budgets 25/50.

Part 2 times ``select`` + ``update`` on trees of 1k, 10k and 100k nodes (a random
recursive tree, scores a random walk, 10% failures): the policy is built, its index
built once from the snapshot (reported as "load"), then each round extends the
snapshot by one finished node (``Tree.extend``, reported separately) and times one
select and one update. Part 3 checks that the same seed gives the same tree.

Writes ``policies.csv`` (every run) and, when matplotlib is importable, ``policies.png``.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from rich.console import Console
from rich.table import Table

from revtree.memory.records import Node, NodeStatus
from revtree.orchestrator.policies import POLICIES, Policy, make_policy
from revtree.orchestrator.policies.sim import LANDSCAPES, Simulator
from revtree.orchestrator.tree import Tree
from revtree.tasks.spec import SearchConfig

NAMES = ["greedy", "random", "optuna", "mcts", "evolution", "bgmcts", "exts"]
BASELINES, NEW = ("greedy", "mcts", "evolution"), ("bgmcts", "exts")
console = Console(width=150)


def build(name: str, seed: int) -> Policy:
    return make_policy(TypeAdapter(SearchConfig).validate_python({"policy": name, "seed": seed}))


def one(args: tuple[str, str, int, int]) -> tuple[str, str, int, int, float]:
    name, land_name, budget, seed = args
    land = next(x for x in LANDSCAPES if x.name == land_name)
    run = Simulator(land, seed, budget).run(build(name, seed))
    return name, land_name, budget, seed, run.best_quality(True)


def ci(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return mean, half


def quality(budgets: list[int], seeds: int, jobs: int, out: Path) -> list[tuple[Any, ...]]:
    grid = [
        (p, x.name, b, s) for p in NAMES for x in LANDSCAPES for b in budgets for s in range(seeds)
    ]
    with ProcessPoolExecutor(jobs) as pool:
        rows = list(pool.map(one, grid, chunksize=8))
    with (out / "policies.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "landscape", "budget", "seed", "normalised_best"])
        w.writerows(rows)
    by: dict[tuple[str, str, int], list[float]] = {}
    for p, x, b, _, v in rows:
        by.setdefault((p, x, b), []).append(v)
    for b in budgets:
        t = Table(title=f"normalised best (0 = baseline, 1 = optimum), budget {b}, {seeds} seeds")
        t.add_column("policy")
        for x in LANDSCAPES:
            t.add_column(x.name, justify="right")
        t.add_column("mean", justify="right")
        for p in NAMES:
            cells = [ci(by[p, x.name, b]) for x in LANDSCAPES]
            mean = statistics.fmean(m for m, _ in cells)
            t.add_row(p, *(f"{m:.3f}±{h:.3f}" for m, h in cells), f"{mean:.3f}")
        console.print(t)
    small = [b for b in budgets if b <= 100]
    suite = {
        p: statistics.fmean(statistics.fmean(by[p, x.name, b]) for x in LANDSCAPES for b in small)
        for p in NAMES
    }
    t = Table(title=f"suite mean at budgets {small}")
    t.add_column("policy")
    t.add_column("mean normalised best", justify="right")
    for p in sorted(NAMES, key=lambda p: -suite[p]):
        t.add_row(p, f"{suite[p]:.3f}")
    console.print(t)
    best_new = max(NEW, key=suite.__getitem__)
    best_old = max(BASELINES, key=suite.__getitem__)
    verdict = "MET" if suite[best_new] >= suite[best_old] else "NOT MET"
    console.print(
        f"target (exts or bgmcts >= best of greedy, mcts, evolution at budgets <= 100): "
        f"{verdict}: {best_new} {suite[best_new]:.3f} vs {best_old} {suite[best_old]:.3f}"
    )
    return rows


def random_tree(n: int, seed: int = 0) -> list[Node]:
    rng = random.Random(seed)
    nodes = [Node("t", 0, None, "baseline", NodeStatus.SUCCEEDED, score=0.0)]
    for i in range(1, n):
        parent = nodes[rng.randrange(i)]
        ok = rng.random() > 0.1
        base = parent.score if parent.score is not None else 0.0
        nodes.append(
            Node(
                "t",
                i,
                parent.id,
                "improve",
                NodeStatus.SUCCEEDED if ok else NodeStatus.FAILED,
                depth=parent.depth + 1,
                score=base + rng.gauss(0, 1) if ok else None,
                error_kind=None if ok else "crash",
                n_evals=1,
            )
        )
    return nodes


def timing(sizes: list[int], rounds: int) -> None:
    t = Table(title="select + update per call, ms (mean over rounds; load = first select)")
    t.add_column("policy")
    for n in sizes:
        t.add_column(f"{n // 1000}k s+u", justify="right")
        t.add_column(f"{n // 1000}k load", justify="right")
    snapshot: dict[int, float] = {}
    results: dict[str, list[str]] = {p: [] for p in NAMES}
    for n in sizes:
        nodes = random_tree(n)
        for p in NAMES:
            tree = Tree.of(nodes, True, 0.5)
            policy = build(p, 0)
            t0 = time.perf_counter()
            choice = policy.select(tree)
            load = time.perf_counter() - t0
            k = rounds if p not in ("greedy", "random") or n <= 10_000 else max(5, rounds // 20)
            spent = ext = 0.0
            rng = random.Random(1)
            for _ in range(k):
                assert choice is not None
                i = len(tree.nodes)
                parent = tree.nodes[choice.parent_id]
                score = (parent.score or 0.0) + rng.gauss(0, 1)
                child = Node(
                    "t", i, parent.id, choice.operator, NodeStatus.SUCCEEDED,
                    depth=parent.depth + 1, score=score, n_evals=1,
                )  # fmt: skip
                t0 = time.perf_counter()
                tree = tree.extend([child])
                t1 = time.perf_counter()
                policy.update(child)
                choice = policy.select(tree)
                t2 = time.perf_counter()
                ext += t1 - t0
                spent += t2 - t1
            results[p] += [f"{1000 * spent / k:.3f}", f"{1000 * load:.1f}"]
            snapshot[n] = 1000 * ext / k
    for p in NAMES:
        t.add_row(p, *results[p])
    console.print(t)
    sizes_txt = ", ".join(f"{n // 1000}k: {snapshot[n]:.2f} ms" for n in sizes)
    build_txt = []
    for n in sizes:
        nodes = random_tree(n)
        t0 = time.perf_counter()
        Tree.of(nodes, True)
        build_txt.append(f"{n // 1000}k: {1000 * (time.perf_counter() - t0):.1f} ms")
    console.print(f"snapshot per select: Tree.extend {sizes_txt}; Tree.of {', '.join(build_txt)}")


def determinism(budget: int) -> None:
    bad = []
    for p in NAMES:
        for land in LANDSCAPES:
            shapes = []
            for _ in range(2):
                run = Simulator(land, 7, budget, parallel=2).run(build(p, 7))
                shapes.append(
                    [(n.id, n.parent_id, n.operator, n.score) for n in run.nodes.values()]
                )
            if shapes[0] != shapes[1]:
                bad.append(f"{p}/{land.name}")
    console.print(
        f"same seed, same tree ({len(NAMES)} policies x {len(LANDSCAPES)} landscapes, parallel 2): "
        + ("OK" if not bad else f"DIFFERS for {bad}")
    )


def plot(rows: list[tuple[Any, ...]], budgets: list[int], out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        console.print("matplotlib is not installed: no policies.png (the CSV has every run)")
        return
    fig, axes = plt.subplots(1, len(LANDSCAPES), figsize=(4 * len(LANDSCAPES), 3.5), sharey=True)
    for ax, land in zip(axes, LANDSCAPES, strict=True):
        for p in NAMES:
            stats = [ci([r[4] for r in rows if r[:3] == (p, land.name, b)]) for b in budgets]
            ax.errorbar(budgets, [m for m, _ in stats], [h for _, h in stats], label=p, capsize=2)
        ax.set_title(land.name)
        ax.set_xscale("log")
        ax.set_xlabel("budget (evaluations)")
    axes[0].set_ylabel("normalised best")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "policies.png", dpi=110)
    console.print(f"wrote {out / 'policies.png'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="3 seeds, budgets 25/50, 1k/10k")
    mode.add_argument("--full", action="store_true", help="budgets 25/50/100/200")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per cell (default 10)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", type=Path, default=Path("."), help="folder for the CSV and PNG")
    ap.add_argument("--skip-timing", action="store_true")
    args = ap.parse_args()
    budgets = [25, 50] if args.quick else [25, 50, 100, 200] if args.full else [25, 50, 100]
    seeds = args.seeds or (3 if args.quick else 10)
    args.out.mkdir(parents=True, exist_ok=True)
    console.print(f"policies: {', '.join(NAMES)} (table: {sorted(POLICIES)})")
    t0 = time.perf_counter()
    rows = quality(budgets, seeds, args.jobs, args.out)
    console.print(
        f"wrote {args.out / 'policies.csv'} ({len(rows)} runs, {time.perf_counter() - t0:.0f}s)"
    )
    plot(rows, budgets, args.out)
    determinism(40)
    if not args.skip_timing:
        timing([1000, 10_000] if args.quick else [1000, 10_000, 100_000], 200)
    console.print(f"total {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    sys.exit(main())
