"""Search policies on synthetic research landscapes and on real tasks: quality, speed,
determinism.

    python benchmarks/policies.py [--quick | --full] [--seeds N] [--jobs J] [--out DIR]
                                  [--real | --real-only] [--real-seeds N]

Part 1 drives every policy directly against the simulated landscapes of
:mod:`revtree.orchestrator.policies.sim` (deceptive, narrow_band, noisy, deep,
wide_shallow, failure_prone), with ``Tree.of`` snapshots as the orchestrator builds
them, one candidate in flight. The score of a run is the *true* quality of the node it
reports as best (best observed mean), normalised: 0 = the baseline, 1 = the optimum.
It prints the mean with a 95% CI (1.96 standard errors over seeds) per policy, task and
budget, and the suite mean per policy at budgets <= 100, and checks the issue's target
(exts or bgmcts >= the best of greedy, mcts and evolution). Default: 10 seeds, budgets
25/50/100; --full adds 200 (and --seeds more); --quick: 3 seeds, budgets 25/50.

``agentic`` runs with a simulated model
(:class:`~revtree.orchestrator.policies.sim.model.SimulatedPolicyModel`, a seeded
heuristic stand-in for an LLM that reads the policy's tree summary and answers 10% of
the time with something unusable): its row measures the policy's plumbing and fallback
with a sensible chooser, not what a real model would do. Its model calls and fallbacks
to greedy are counted and printed.

Part 2 times ``select`` + ``update`` on trees of 1k, 10k and 100k nodes (a random
recursive tree, scores a random walk, 10% failures): the policy is built, its index
built once from the snapshot (reported as "load"), then each round extends the
snapshot by one finished node (``Tree.extend``, reported separately) and times one
select and one update. Part 3 checks that the same seed gives the same tree.

Part 4 (--real; --real-only skips parts 1-3) runs every policy through the real
orchestrator (``create_run`` + ``Orchestrator.drive``, local sandbox, SQLite in a temp
dir, parallel 1) on two example tasks: ``tsp-anneal`` (knobs, the offline Optuna knob
proposer; its STEPS knob capped at $REVTREE_BENCH_TSP_STEPS, default 20000, so one
evaluation takes well under 0.1 s) and ``curve-fit`` (a program, the offline mutation
proposer of :mod:`revtree.agents.mutate`). A policy that does not read the budget runs
once at the largest budget and is read at every budget B (the best node among nodes
< B, a verification counting only if it came before node B was selected); bgmcts and
exts (they read ``tree.budget_used``) run once per budget. The reported best node's
code is then scored through revtree's own Evaluator (local sandbox, fresh protected
files, the task's grade step where it has one: tsp-anneal's run.py then grade.py) at
fixed seeds no run uses (3 for tsp-anneal, whose score depends on $REVTREE_SEED; 1 for
curve-fit, deterministic), so scores compare across runs; normalised 0 = the baseline's
score, 1 = the best score of any run's reported best in this benchmark ("best known").
--full: budgets 25/50/100/200 and 10 seeds (--real-seeds to change); otherwise
budgets 10/20, 2 seeds.

Writes ``policies.csv`` (every run), ``policies_real.csv`` and, when matplotlib is
importable, ``policies.png`` and ``policies_real.png``.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
import os
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from rich.console import Console
from rich.table import Table

from revtree.agents.evaluator import Evaluator
from revtree.memory import Store
from revtree.memory.records import Node, NodeStatus, directed
from revtree.memory.stages import FULL
from revtree.orchestrator import Orchestrator, create_run
from revtree.orchestrator.policies import POLICIES, Policy, make_policy
from revtree.orchestrator.policies.agentic import AgenticPolicy
from revtree.orchestrator.policies.sim import LANDSCAPES, SimulatedPolicyModel, Simulator
from revtree.orchestrator.run import read_source
from revtree.orchestrator.tree import Tree
from revtree.sandboxes.base import archive_of
from revtree.sandboxes.local import LocalSandbox
from revtree.tasks import TaskSpec, code_files, load_task
from revtree.tasks.load import matches, source_dir
from revtree.tasks.spec import SearchConfig

NAMES = list(POLICIES)  # every policy, in the task spec's order
BASELINES, NEW = ("greedy", "mcts", "evolution"), ("bgmcts", "exts")
AGENTIC_LABEL = "agentic with a simulated model (heuristic stand-in for an LLM)"
console = Console(width=150)


def build(name: str, seed: int) -> tuple[Policy, SimulatedPolicyModel | None]:
    """The policy; ``agentic`` gets a simulated model (returned, to count its calls)."""
    policy = make_policy(TypeAdapter(SearchConfig).validate_python({"policy": name, "seed": seed}))
    if not isinstance(policy, AgenticPolicy):
        return policy, None
    model = SimulatedPolicyModel(seed)
    policy.attach(model.ask)
    return policy, model


def label(name: str) -> str:
    """The row label: agentic is marked as driven by the simulated model."""
    return "agentic (simulated model)" if name == "agentic" else name


def calls(policy: Policy, model: SimulatedPolicyModel | None) -> tuple[int, int]:
    """(model calls, fallbacks to greedy) of an agentic run; (0, 0) for the others."""
    return (model.calls, getattr(policy, "fallbacks", 0)) if model else (0, 0)


def one(args: tuple[str, str, int, int]) -> tuple[Any, ...]:
    name, land_name, budget, seed = args
    land = next(x for x in LANDSCAPES if x.name == land_name)
    policy, model = build(name, seed)
    run = Simulator(land, seed, budget).run(policy)
    return name, land_name, budget, seed, run.best_quality(True), *calls(policy, model)


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
        w.writerow(
            ["policy", "landscape", "budget", "seed", "normalised_best", "llm_calls", "fallbacks"]
        )
        w.writerows(rows)
    by: dict[tuple[str, str, int], list[float]] = {}
    for p, x, b, _, v, *_ in rows:
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
            t.add_row(label(p), *(f"{m:.3f}±{h:.3f}" for m, h in cells), f"{mean:.3f}")
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
        t.add_row(label(p), f"{suite[p]:.3f}")
    console.print(t)
    best_new = max(NEW, key=suite.__getitem__)
    best_old = max(BASELINES, key=suite.__getitem__)
    verdict = "MET" if suite[best_new] >= suite[best_old] else "NOT MET"
    console.print(
        f"target (exts or bgmcts >= best of greedy, mcts, evolution at budgets <= 100): "
        f"{verdict}: {best_new} {suite[best_new]:.3f} vs {best_old} {suite[best_old]:.3f}"
    )
    report_calls(rows)
    return rows


def report_calls(rows: list[tuple[Any, ...]]) -> None:
    """Print the simulated model's calls and the agentic policy's fallbacks."""
    n_calls = sum(r[5] for r in rows if r[0] == "agentic")
    n_back = sum(r[6] for r in rows if r[0] == "agentic")
    if n_calls:
        console.print(
            f"{AGENTIC_LABEL}: {n_calls} model calls, {n_back} fell back to greedy "
            f"({n_back / n_calls:.1%}; the simulated model answers malformed "
            f"{SimulatedPolicyModel().p_malformed:.0%} of the time)"
        )


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
            policy, _ = build(p, 0)
            t0 = time.perf_counter()
            choice = policy.select(tree)
            load = time.perf_counter() - t0
            slow = p in ("greedy", "random", "agentic")
            k = rounds if not slow or n <= 10_000 else max(5, rounds // 20)
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
                run = Simulator(land, 7, budget, parallel=2).run(build(p, 7)[0])
                shapes.append(
                    [(n.id, n.parent_id, n.operator, n.score) for n in run.nodes.values()]
                )
            if shapes[0] != shapes[1]:
                bad.append(f"{p}/{land.name}")
    console.print(
        f"same seed, same tree ({len(NAMES)} policies x {len(LANDSCAPES)} landscapes, parallel 2): "
        + ("OK" if not bad else f"DIFFERS for {bad}")
    )


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or None (said so) if it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        console.print("matplotlib is not installed: no PNG (the CSV has every run)")
        return None
    return plt


def plot(rows: list[tuple[Any, ...]], budgets: list[int], out: Path) -> None:
    cells: dict[tuple[str, str, int], list[float]] = {}
    for r in rows:
        cells.setdefault((r[1], r[0], r[2]), []).append(r[4])
    panels = [(land.name, land.name) for land in LANDSCAPES]
    draw(cells, panels, budgets, out / "policies.png", "budget (evaluations)", "normalised best")


def draw(
    cells: dict[tuple[str, str, int], list[float]],
    panels: list[tuple[str, str]],
    budgets: list[int],
    path: Path,
    xlabel: str,
    ylabel: str,
) -> None:
    """One panel per (key, title), one line per policy: mean and 95% CI of
    ``cells[key, policy, budget]`` over the budgets that have values."""
    plt = pyplot()
    if plt is None:
        return
    width = 4 if len(panels) > 2 else 5
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), 3.5), sharey=True)
    for ax, (key, title) in zip(axes, panels, strict=True):
        for p in NAMES:
            have = [b for b in budgets if cells.get((key, p, b))]
            stats = [ci(cells[key, p, b]) for b in have]
            ax.errorbar(have, [m for m, _ in stats], [h for _, h in stats], label=p, capsize=2)
        ax.set_title(title)
        ax.set_xscale("log")
        ax.set_xticks(budgets, [str(b) for b in budgets], minor=False)
        ax.minorticks_off()
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel(ylabel)
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    console.print(f"wrote {path}")


# -- part 4: real tasks through the real orchestrator ------------------------------------
ROOT = Path(__file__).resolve().parent.parent
REAL_TASKS = {"tsp-anneal": 3, "curve-fit": 1}  # task -> reference seeds (curve-fit: exact)
BUDGET_AWARE = ("bgmcts", "exts")  # read tree.budget_used: one run per budget
TSP_STEPS = int(os.environ.get("REVTREE_BENCH_TSP_STEPS", "20000"))
_reference_cache: dict[tuple[str, str], float] = {}


def real_spec(task: str, policy: str, seed: int, budget: int) -> TaskSpec:
    """The example task as benchmarked: local sandbox, parallel 1, no holdout; tsp-anneal's
    STEPS knob capped at ``REVTREE_BENCH_TSP_STEPS`` (default 20000) to keep it fast."""
    spec = load_task(ROOT / "examples" / task).with_overrides(
        budget={"max_nodes": budget},
        search={"policy": policy, "seed": seed, "parallel": 1},
        sandbox={"backend": "local"},
    )
    knobs = tuple(
        k.model_copy(update={"high": float(TSP_STEPS)}) if k.name == "STEPS" else k
        for k in spec.knobs
    )
    return spec.model_copy(update={"holdout": None, "knobs": knobs})


def reference(spec: TaskSpec, files: dict[str, bytes]) -> float:
    """The task's full evaluation of ``files`` through revtree's own :class:`Evaluator`
    (local sandbox, fresh protected files, the grade step where the task has one) at
    fixed seeds no run uses ($REVTREE_SEED 1000001...): the "true" score of a revision,
    comparable across runs. A failed evaluation scores NaN. Cached by content."""
    key = (spec.name, hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest())
    if key in _reference_cache:
        return _reference_cache[key]
    source, _ = read_source(spec, code_files(spec))
    protected = {p: d for p, d in source.items() if matches(p, spec.protected)}
    protected.update({p: t.encode() for p, t in spec.support_files.items()})
    fixed = spec.model_copy(update={"search": spec.search.model_copy(update={"seed": 1_000_001})})
    archive = archive_of({**files, **protected})
    ev = fixed.evaluate
    scores = []
    with tempfile.TemporaryDirectory() as d:
        evaluator = Evaluator(fixed, LocalSandbox(d), protected=protected)
        for repeat in range(REAL_TASKS[spec.name]):
            res = evaluator.run_one(
                0, archive, FULL, repeat, ev.command, ev.metric, ev.timeout, None
            )
            scores.append(res.score if res.ok and res.score is not None else math.nan)
    _reference_cache[key] = statistics.fmean(scores)
    return _reference_cache[key]


def observed_best(store: Store, run_id: str, maximize: bool, budget: int) -> int:
    """The node the run reported as best when its node ``budget`` (root included) was
    spent: the best mean score among nodes with id < budget, a verification counting
    only if it happened before that node was selected."""
    nodes = {n.id: n for n in store.nodes(run_id) if n.id < budget}
    events = store.events_since(run_id, 0, 1_000_000)
    cut = next((e.seq for e in events if e.kind == "select" and e.node_id == budget), math.inf)
    late = {e.node_id for e in events if e.kind == "verify" and e.seq > cut}
    score: dict[int, float] = {}
    for n in nodes.values():
        if n.status is not NodeStatus.SUCCEEDED or n.score is None:
            continue
        if n.id in late:
            first = [e for e in store.evaluations(run_id, n.id) if e.repeat == 0 and e.ok]
            score[n.id] = first[0].score if first and first[0].score is not None else n.score
        else:
            score[n.id] = n.score
    return max(score, key=lambda i: (directed(score[i], maximize), -i))


def real_one(args: tuple[str, str, int, int, tuple[int, ...]]) -> list[tuple[Any, ...]]:
    """One orchestrated run at the largest budget, read at every budget in ``reads``."""
    task, policy, seed, budget, reads = args
    spec = real_spec(task, policy, seed, budget)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as home:
        store = Store(f"sqlite:///{home}/revtree.db")
        run = create_run(store, spec, Path(home))
        orch = Orchestrator(store, run.id, home=Path(home))
        model = None
        if isinstance(orch.policy, AgenticPolicy):
            model = SimulatedPolicyModel(seed)
            orch.policy.attach(model.ask)
        orch.drive()
        seconds = time.perf_counter() - t0
        rows = []
        for b in reads:
            best = orch.nodes[observed_best(store, run.id, spec.maximize, b)]
            assert best.commit is not None
            files = {p: d for p, d in orch.git.read_files(best.commit).items()}
            ref = reference(spec, files)
            rows.append((task, policy, budget if policy in BUDGET_AWARE else 0, seed, b,
                         best.id, ref, *calls(orch.policy, model), round(seconds, 1)))  # fmt: skip
        orch.close()
        store.close()
    return rows


REAL_COLUMNS = ["task", "policy", "run_budget", "seed", "budget", "best_node", "reference_score",
                "llm_calls", "fallbacks", "run_seconds"]  # fmt: skip


def real(budgets: list[int], seeds: int, jobs: int, out: Path, first_seed: int = 0) -> None:
    """Every policy x seed on the real example tasks (see the module docstring); each
    finished run's rows are appended to ``policies_real.csv`` at once."""
    grid: list[tuple[str, str, int, int, tuple[int, ...]]] = []
    for seed in range(first_seed, first_seed + seeds):  # seed-major: cut short, whole seeds
        for task in REAL_TASKS:
            for p in NAMES:
                if p in BUDGET_AWARE:
                    grid += [(task, p, seed, b, (b,)) for b in budgets]
                else:
                    grid.append((task, p, seed, max(budgets), tuple(budgets)))
    t0 = time.perf_counter()
    rows: list[tuple[Any, ...]] = []
    with (out / "policies_real.csv").open("w", newline="") as f, ProcessPoolExecutor(jobs) as pool:
        w = csv.writer(f)
        w.writerow(REAL_COLUMNS)
        for i, rs in enumerate(pool.map(real_one, grid)):
            w.writerows(rs)
            f.flush()
            rows += rs
            task, p, seed, budget, _ = grid[i]
            console.print(
                f"[{i + 1}/{len(grid)}] {task} {p} seed {seed} budget {budget}: "
                f"{rs[-1][-1]:.0f}s (elapsed {time.perf_counter() - t0:.0f}s)"
            )
    console.print(f"wrote {out / 'policies_real.csv'}: {len(grid)} runs, "
                  f"{time.perf_counter() - t0:.0f}s")  # fmt: skip
    report_real(rows, budgets, out)


def read_real(path: Path) -> list[tuple[Any, ...]]:
    """The rows of a ``policies_real.csv`` (possibly of a run cut short)."""
    with path.open() as f:
        r = csv.reader(f)
        next(r)
        return [
            (t, p, int(rb), int(s), int(b), int(n), float(v), int(c), int(fb), float(sec))
            for t, p, rb, s, b, n, v, c, fb, sec in r
        ]


def report_real(rows: list[tuple[Any, ...]], budgets: list[int], out: Path) -> None:
    """Tables, call counts and the plot of the real-task rows."""
    base = {t: reference(real_spec(t, "greedy", 0, 2), baseline_files(t)) for t in REAL_TASKS}
    norm = normalise_real(rows, base)
    table_real(norm, budgets, base)
    top = max(budgets)
    agentic = [r for r in rows if r[1] == "agentic" and r[4] == top]
    report_calls([("agentic", *r[1:4], 0.0, r[7], r[8]) for r in agentic])
    plot_real(norm, budgets, out)


def baseline_files(task: str) -> dict[str, bytes]:
    spec = load_task(ROOT / "examples" / task)
    return {p: (source_dir(spec) / p).read_bytes() for p in code_files(spec)}


def normalise_real(
    rows: list[tuple[Any, ...]], base: dict[str, float]
) -> dict[tuple[str, str, int], list[float]]:
    """(task, policy, budget) -> normalised reference scores: 0 = the baseline, 1 = the
    best reference score of any reported best in any run of this benchmark."""
    out: dict[tuple[str, str, int], list[float]] = {}
    for task, b0 in base.items():
        sign = -1.0 if task in MINIMISE else 1.0
        best = max([b0, *(r[6] for r in rows if r[0] == task)], key=lambda v: sign * v)
        span = sign * (best - b0) or 1.0
        for r in rows:
            if r[0] == task:
                out.setdefault((task, r[1], r[4]), []).append(sign * (r[6] - b0) / span)
        BEST_KNOWN[task] = best
    return out


MINIMISE = ("tsp-anneal", "curve-fit")
BEST_KNOWN: dict[str, float] = {}


def table_real(
    norm: dict[tuple[str, str, int], list[float]], budgets: list[int], base: dict[str, float]
) -> None:
    for task in REAL_TASKS:
        t = Table(
            title=f"{task} (real orchestrator, (n) = seeds): normalised best, 0 = baseline "
            f"({base[task]:.4f}), 1 = best known ({BEST_KNOWN[task]:.4f} = the best reference "
            "score of any run's reported best)"
        )
        t.add_column("policy")
        for b in budgets:
            t.add_column(f"budget {b}", justify="right")
        for p in NAMES:
            cells = [norm.get((task, p, b), []) for b in budgets]
            t.add_row(label(p), *(cell(v) for v in cells))
        console.print(t)


def cell(values: list[float]) -> str:
    """mean ± 95% CI (n), or a dash for an empty cell."""
    if not values:
        return "-"
    m, h = ci(values)
    return f"{m:.3f}±{h:.3f} ({len(values)})"


def plot_real(norm: dict[tuple[str, str, int], list[float]], budgets: list[int], out: Path) -> None:
    panels = [(task, f"{task} (real orchestrator)") for task in REAL_TASKS]
    ylabel = "normalised best (1 = best known)"
    draw(norm, panels, budgets, out / "policies_real.png", "budget (nodes)", ylabel)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="3 seeds, budgets 25/50, 1k/10k")
    mode.add_argument("--full", action="store_true", help="budgets 25/50/100/200")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per cell (default 10)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--out", type=Path, default=Path("."), help="folder for the CSV and PNG")
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--real", action="store_true", help="add the real example tasks")
    ap.add_argument("--real-only", action="store_true", help="only the real example tasks")
    ap.add_argument("--real-seeds", type=int, default=None, help="seeds per real cell")
    ap.add_argument("--real-first-seed", type=int, default=0, help="first real seed")
    ap.add_argument(
        "--real-budgets", type=str, default=None, help="comma-separated, e.g. 25,50,100"
    )
    ap.add_argument(
        "--real-report", type=Path, default=None, help="only print the tables of this real CSV"
    )
    args = ap.parse_args()
    budgets = [25, 50] if args.quick else [25, 50, 100, 200] if args.full else [25, 50, 100]
    seeds = args.seeds or (3 if args.quick else 10)
    args.out.mkdir(parents=True, exist_ok=True)
    console.print(f"policies: {', '.join(NAMES)}")
    t0 = time.perf_counter()
    real_budgets = [25, 50, 100, 200] if args.full else [10, 20]
    if args.real_budgets:
        real_budgets = [int(b) for b in args.real_budgets.split(",")]
    if args.real_report:
        report_real(read_real(args.real_report), real_budgets, args.out)
        return 0
    if args.real or args.real_only:
        n_seeds = args.real_seeds or (10 if args.full else 2)
        real(real_budgets, n_seeds, args.jobs, args.out, args.real_first_seed)
        if args.real_only:
            return 0
    rows = quality(budgets, seeds, args.jobs, args.out)
    console.print(
        f"wrote {args.out / 'policies.csv'} ({len(rows)} runs, {time.perf_counter() - t0:.0f}s)"
    )
    plot(rows, budgets, args.out)
    determinism(40)
    if not args.skip_timing:
        timing([1000, 10_000] if args.quick else [1000, 10_000, 100_000], 200)
    console.print(f"total {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
