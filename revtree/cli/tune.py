"""``revtree tune``: search configurations tried on a suite of tasks, the best written as
a named profile (the engine is :mod:`revtree.orchestrator.tune`, imported inside)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from revtree.cli.app import DbOpt, PipeConsole, QuietOpt, app, console, err

if TYPE_CHECKING:
    from revtree.orchestrator.tune import Outcome, Report


def _lines(out: PipeConsole) -> Report:
    def line(
        task: str, search: dict[str, Any], seed: int, value: float | None, why: str | None
    ) -> None:
        knobs = " ".join(f"{k}={v}" for k, v in search.items())
        said = f"failed: {why}" if value is None else f"{value:+.4f}"
        out.print(escape(f"  {task} seed {seed} [{knobs}]: {said}"))

    return line


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else round(value, 6)


def as_json(out: Outcome, suite: Path | None, budget: int) -> dict[str, Any]:
    """What ``tune --json`` prints (the profile's name and path added by the command)."""
    trials = [
        {
            "number": i,
            "search": t.search,
            "score": _number(t.value),
            "state": "failed" if t.error else "complete",
            "error": t.error,
        }
        for i, t in enumerate(out.trials)
    ]
    holdout = {
        task: {
            "tuned": {"mean": _number(a), "se": _number(sa)},
            "default": {"mean": _number(b), "se": _number(sb)},
        }
        for task, (a, sa, b, sb) in out.holdout.items()
    }
    return {
        "suite": str(suite or "examples"),
        "train": out.train,
        "held_out": out.held,
        "budget": budget,
        "trials": trials,
        "best": out.best,
        "best_score": _number(out.best_score),
        "holdout": holdout,
        "holdout_failures": out.holdout_failures,
    }


def _holdout_table(rows: dict[str, tuple[float, float, float, float]], seeds: int) -> Table:
    t = Table(title=f"held out: relative improvement, mean ± se over {seeds} seed(s)")
    for col in ("task", "tuned", "default"):
        t.add_column(col)
    for task, (a, sa, b, sb) in rows.items():
        t.add_row(escape(task), _mean(a, sa), _mean(b, sb))
    return t


def _mean(m: float, se: float) -> str:
    return "failed" if math.isnan(m) else f"{m:+.4f} ± {se:.4f}"


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
    json_out: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the result as one JSON object (each run's line to stderr).",
            show_default=False,
        ),
    ] = False,
) -> None:
    """Try search configurations (policy and a few of its knobs, chosen by Optuna) on a
    suite of tasks at equal budget; write the best, by mean relative improvement over the
    baseline on the training tasks, as a profile that a task uses with [search] profile =
    "NAME" ($REVTREE_HOME/profiles/NAME.toml). --holdout K keeps K tasks apart and reports
    the profile against the default configuration on them, over --seeds seeds. A run that
    cannot start or ends failed fails its trial, which is listed with the reason; the
    tune goes on, and exits 1 only when every trial failed (no profile written)."""
    from revtree.orchestrator.tune import AllFailed, Bench, load_suite, suite_folders, workspace
    from revtree.orchestrator.tune import tune as run_tune
    from revtree.tasks.profiles import check_name

    profile = check_name(name or time.strftime("tuned-%Y-%m"))
    specs = load_suite(suite_folders(suite))
    chosen = tuple(p.strip() for p in policies.split(",") if p.strip())
    report = (lambda *a: None) if quiet else _lines(err if json_out else console)
    failed = False
    with workspace(keep, db) as (home, store):
        bench = Bench(specs, budget, home, store, on_run=report)
        try:
            out = run_tune(bench, trials, holdout, seeds, seed, chosen)
        except AllFailed as e:
            out, failed = e.outcome, True
    data = as_json(out, suite, budget)
    if not json_out:
        _say(out, seeds)
    if failed:
        if json_out:
            print(json.dumps(data | {"profile": None, "path": None}, indent=2))
        err.print(escape(f"error: every trial failed ({len(out.trials)}); no profile written"))
        raise typer.Exit(1)
    path = _write(profile, out, suite, budget, trials)
    if json_out:
        print(json.dumps(data | {"profile": profile, "path": str(path)}, indent=2))
        return
    console.print(escape(f"profile {profile} ({out.best}): {path}"))
    console.print(escape(f'use it with [search] profile = "{profile}"'))


def _say(out: Outcome, seeds: int) -> None:
    console.print(escape(f"training tasks: {', '.join(out.train)}; held out: "
                         f"{', '.join(out.held) or 'none'}"))  # fmt: skip
    for i, t in enumerate(out.trials):
        said = f"failed: {t.error}" if t.value is None else f"mean {t.value:+.4f}"
        console.print(escape(f"trial {i}: {t.search}: {said}"))
    if out.holdout:
        console.print(_holdout_table(out.holdout, seeds))
    for why in out.holdout_failures:
        console.print(escape(f"held-out run failed (left out of the means): {why}"))


def _write(profile: str, out: Outcome, suite: Path | None, budget: int, trials: int) -> Path:
    from revtree.tasks.profiles import write_profile

    assert out.best is not None and out.best_score is not None
    measured: dict[str, Any] = {
        "suite": str(suite or "examples"),
        "train": out.train,
        "held_out": out.held,
        "budget": budget,
        "trials": trials,
        "train_score": round(out.best_score, 6),
    }
    if "mean" in out.holdout and not math.isnan(out.holdout["mean"][0] + out.holdout["mean"][2]):
        a, sa, b, sb = out.holdout["mean"]
        measured.update(holdout_tuned=[round(a, 6), round(sa, 6)],
                        holdout_default=[round(b, 6), round(sb, 6)])  # fmt: skip
    return write_profile(profile, out.best, measured)
