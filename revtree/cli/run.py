"""The commands that start runs or evaluations and drive them: run, resume, holdout,
pilot, fork and retry, with the live log and its progress bar, Ctrl-C handling and
detaching into the background."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import warnings
from importlib import import_module
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from revtree.cli.app import (
    DbOpt,
    DetachOpt,
    ParallelOpt,
    QuietOpt,
    RunArg,
    app,
    console,
    err,
    node_or_best,
    open_store,
)
from revtree.cli.render import LiveLog, fmt, print_event, print_summary
from revtree.errors import RevtreeError, RunBusy, SandboxError
from revtree.memory.records import TWIN, RunInfo, RunStatus
from revtree.tasks.names import POLICIES

CORE = "revtree.orchestrator.core"  # what driving a run imports: LangGraph, the pipeline
if TYPE_CHECKING:
    from revtree.memory.store import Store
    from revtree.tasks.spec import TaskSpec


def _install_stop(stop: threading.Event) -> None:
    def handler(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():  # second Ctrl-C: give up at once
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        stop.set()
        err.print(
            f"[yellow]{signal.Signals(signum).name}: stopping after cancelling the "
            "evaluations in flight (again to abort)...[/yellow]"
        )

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def _drive(store: Store, run: RunInfo, parallel: str | None, quiet: bool, home: Path) -> None:
    from revtree.agents.llm import LLMError
    from revtree.orchestrator.core import Orchestrator

    spec_budget = run.spec.get("budget", {}).get("max_nodes")
    done = sum(n.status.is_finished() and n.error_kind != TWIN for n in store.nodes(run.id))
    live = LiveLog(run, spec_budget, quiet, done)
    stop = threading.Event()
    _install_stop(stop)
    with live.progress:
        try:
            width = parallel if parallel == "auto" else int(parallel) if parallel else None
            orch = Orchestrator(store, run.id, home=home, on_event=live, parallel=width)
        except Exception as e:  # e.g. no sandbox: the run cannot start; say so in it too
            _failed_to_start(store, run.id, e)
            if isinstance(e, LLMError):
                raise LLMError(
                    f"{e}; `revtree resume {run.id} --base-url URL` (or --model) continues it"
                ) from None
            raise
        live.progress.update(live.task, completed=live.done)
        final = orch.drive(stop)
    print_summary(store, final)
    if final.status is RunStatus.STOPPED:
        raise typer.Exit(130)
    if final.status is RunStatus.FAILED:
        raise typer.Exit(1)


def _failed_to_start(store: Store, run_id: str, e: Exception) -> None:
    """Mark a run that could not start ``failed`` with the reason (never left
    ``running``), unless a live process drives it (this one only failed to join)."""
    from revtree.orchestrator.run import alive

    current = store.get_run(run_id)
    if current.status.is_finished() or (current.pid and alive(current.pid, current.host)):
        return
    store.update_run(
        run_id,
        ("run", f"run failed to start: {e}", None),
        status=RunStatus.FAILED,
        reason=f"could not start: {e}; fix it, then `revtree resume {run_id}` (with "
        "`--reload` where the fix is in task.toml or the evaluator)",
        pid=None,
    )


def check_models(spec: TaskSpec, then: str = "", warm: bool = False) -> None:
    """Build the clients of the models a run's agents will call, as the run does, and make
    ``check``'s call of one token to each, so that a model that cannot be called (no key,
    a server that does not answer) is refused before a run is created, changed or evaluated.
    ``warm``: import the orchestrator while the calls wait (``require_models``' beside)."""
    from revtree.agents.llm import LLMError
    from revtree.orchestrator.commands.models import require_models

    try:
        require_models(spec, beside=(lambda: import_module(CORE)) if warm else None)
    except LLMError as e:  # ``then``: what the refusal left as it was
        raise LLMError(f"{e}; {then}" if then else str(e)) from None


def _agents(model: str | None, base_url: str | None) -> dict[str, Any]:
    """The [agents] overrides of --model and --base-url (a model means LLM agents)."""
    agents: dict[str, Any] = {k: v for k, v in {"model": model, "base_url": base_url}.items() if v}
    return {**agents, "mode": "llm"} if model else agents


def _reconfigure(store: Store, run: RunInfo, agents: dict[str, Any], warm: bool) -> RunInfo:
    """Store --model / --base-url into the run's spec before it is resumed (checked first,
    ``warm`` as ``check_models`` takes it; refused while a live process drives the run)."""
    from revtree.orchestrator.run import alive
    from revtree.tasks.spec import TaskSpec

    if run.status is RunStatus.RUNNING and run.pid and alive(run.pid, run.host):
        raise RunBusy(f"run {run.id} is being driven by pid {run.pid} on {run.host}")
    try:
        spec = TaskSpec.stored(run.spec).with_overrides(agents=agents)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    check_models(spec, warm=warm)
    sets = [f"agents.{k}={v}" for k, v in agents.items()]
    store.update_run(
        run.id,
        ("run", f"config changed for the resume: {', '.join(sets)}", {"set": sets}),
        spec=spec.model_dump(mode="json"),
    )
    return store.get_run(run.id)


def _detach(run: RunInfo, db: str | None, home: Path, parallel: str | None) -> None:
    from revtree.orchestrator.run import RunPaths

    log = RunPaths(home, run.id).dir / "run.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "revtree", "resume", run.id, "--quiet"]
    if db:
        cmd += ["--db", db]
    if parallel:
        cmd += ["--parallel", str(parallel)]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "REVTREE_HOME": str(home)},
        )
    console.print(
        f"run {run.id} detached (pid {proc.pid}), log {log}\nwatch it:  revtree watch {run.id}"
    )


def _load(task: Path) -> TaskSpec:
    """Load a task, printing the loader's warnings (ignored keys of imported formats)."""
    from revtree.tasks.compat import CompatNote
    from revtree.tasks.load import load_task

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = load_task(task)
    for w in caught:
        what = "mapped" if issubclass(w.category, CompatNote) else "[yellow]warning:[/yellow]"
        err.print(f"{what} {escape(str(w.message))}")
    return spec


@app.command()
def run(
    task: Annotated[Path, typer.Argument(help="Task folder (holding task.toml) or the file.")],
    policy: Annotated[
        str | None, typer.Option(help=f"Search policy: {', '.join(POLICIES)}.")
    ] = None,
    parallel: ParallelOpt = None,
    budget_nodes: Annotated[int | None, typer.Option(help="Nodes, root included.")] = None,
    budget_time: Annotated[str | None, typer.Option(help="Wall time, e.g. 600, '10m'.")] = None,
    budget_sandbox: Annotated[str | None, typer.Option(help="Sandbox-seconds, e.g. '1h'.")] = None,
    sandbox: Annotated[str | None, typer.Option(help="local, bwrap, docker or auto.")] = None,
    runner: Annotated[
        str | None, typer.Option(help="Where evaluations run: local, or ray (a Ray cluster).")
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="The Ray cluster: auto, ray://HOST:10001 or HOST:PORT (implies ray)."),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the policy and proposer.")] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="LLM for all roles: openai:NAME, anthropic:NAME, openai-compatible:NAME."
        ),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option(help="OpenAI-compatible server, e.g. http://host:8000/v1.")
    ] = None,
    budget_usd: Annotated[float | None, typer.Option(help="LLM spend cap in dollars.")] = None,
    approve: Annotated[
        bool,
        typer.Option(
            "--approve",
            help="Hold each candidate before its evaluation until `revtree approve RUN NODE` "
            "(or `reject`); its hypothesis and diff are in the live log.",
        ),
    ] = False,
    db: DbOpt = None,
    detach: DetachOpt = False,
    quiet: QuietOpt = False,
    dashboard: Annotated[
        bool,
        typer.Option("--dashboard", help="Serve the web dashboard beside the run (on 127.0.0.1)."),
    ] = False,
    dashboard_port: Annotated[
        int, typer.Option(help="The dashboard's port (0: any free port).", min=0, max=65535)
    ] = 8765,
) -> None:
    """Start a run of TASK and show its live log."""
    if dashboard and detach:
        raise typer.BadParameter(
            "--dashboard serves from the run's own process; with --detach, start "
            "`revtree dashboard` instead"
        )
    spec = _load(task)
    search: dict[str, Any] = {"approve": "evaluate"} if approve else {}
    if policy:
        search["policy"] = policy
    if parallel and parallel != "auto":  # auto is this session's, not the task's
        search["parallel"] = int(parallel)
    if seed is not None:
        search["seed"] = seed
    budget = {
        k: v
        for k, v in {
            "max_nodes": budget_nodes,
            "max_wall": budget_time,
            "max_sandbox_seconds": budget_sandbox,
            "max_usd": budget_usd,
        }.items()
        if v is not None
    }
    try:
        spec = spec.with_overrides(
            search=search,
            budget=budget,
            sandbox={"backend": sandbox} if sandbox else {},
            runner={
                k: v
                for k, v in {
                    "kind": runner or ("ray" if ray_address else None),
                    "address": ray_address,
                }.items()
                if v
            },
            agents=_agents(model, base_url),
        )
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    check_models(spec, f"no run was created (`revtree check {task}` tells more)", not detach)
    from revtree.memory.home import revtree_home  # (after the check's call: it goes out first)
    from revtree.orchestrator.run import create_run
    from revtree.orchestrator.wiring import sandbox_choice

    try:  # refused (code a model writes, no Docker) or the base image built: before a run
        sandbox_choice(spec)
    except SandboxError as e:
        raise SandboxError(f"{e}; no run was created") from None
    home = revtree_home()
    store = open_store(db, create=True)
    dash = _bind_dashboard(store.url, dashboard_port, home) if dashboard else None
    new = create_run(store, spec, home)
    console.print(
        f"run [bold]{new.id}[/bold] · task {spec.name} · {spec.evaluate.metric} "
        f"({spec.evaluate.direction}) · policy {spec.search.policy}"
    )
    if detach:
        _detach(new, db, home, parallel)
        return
    if dash is not None:  # served from a thread of this process, its line before the log
        dash.start()  # through the pipe-safe console: `| head -1` must not end the run
        console.print(f"dashboard: {dash.url}#/run/{new.id}", soft_wrap=True, markup=False)
    try:
        _drive(store, new, "auto" if parallel == "auto" else None, quiet, home)
    finally:
        if dash is not None:  # answer what is in flight (a stop from the page) first
            dash.stop()


def _bind_dashboard(db: str, port: int, home: Path) -> Any:
    """The dashboard's socket bound before the run is created (a busy port: no run)."""
    from revtree.web import Dashboard, PortBusy

    try:
        return Dashboard(db, "127.0.0.1", port, home=home)
    except PortBusy as e:
        raise RevtreeError(f"{e} (--dashboard-port)") from None


@app.command()
def resume(
    run_id: RunArg,
    parallel: ParallelOpt = None,
    model: Annotated[
        str | None,
        typer.Option(help="Switch the LLM of all roles (stored with the run), as for run."),
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(help="OpenAI-compatible server, e.g. http://host:8000/v1 (stored)."),
    ] = None,
    reload: Annotated[
        bool,
        typer.Option(
            "--reload",
            help="First read task.toml and the protected (evaluator) files again from the "
            "run's task folder, showing what changed (a metric change once scored: fork).",
        ),
    ] = False,
    db: DbOpt = None,
    detach: DetachOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Continue a stopped or crashed run where it left off."""
    from revtree.agents.llm import LLMError
    from revtree.memory.home import revtree_home
    from revtree.orchestrator.commands.reload import reload_task
    from revtree.tasks.spec import TaskSpec

    store = open_store(db)
    found = store.get_run(run_id)
    if reload:
        for line in reload_task(store, found.id, revtree_home()).lines():
            console.print(line, markup=False, soft_wrap=True)
        found = store.get_run(found.id)
    if agents := _agents(model, base_url):
        found = _reconfigure(store, found, agents, not detach)
        changed = ", ".join(f"agents.{k}={v}" for k, v in agents.items())
        console.print(f"run [bold]{found.id}[/bold]: {escape(changed)} stored")
    elif not detach and found.status is not RunStatus.COMPLETED:
        try:
            check_models(TaskSpec.stored(found.spec), warm=True)
        except LLMError as e:  # a run that never started is failed, not left `running`
            _failed_to_start(store, found.id, e)
            then = f"`revtree resume {found.id}` once it answers (or with --base-url/--model)"
            raise LLMError(f"{e}; nothing was evaluated: {then}") from None
    if detach:
        _detach(found, db, revtree_home(), parallel)
        return
    _drive(store, found, parallel, quiet, revtree_home())


@app.command()
def holdout(
    run_id: RunArg,
    node: Annotated[int | None, typer.Option(help="Node id (default: the best).")] = None,
    db: DbOpt = None,
) -> None:
    """Run the task's hidden holdout evaluation on a node and record it."""
    from revtree.orchestrator.core import Orchestrator

    store = open_store(db)
    found = store.get_run(run_id)
    node_id = node_or_best(store, found, node)
    orch = Orchestrator(store, found.id, on_event=print_event)
    try:
        result = orch.trust.holdout(node_id)
    finally:
        orch.close()
    if result is None:
        raise RevtreeError(f"the task of run {found.id} has no [holdout] section")


@app.command()
def pilot(
    task: Annotated[Path, typer.Argument(help="Task folder (holding task.toml) or the file.")],
    evals: Annotated[int, typer.Option(help="Evaluations to spend in all.")] = 12,
    repeats: Annotated[int, typer.Option(help="Of which baseline repeats (noise).")] = 4,
    db: DbOpt = None,
) -> None:
    """Spend a small budget characterising TASK, then recommend a policy and parameters."""
    from revtree.memory.home import revtree_home
    from revtree.orchestrator.commands.pilot import analyse, driver_of, format_report
    from revtree.orchestrator.core import Orchestrator
    from revtree.orchestrator.run import create_run

    if not 2 <= repeats < evals:
        raise typer.BadParameter("need 2 <= --repeats < --evals")
    spec = _load(task).with_overrides(
        search={"policy": "optuna", "parallel": 1, "approve": "off"},
        budget={"max_nodes": evals - repeats + 1},
    )
    store, home = open_store(db, create=True), revtree_home()
    new = create_run(store, spec, home)
    console.print(
        f"pilot run [bold]{new.id}[/bold]: {evals - repeats} proposals from the root "
        f"and {repeats} baseline repeats"
    )
    live = LiveLog(new, evals - repeats + 1, quiet=True)
    with live.progress:
        Orchestrator(store, new.id, home=home, on_event=live).drive()
    orch = Orchestrator(store, new.id, home=home)
    try:
        orch.trust.verify(0, repeats)
    finally:
        orch.close()
    report = analyse(
        store.nodes(new.id),
        store.evaluations(new.id),
        spec.maximize,
        budget_evals=evals,
        driver=driver_of(spec),
    )
    for line in format_report(report):
        console.print(line, markup=False)


@app.command()
def fork(
    run_id: RunArg,
    node: Annotated[int, typer.Option(help="The node to continue from.")],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Change a task key, e.g. search.policy=mcts (repeatable)."),
    ] = None,
    task: Annotated[Path | None, typer.Option(help="Use this task file instead.")] = None,
    with_tree: Annotated[bool, typer.Option(help="Inherit the whole tree as history.")] = False,
    db: DbOpt = None,
    detach: DetachOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Start a new run from NODE of RUN, with a changed configuration."""
    from revtree.memory.home import revtree_home
    from revtree.orchestrator.commands.fork import apply_sets, fork_run
    from revtree.tasks.spec import TaskSpec

    store, home = open_store(db), revtree_home()
    parent = store.get_run(run_id)
    spec = _load(task) if task else TaskSpec.stored(parent.spec)
    spec = apply_sets(spec, set_ or [])
    new = fork_run(store, parent.id, node, spec, home, with_tree, task_files=task is not None)
    console.print(
        f"run [bold]{new.id}[/bold] forked from {parent.id} at node {node} "
        f"({len(store.nodes(new.id))} nodes of history) · policy {new.policy}"
    )
    if detach:
        _detach(new, db, home, None)
        return
    _drive(store, new, None, quiet, home)


@app.command()
def retry(
    run_id: RunArg,
    node: Annotated[int, typer.Argument(help="The node to re-run.")],
    from_: Annotated[
        str | None,
        typer.Option(
            "--from",
            help="propose, code or evaluate (default: the first step whose work the node "
            "lacks, else evaluate).",
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Change a run key, e.g. sandbox.memory=8g (repeatable)."),
    ] = None,
    db: DbOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Re-run NODE of RUN from a step as its next attempt (the earlier attempt is kept)."""
    from revtree.memory.home import revtree_home
    from revtree.orchestrator.commands.retry import retry as run_retry

    store = open_store(db)
    found = store.get_run(run_id)
    show = None if quiet else print_event
    done = run_retry(store, found.id, node, from_, set_ or [], revtree_home(), show)
    what = (
        f"scored {fmt(done.score)}"
        if done.status.value == "succeeded"
        else f"{done.status.value} ({done.error_kind}): {done.error}"
    )
    console.print(f"node {node} of run {found.id}, attempt {done.attempt}: {what}", markup=False)
