"""Orchestration overhead, slot utilisation, and revtree against a plain Optuna loop.

    python benchmarks/overhead.py [--quick]

Part 1 runs a trivial task whose evaluator sleeps S seconds, with K candidates in
flight, for K = 1, 2, 4 and S = 0, 0.5. It reports, per candidate:
- overhead: slot-time not spent inside ``sandbox.execute`` (select, propose, code,
  commit, review, SQL, checkpoints), i.e. (wall * K - sum(execute time)) / n;
- sandbox: mean time inside ``sandbox.execute`` (workspace, process, cleanup);
- utilisation: sum(execute time) / (wall * K).
Part 2 runs examples/tsp-anneal through revtree (policy optuna, parallel 1) and through
a plain Optuna ask/tell loop that runs the same evaluator the same way, at the same
budget and seeds, and reports best score and wall time, with the ratio of the two
measured in the same process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import optuna
from rich.console import Console
from rich.table import Table

from revtree.agents.base import Proposal
from revtree.agents.knobs import KnobCoder, derive_seed, distribution, read_knobs
from revtree.memory import Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.sandboxes.base import ExecRequest, ExecResult
from revtree.sandboxes.local import LocalSandbox
from revtree.tasks import load_task

ROOT = Path(__file__).resolve().parent.parent
console = Console(width=180)


class TimedSandbox(LocalSandbox):
    """The local sandbox, with the time spent in each ``execute`` summed up."""

    def __init__(self, base_dir: Path) -> None:
        super().__init__(base_dir)
        self.busy, self.calls, self._lock = 0.0, 0, threading.Lock()

    def execute(self, request: ExecRequest, cancel: threading.Event | None = None) -> ExecResult:
        t0 = time.monotonic()
        try:
            return super().execute(request, cancel)
        finally:
            with self._lock:
                self.busy += time.monotonic() - t0
                self.calls += 1


def sleep_task(folder: Path, sleep: float, nodes: int, parallel: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "params.py").write_text("X = 0.5\n")
    (folder / "task.toml").write_text(
        textwrap.dedent(f"""\
        name = "sleep"
        editable = ["params.py"]
        [evaluate]
        command = "sleep {sleep}; echo '{{\\"score\\": 1.0}}' >&3"
        metric = "score"
        direction = "maximize"
        [search]
        policy = "greedy"
        parallel = {parallel}
        [budget]
        max_nodes = {nodes}
        [[knobs]]
        name = "X"
        type = "float"
        low = 0
        high = 1
        file = "params.py"
        """)
    )
    return folder


def overhead_row(tmp: Path, sleep: float, k: int, nodes: int) -> dict[str, float]:
    home = tmp / f"home-{sleep}-{k}"
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    spec = load_task(sleep_task(tmp / f"task-{sleep}-{k}", sleep, nodes, k))
    run = create_run(store, spec, home)
    sandbox = TimedSandbox(home / "work")
    orch = Orchestrator(store, run.id, home=home, sandbox=sandbox)
    t0 = time.monotonic()
    orch.drive()
    wall = time.monotonic() - t0
    n = len(store.nodes(run.id))
    store.close()
    return {
        "n": n,
        "wall": wall,
        "per_candidate_ms": wall * k / n * 1000,
        "overhead_ms": (wall * k - sandbox.busy) / n * 1000,
        "sandbox_ms": sandbox.busy / sandbox.calls * 1000,
        "utilisation": sandbox.busy / (wall * k),
        "throughput": n / wall,
    }


def revtree_tsp(tmp: Path, seed: int, budget: int, lookahead: int = 0) -> tuple[float, float]:
    home = tmp / f"tsp-home-{seed}-{lookahead}"
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    spec = load_task(ROOT / "examples" / "tsp-anneal").with_overrides(
        search={"policy": "optuna", "seed": seed, "parallel": 1, "lookahead": lookahead},
        budget={"max_nodes": budget},
        sandbox={"backend": "local"},  # like the plain loop: a subprocess in a temp folder
    )
    spec = spec.model_copy(update={"holdout": None})
    run = create_run(store, spec, home)
    t0 = time.monotonic()
    Orchestrator(store, run.id, home=home).drive()
    wall = time.monotonic() - t0
    best = min(n.score for n in store.nodes(run.id) if n.score is not None)
    store.close()
    return best, wall


def optuna_tsp(tmp: Path, seed: int, budget: int, mirror: bool) -> tuple[float, float]:
    """A plain ask/tell loop: write the knobs, run the evaluator in a fresh folder.

    ``mirror`` samples exactly as revtree's knob proposer does (the baseline told first,
    then one seeded TPE sampler per trial), so both evaluate the same configurations
    and the wall-time ratio measures orchestration alone. Otherwise it is the textbook
    loop with one seeded TPE sampler, for comparing the quality of the best score.
    """
    spec = load_task(ROOT / "examples" / "tsp-anneal")
    src = ROOT / "examples" / "tsp-anneal"
    coder = KnobCoder(spec.knobs)
    dists = {k.name: distribution(k) for k in spec.knobs}
    study = optuna.create_study(direction="minimize")
    study.sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=8, multivariate=True)
    files = {p: (src / p).read_bytes() for p in ("solver.py", "evaluate.py")}
    t0 = time.monotonic()
    baseline = _evaluate(tmp, files, seed)
    if mirror:
        base = read_knobs(spec.knobs, files)
        study.add_trial(optuna.trial.create_trial(params=base, distributions=dists, value=baseline))
    for node_id in range(1, budget):  # revtree's budget counts the baseline too
        if mirror:
            study.sampler = optuna.samplers.TPESampler(
                seed=derive_seed(seed, "knobs", node_id),
                n_startup_trials=8,
                multivariate=True,
                constant_liar=True,
            )
        trial = study.ask(dists)
        changed = coder.write(Proposal("", dict(trial.params)), files)
        value = _evaluate(
            tmp, {**files, **{p: d for p, d in changed.items() if d is not None}}, seed
        )
        study.tell(trial, value)
    wall = time.monotonic() - t0
    return min(baseline, study.best_value), wall


def _evaluate(tmp: Path, files: dict[str, bytes], seed: int = 0) -> float:
    with tempfile.TemporaryDirectory(dir=tmp) as ws:
        for name, data in files.items():
            Path(ws, name).write_bytes(data)
        env = {
            "PATH": os.environ["PATH"],
            "PYTHONDONTWRITEBYTECODE": "1",
            "REVTREE_SEED": str(seed),
        }  # as revtree's sandbox sets it (seed + repeat)
        out = subprocess.run(
            [sys.executable, "evaluate.py"],
            cwd=ws,
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout
    return float(json.loads(out.splitlines()[-1])["tour_length"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer nodes and seeds")
    parser.add_argument("--only", choices=["overhead", "optuna"], help="run one part")
    args = parser.parse_args()
    scale = 0.25 if args.quick else 1.0
    with tempfile.TemporaryDirectory(prefix="revtree-bench-") as d:
        tmp = Path(d)
        table = Table(
            "S (s)",
            "K",
            "nodes",
            "nodes/s",
            "per candidate (ms)",
            "sandbox (ms)",
            "overhead (ms)",
            "utilisation",
            title="orchestration overhead (local sandbox, SQLite, LangGraph checkpoints)",
        )
        for sleep in (0.0, 0.5) if args.only != "optuna" else ():
            for k in (1, 2, 4):
                nodes = int((200 if sleep == 0 else 60 * k) * scale)
                r = overhead_row(tmp, sleep, k, nodes)
                table.add_row(
                    f"{sleep:g}",
                    str(k),
                    str(r["n"]),
                    f"{r['throughput']:.1f}",
                    f"{r['per_candidate_ms']:.1f}",
                    f"{r['sandbox_ms']:.1f}",
                    f"{r['overhead_ms']:.1f}",
                    f"{r['utilisation']:.3f}",
                )
        if args.only != "optuna":
            console.print(table)
        if args.only == "overhead":
            return
        seeds = [0, 1, 2] if not args.quick else [0]
        budget = 30
        cmp = Table(
            "seed",
            "revtree best",
            "same-sampling loop best",
            "plain TPE loop best",
            "revtree wall (s)",
            "loop wall (s)",
            "wall ratio",
            "revtree wall, lookahead 1 (s)",
            "ratio, lookahead 1",
            title=f"tsp-anneal, {budget} evaluations, parallel 1, policy optuna",
        )
        rows = []
        for seed in seeds:
            r_best, r_wall = revtree_tsp(tmp, seed, budget)
            m_best, m_wall = optuna_tsp(tmp, seed, budget, mirror=True)
            p_best, _ = optuna_tsp(tmp, seed, budget, mirror=False)
            _, l_wall = revtree_tsp(tmp, seed, budget, lookahead=1)
            rows.append(
                (r_best, m_best, p_best, r_wall, m_wall, r_wall / m_wall, l_wall, l_wall / m_wall)
            )
            last = rows[-1]
            cmp.add_row(
                str(seed),
                *(f"{v:.4f}" for v in last[:3]),
                *(f"{v:.2f}" for v in last[3:5]),
                f"{last[5]:.3f}",
                f"{last[6]:.2f}",
                f"{last[7]:.3f}",
            )
        means = [statistics.fmean(col) for col in zip(*rows, strict=True)]
        cmp.add_row(
            "mean",
            *(f"{v:.4f}" for v in means[:3]),
            *(f"{v:.2f}" for v in means[3:5]),
            f"{means[5]:.3f}",
            f"{means[6]:.2f}",
            f"{means[7]:.3f}",
        )
        console.print(cmp)


if __name__ == "__main__":
    main()
