"""``revtree tune``: search configurations tried on a suite of tasks, the best written as
a named profile (the engine is :mod:`revtree.orchestrator.tune`, imported inside)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from revtree.cli.app import DbOpt, QuietOpt, app, console


def _line(task: str, search: dict[str, Any], seed: int, value: float) -> None:
    knobs = " ".join(f"{k}={v}" for k, v in search.items())
    console.print(escape(f"  {task} seed {seed} [{knobs}]: {value:+.4f}"))


def _holdout_table(rows: dict[str, tuple[float, float, float, float]], seeds: int) -> Table:
    t = Table(title=f"held out: relative improvement, mean ± se over {seeds} seed(s)")
    for col in ("task", "tuned", "default"):
        t.add_column(col)
    for task, (a, sa, b, sb) in rows.items():
        t.add_row(escape(task), f"{a:+.4f} ± {sa:.4f}", f"{b:+.4f} ± {sb:.4f}")
    return t


@app.command()
def tune(
    suite: Annotated[
        Path | None,
        typer.Argument(help="A folder of task folders (default: the bundled examples)."),
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="Profile to write (default: tuned-YEAR-MONTH).")
    ] = None,
    budget: Annotated[int, typer.Option(min=2, help="Nodes per run, root included.")] = 10,
    trials: Annotated[int, typer.Option(min=1, help="Configurations Optuna tries.")] = 8,
    holdout: Annotated[int, typer.Option(min=0, help="Tasks kept out of the choice.")] = 0,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds of the held-out comparison.")] = 3,
    seed: Annotated[int, typer.Option(help="Seed of the study, trials and the split.")] = 0,
    policies: Annotated[
        str, typer.Option(help="Policies to choose among, comma-separated.")
    ] = "greedy,mcts,evolution,bgmcts",
    keep: Annotated[
        bool,
        typer.Option(
            help="Record the runs in your home and database (default: a throwaway one).",
            show_default=False,
        ),
    ] = False,
    db: DbOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Try search configurations (policy and a few of its knobs, chosen by Optuna) on a
    suite of tasks at equal budget; write the best, by mean relative improvement over the
    baseline on the training tasks, as a profile that a task uses with [search] profile =
    "NAME" ($REVTREE_HOME/profiles/NAME.toml). --holdout K keeps K tasks apart and reports
    the profile against the default configuration on them, over --seeds seeds."""
    from revtree.orchestrator.tune import Bench, load_suite, suite_folders, workspace
    from revtree.orchestrator.tune import tune as run_tune
    from revtree.tasks.profiles import check_name, write_profile

    profile = check_name(name or time.strftime("tuned-%Y-%m"))
    specs = load_suite(suite_folders(suite))
    chosen = tuple(p.strip() for p in policies.split(",") if p.strip())
    with workspace(keep, db) as (home, store):
        bench = Bench(specs, budget, home, store, on_run=(lambda *a: None) if quiet else _line)
        out = run_tune(bench, trials, holdout, seeds, seed, chosen)
    console.print(escape(f"training tasks: {', '.join(out.train)}; held out: "
                         f"{', '.join(out.held) or 'none'}"))  # fmt: skip
    for i, (table, value) in enumerate(out.trials):
        console.print(escape(f"trial {i}: {table}: mean {value:+.4f}"))
    if out.holdout:
        console.print(_holdout_table(out.holdout, seeds))
    measured: dict[str, Any] = {
        "suite": str(suite or "examples"),
        "train": out.train,
        "held_out": out.held,
        "budget": budget,
        "trials": trials,
        "train_score": round(out.best_score, 6),
    }
    if "mean" in out.holdout:
        a, sa, b, sb = out.holdout["mean"]
        measured.update(holdout_tuned=[round(a, 6), round(sa, 6)],
                        holdout_default=[round(b, 6), round(sb, 6)])  # fmt: skip
    path = write_profile(profile, out.best, measured)
    console.print(escape(f"profile {profile} ({out.best}): {path}"))
    console.print(escape(f'use it with [search] profile = "{profile}"'))
