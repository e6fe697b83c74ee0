"""The commands for getting started: init (a new task folder), check (a preflight of a
task: sandbox, baseline, models, estimate) and demo (a bundled example, with a simulated
model for ``--llm``)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from revtree.cli.app import DbOpt, QuietOpt, app, console, err
from revtree.cli.run import run as run_command

if TYPE_CHECKING:
    from revtree.orchestrator.commands.check import Report
    from revtree.orchestrator.commands.scaffold import DemoResponder, Scaffold

EXAMPLE = "curve-fit"  # the bundled example the demo runs: one editable file
DEMO_MODEL = "openai-compatible:revtree-demo"
DEMO_PROGRAM = '''\
"""A small model of a hidden curve (the demo's fallback when examples/ is not here)."""

import math


def model(x):
    # EVOLVE-BLOCK-START
    return 0.5 * x + 1.0 * math.cos(0.8 * x) - 0.1 * x * x
    # EVOLVE-BLOCK-END


def main():
    xs = [-3 + 0.1 * i for i in range(61)]
    target = [0.5 + 0.3 * x + 1.2 * math.sin(1.5 * x) - 0.15 * x * x for x in xs]
    return math.sqrt(sum((model(x) - t) ** 2 for x, t in zip(xs, target)) / len(xs))
'''


def direction_of(answer: str) -> str | None:
    """The direction a person typed: ``minimize``/``maximize``, or a prefix of either of
    at least 3 letters (``min``, ``max``); None for anything else."""
    from revtree.orchestrator.commands.scaffold import DIRECTIONS

    for full in DIRECTIONS:
        if len(answer) >= 3 and full.startswith(answer):
            return full
    return None


@app.command()
def init(
    folder: Annotated[Path, typer.Argument(help="Task folder to write (made if missing).")] = Path(
        "."
    ),
    program: Annotated[
        Path | None,
        typer.Option(help="The program to optimise (copied into the folder if elsewhere)."),
    ] = None,
    evaluator: Annotated[
        str | None,
        typer.Option(
            help="Command that scores the program (writes the metric as JSON to file "
            "descriptor 3); default: a generated evaluate.py with a grade step."
        ),
    ] = None,
    metric: Annotated[str | None, typer.Option(help="Key of the score in the metrics.")] = None,
    direction: Annotated[str | None, typer.Option(help="minimize or maximize.")] = None,
    name: Annotated[str | None, typer.Option(help="Task name (default: the folder's).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing task.")] = False,
    knobs: Annotated[
        bool, typer.Option(help="Write the program's module-level constants as [[knobs]].")
    ] = True,
    baseline: Annotated[
        bool, typer.Option(help="Run --evaluator once on the baseline (local sandbox).")
    ] = True,
) -> None:
    """Write a new task folder: task.toml, an evaluator and a .gitignore.

    The evaluator is a generated evaluate.py with a grade step, unless --evaluator, which
    init runs once on the baseline: where it prints its metrics instead of writing them
    to file descriptor 3, the task reads them from stdout (in a terminal init offers the
    grade-step template instead). The program's module-level constants become [[knobs]].
    In a terminal it asks for what the flags do not give; without one, the flags must
    give the program, the metric and the direction."""
    from revtree.orchestrator.commands.scaffold import DIRECTIONS, scaffold

    missing = [
        flag
        for flag, value in (
            ("--program", program),
            ("--metric", metric),
            ("--direction", direction),
        )
        if value is None
    ]
    if missing and not sys.stdin.isatty():
        err.print(f"[red]error:[/red] missing {', '.join(missing)} (no terminal to ask them in)")
        raise typer.Exit(2)
    if missing:
        if program is None:
            program = Path(typer.prompt("Program file to optimise"))
        if evaluator is None:
            asked = typer.prompt(
                "Evaluator command (empty: generate evaluate.py)", default="", show_default=False
            )
            evaluator = asked.strip() or None
        if metric is None:
            metric = typer.prompt("Metric name", default="score")
        while direction not in DIRECTIONS:
            answer = typer.prompt("Direction (minimize or maximize)").strip().lower()
            direction = direction_of(answer)
            if direction is None:
                err.print(f"{escape(answer)!r}: type minimize (or min) or maximize (or max)")
    assert program is not None and metric is not None and direction is not None
    if direction not in DIRECTIONS:
        raise typer.BadParameter(
            f"{direction!r}: expected minimize or maximize", param_hint="--direction"
        )
    made = scaffold(
        folder, program, metric, direction, evaluator, name=name, force=force, knobs=knobs
    )
    console.print(f"task [bold]{made.spec.name}[/bold] in {escape(str(made.folder))}")
    for path in made.written:
        console.print(f"  wrote {escape(path)}")
    show_knobs(made)
    if evaluator is not None and baseline:
        made = try_baseline(made)
    if made.entry is not None:
        console.print(
            f"evaluate.py calls {made.entry}() of {escape(made.program)} and scores what it "
            "returns: edit its score() to measure what matters"
        )
    elif made.spec.evaluate.grade is not None:
        console.print(
            f"evaluate.py runs {escape(made.program)} as a script and scores its last "
            "printed line: edit its score() to measure what matters"
        )
    console.print(
        f"next:  revtree check {escape(str(folder))}  then  revtree run {escape(str(folder))}"
    )


def show_knobs(made: Scaffold) -> None:
    from revtree.orchestrator.commands.constants import describe

    if not made.knobs:
        return
    n = len(made.knobs)
    console.print(
        f"found {n} constant{'s' * (n > 1)} in {escape(made.program)}, written as "
        + escape("[[knobs]] that the offline agents tune within these ranges:")
    )
    for knob in made.knobs:
        console.print(f"  {escape(describe(knob))}")
    console.print(
        "  remove from task.toml any that is part of the problem (a capacity, a size), "
        "not of the solution"
    )


def try_baseline(made: Scaffold) -> Scaffold:
    """Run the evaluator once; where it printed its metrics, make the task read them
    (or, asked in a terminal, switch to the grade-step template)."""
    from revtree.orchestrator.commands.check import FAIL, OK, printed_metrics
    from revtree.orchestrator.commands.scaffold import (
        EVALUATOR,
        read_stdout_metrics,
        scaffold,
        try_evaluator,
    )

    command = made.spec.evaluate.command
    console.print(f"running `{escape(command)}` once on the baseline (local sandbox) ...")
    report = try_evaluator(made.spec)
    last = report.evaluations[-1] if report.evaluations else None
    printed = printed_metrics(last, made.spec) if last else None
    if printed is None:
        for item in report.items:
            if item.name == "baseline":
                mark = "baseline:" if item.status == OK else "[yellow]warning:[/yellow]"
                console.print(f"{mark} {escape(item.message)}", soft_wrap=True)
                if item.status == FAIL:
                    console.print(f"fix it, then:  revtree check {escape(str(made.folder))}")
        return made
    console.print(
        f"it prints its metrics on stdout ({escape(printed[:100])}) rather than writing "
        "them to file descriptor 3; the candidate's code runs in that command and could "
        "print a forged line"
    )
    template = made.program.endswith(".py") and not (made.folder / EVALUATOR).exists()
    if (
        template
        and sys.stdin.isatty()
        and typer.confirm(
            "Switch to the grade-step template (evaluate.py: a run step and a trusted grade "
            "step whose score() you edit) instead of reading stdout?",
            default=False,
        )
    ):
        e = made.spec.evaluate
        return scaffold(
            made.folder, made.folder / made.program, e.metric, e.direction,
            name=made.spec.name, force=True, knobs=bool(made.knobs),
        )  # fmt: skip
    made = read_stdout_metrics(made)
    console.print(
        escape(
            "wrote stdout_metrics = true under [evaluate] in task.toml: the last line it "
            'prints is read; a grade step cannot be forged (README: "The grade step"; init '
            "without --evaluator writes one)"
        )
    )
    return made


@app.command()
def check(
    task: Annotated[Path, typer.Argument(help="Task folder (holding task.toml) or the file.")],
    sandbox: Annotated[str | None, typer.Option(help="local, docker or auto.")] = None,
    model: Annotated[
        str | None,
        typer.Option(help="LLM for all roles, as `revtree run --model` takes it."),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option(help="OpenAI-compatible server, e.g. http://host:8000/v1.")
    ] = None,
    models: Annotated[bool, typer.Option(help="Call each model once (one token).")] = True,
) -> None:
    """Check a task before a run: sandbox, baseline score, models, time and cost.

    The task loads; which sandbox it gets and why; its baseline evaluated once there,
    with the metrics; one call of one token to each model; an estimate of the budget's
    time and cost. Exit 1 when a check fails."""
    from revtree.orchestrator.commands.check import check_task

    agents: dict[str, Any] = {k: v for k, v in {"model": model, "base_url": base_url}.items() if v}
    if agents:
        agents["mode"] = "llm"
    overrides = {"sandbox": {"backend": sandbox} if sandbox else {}, "agents": agents}
    console.print(f"checking {escape(str(task))} ...")
    report = check_task(task, overrides, models=models)
    print_report(report)
    if not report.ok:
        raise typer.Exit(1)


def print_report(report: Report) -> None:
    from revtree.orchestrator.commands.check import FAIL, OK, SKIP, WARN

    marks = {
        OK: ("ok", "green"),
        FAIL: ("FAIL", "red"),
        SKIP: ("skip", "dim"),
        WARN: ("warn", "yellow"),
    }
    for item in report.items:
        word, colour = marks[item.status]
        mark = f"[{colour}]{word:<4}[/{colour}]"
        console.print(f"{mark} {item.name:<9} {escape(item.message)}", soft_wrap=True)
        if item.detail and item.status == FAIL:
            for line in item.detail.splitlines():
                console.print(f"{'':15}{escape(line)}", soft_wrap=True)
    fails = report.failures
    if fails:
        console.print(
            f"[red]{len(fails)} check(s) failed[/red]: {', '.join(i.name for i in fails)}"
        )
    else:
        console.print("[green]all checks passed[/green]")


@app.command()
def demo(
    llm: Annotated[
        bool,
        typer.Option(
            "--llm", help="LLM agents against a simulated model on 127.0.0.1 (no key needed)."
        ),
    ] = False,
    budget_nodes: Annotated[int, typer.Option(help="Nodes, root included.")] = 6,
    sandbox: Annotated[str, typer.Option(help="local, docker or auto.")] = "local",
    db: DbOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Run a bundled example; --llm: LLM agents against a simulated model, no key.

    With --llm the 'model' is a scripted simulation served on 127.0.0.1: the LLM path
    works end to end (proposer, coder, reviewer, metering) without a key."""
    from revtree.agents.llm.fake_server import FakeLLMServer
    from revtree.orchestrator.commands.scaffold import DemoResponder

    with tempfile.TemporaryDirectory(prefix="revtree-demo-") as tmp:
        task = demo_task(Path(tmp))
        if not llm:
            console.print(f"demo: {escape(str(task))} with the offline agents")
            run_command(task, budget_nodes=budget_nodes, sandbox=sandbox, db=db, quiet=quiet)
            return
        responder = DemoResponder()
        with FakeLLMServer(responder) as srv:
            console.print(
                "[bold]simulation:[/bold] no real model answers here; a scripted responder "
                f"plays the model, served at {srv.openai_url} (OpenAI-compatible)"
            )
            console.print(f"demo: {escape(str(task))} with LLM agents on {DEMO_MODEL}")
            try:
                run_command(
                    task,
                    budget_nodes=budget_nodes,
                    sandbox=sandbox,
                    model=DEMO_MODEL,
                    base_url=srv.openai_url,
                    db=db,
                    quiet=quiet,
                )
            finally:
                show_answers(responder)
        console.print(
            "with a real model:  revtree run TASK --model openai:gpt-4o-mini (OPENAI_API_KEY), "
            "or --model openai-compatible:NAME --base-url URL"
        )


def demo_task(tmp: Path) -> Path:
    """The bundled example next to the package, else a small task written into ``tmp``."""
    import revtree
    from revtree.orchestrator.commands.scaffold import scaffold

    bundled = Path(revtree.__file__).resolve().parent.parent / "examples" / EXAMPLE
    if (bundled / "task.toml").is_file():
        return bundled
    program = tmp / "program.py"
    program.write_text(DEMO_PROGRAM, encoding="utf-8")
    return scaffold(tmp / "demo", program, "rmse", "minimize", name="demo").folder


def show_answers(responder: DemoResponder, n: int = 3) -> None:
    answers = list(responder.answers)
    console.print(f"\nthe simulated model answered {len(answers)} call(s); the first of each role:")
    seen: set[str] = set()
    for role, text in answers:
        if role in seen or role == "other" or len(seen) >= n:  # other: run's model check
            continue
        seen.add(role)
        console.print(f"[bold]{role}:[/bold]")
        for line in text.splitlines()[:8]:
            console.print(f"  {escape(line)}", soft_wrap=True)
