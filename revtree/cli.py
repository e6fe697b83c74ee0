"""The ``revtree`` command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from rich.tree import Tree as RichTree

from revtree.errors import RevtreeError
from revtree.memory import Event, GitStore, RunInfo, RunStatus, Store
from revtree.memory.db import revtree_home
from revtree.orchestrator import Orchestrator, RunPaths, create_run
from revtree.orchestrator.report import compare as compare_runs
from revtree.orchestrator.report import (
    gain_text,
    node_json,
    recommendation_note,
    summarize,
    transcript_renderables,
    transcripts,
)
from revtree.sandbox_cli import sandbox_app
from revtree.tasks import TaskSpec, load_task
from revtree.tasks.spec import POLICIES

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Grow a tree of git revisions of your code, scored by your evaluator.",
)
app.add_typer(sandbox_app, name="sandbox")
console = Console(highlight=False)
err = Console(stderr=True, highlight=False)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db", help="SQLAlchemy URL (default $REVTREE_DB or sqlite at $REVTREE_HOME/revtree.db)."
    ),
]
DetachOpt = Annotated[bool, typer.Option(help="Keep running in the background.")]
QuietOpt = Annotated[bool, typer.Option(help="No live log lines, only the summary.")]
ParallelOpt = Annotated[int | None, typer.Option(help="Evaluations running at once.")]
RunArg = Annotated[str, typer.Argument(help="Run id, a unique prefix of it, or 'last'.")]
STYLES = {
    "select": "cyan",
    "propose": "blue",
    "commit": "dim",
    "review": "dim",
    "eval": "white",
    "node": "bold",
    "best": "bold green",
    "run": "bold magenta",
    "error": "bold red",
    "holdout": "yellow",
    "retry": "bold yellow",
}


def main() -> None:
    from revtree.sandboxes.local import protect_orchestrator

    protect_orchestrator()  # our /proc/PID/environ (API keys) out of the sandboxes' reach
    try:
        app()
    except RevtreeError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise SystemExit(2) from None


def _store(db: str | None) -> Store:
    return Store(db)


def format_event(ev: Event) -> Text:
    stamp = time.strftime("%H:%M:%S", time.localtime(ev.ts))
    style = STYLES.get(ev.kind, "")
    if ev.kind == "node" and (ev.data or {}).get("status") in ("failed", "rejected"):
        style = "red"
    line = Text(f"{stamp} {ev.seq:>5} {ev.kind:<8} ", style="dim")
    line.append(ev.message, style=style)
    return line


class LiveLog:
    """Prints each committed event and keeps a progress bar over the node budget."""

    def __init__(self, run: RunInfo, total: int | None, quiet: bool = False) -> None:
        self.quiet, self.maximize, self.best = quiet, run.maximize, None
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("nodes"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[best]}"),
            console=console,
            transient=False,
        )
        self.task = self.progress.add_task(run.id, total=total, best="")
        self.done = 0

    def __call__(self, ev: Event) -> None:
        if not self.quiet:
            self.progress.console.print(format_event(ev), soft_wrap=True)
        if ev.kind == "node":
            self.done += 1
            self.progress.update(self.task, completed=self.done)
        if ev.kind == "best":
            score = ev.data.get("score") if ev.data else None
            self.progress.update(self.task, best=f"best {_fmt(score)}")


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


def _drive(store: Store, run: RunInfo, parallel: int | None, quiet: bool, home: Path) -> None:
    spec_budget = run.spec.get("budget", {}).get("max_nodes")
    live = LiveLog(run, spec_budget, quiet)
    live.done = sum(n.status.is_finished() for n in store.nodes(run.id))
    stop = threading.Event()
    _install_stop(stop)
    with live.progress:
        try:
            orch = Orchestrator(store, run.id, home=home, on_event=live, parallel=parallel)
        except RevtreeError as e:  # e.g. no sandbox: the run cannot start; say so in it too
            if not store.get_run(run.id).status.is_finished():
                store.update_run(
                    run.id,
                    ("run", f"run failed to start: {e}", None),
                    status=RunStatus.FAILED,
                    reason=f"could not start: {e}",
                )
            raise
        live.progress.update(live.task, completed=live.done)
        final = orch.drive(stop)
    _print_summary(store, final)
    if final.status is RunStatus.STOPPED:
        raise typer.Exit(130)
    if final.status is RunStatus.FAILED:
        raise typer.Exit(1)


def _print_summary(store: Store, run: RunInfo) -> None:
    s = summarize(store, run)
    table = Table(title=f"run {run.id}", show_header=False, title_style="bold")
    table.add_row("status", f"{s['status']} ({s['reason']})")
    table.add_row(
        "nodes",
        f"{s['n_nodes']} ({s['n_succeeded']} ok, {s['n_failed']} failed, "
        f"{s['n_in_flight']} unfinished)",
    )
    table.add_row("baseline", _fmt(s["baseline_score"]))
    table.add_row("best", f"{_fmt(s['best_score'])} at node {s['best_node']}{gain_text(s)}")
    for h in s["holdout"]:
        table.add_row("holdout", f"node {h['node']}: {_fmt(h['score']) if h['ok'] else h['error']}")
    if s["guard"]["runs"]:
        table.add_row("guard", f"{s['guard']['runs']} guard holdouts, {s['guard']['seconds']:.1f}s")
    for a in s["alarms"]:
        if a.get("kind") != "subtree":
            table.add_row("alarm", escape(f"node {a['node']} ({a['kind']}): {a['message']}"))
    table.add_row("time", f"{s['wall_seconds']:.1f}s wall, {s['sandbox_seconds']:.1f} sandbox-s")
    llm = s["llm"]
    if llm["calls"]:
        roles = ", ".join(f"{r} ${v['usd']:.4f}" for r, v in llm["by_role"].items())
        cached = (
            f", {llm['cached_share']:.0%} of prompt tokens cached" if llm["cached_share"] else ""
        )
        table.add_row(
            "LLM",
            f"${llm['usd']:.4f} in {llm['calls']} calls ({roles}), "
            f"{llm['input_tokens'] + llm['output_tokens']} tokens{cached}",
        )
    console.print(table)
    if (note := recommendation_note(s)) is not None:
        console.print(escape(note))
    if s["best_node"] not in (None, 0):  # the baseline is your own code: nothing to export
        console.print(
            f"export it:  revtree export {run.id} --node {s['best_node']} --patch best.patch"
        )
    if run.status is not RunStatus.COMPLETED:
        console.print(f"continue:   revtree resume {run.id}")


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.6g}"


def _detach(run: RunInfo, db: str | None, home: Path, parallel: int | None) -> None:
    log = RunPaths(home, run.id).dir / "run.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "revtree", "resume", run.id, "--quiet"]
    if db:
        cmd += ["--db", db]
    if parallel:
        cmd += ["--parallel", str(parallel)]
    env = {**os.environ, "REVTREE_HOME": str(home)}
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    console.print(
        f"run {run.id} detached (pid {proc.pid}), log {log}\nwatch it:  revtree watch {run.id}"
    )


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
    sandbox: Annotated[str | None, typer.Option(help="local, docker or auto.")] = None,
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
    db: DbOpt = None,
    detach: DetachOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Start a run of TASK and show its live log."""
    spec = _load(task)
    search: dict[str, Any] = {}
    if policy:
        search["policy"] = policy
    if parallel:
        search["parallel"] = parallel
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
        agents: dict[str, Any] = {
            k: v for k, v in {"model": model, "base_url": base_url}.items() if v
        }
        if agents:
            agents["mode"] = "llm"
        spec = spec.with_overrides(
            search=search,
            budget=budget,
            sandbox={"backend": sandbox} if sandbox else {},
            agents=agents,
        )
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    home = revtree_home()
    store = _store(db)
    new = create_run(store, spec, home)
    console.print(
        f"run [bold]{new.id}[/bold] · task {spec.name} · {spec.evaluate.metric} "
        f"({spec.evaluate.direction}) · policy {spec.search.policy}"
    )
    if detach:
        _detach(new, db, home, parallel)
        return
    _drive(store, new, None, quiet, home)


@app.command()
def resume(
    run_id: RunArg,
    parallel: ParallelOpt = None,
    db: DbOpt = None,
    detach: DetachOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Continue a stopped or crashed run where it left off."""
    store = _store(db)
    found = store.get_run(run_id)
    if detach:
        _detach(found, db, revtree_home(), parallel)
        return
    _drive(store, found, parallel, quiet, revtree_home())


@app.command()
def watch(
    run_id: RunArg,
    db: DbOpt = None,
    since: Annotated[int, typer.Option(help="Show events after this seq (0: all).")] = 0,
    poll: Annotated[float, typer.Option(help="Seconds between polls.")] = 0.25,
    timeout: Annotated[float | None, typer.Option(help="Give up after this many seconds.")] = None,
) -> None:
    """Follow a run's live log from another terminal until the run ends."""
    store = _store(db)
    found = store.get_run(run_id)
    last, start = since, time.monotonic()
    while True:
        events = store.events_since(found.id, last)
        for ev in events:
            console.print(format_event(ev), soft_wrap=True)
            last = ev.seq
        if not events:
            current = store.get_run(found.id)
            if current.status.is_finished() and not store.events_since(found.id, last):
                console.print(f"run {current.status.value}: {current.reason}")
                return
            if timeout is not None and time.monotonic() - start > timeout:
                raise typer.Exit(1)
            time.sleep(poll)


@app.command("ls")
def ls(
    db: DbOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    tree: Annotated[bool, typer.Option("--tree", help="Show forks as a family tree.")] = False,
) -> None:
    """List runs."""
    store = _store(db)
    rows = [summarize(store, r) for r in store.list_runs()]
    if as_json:
        console.print_json(json.dumps(rows))
        return
    if tree:
        console.print(_family_tree(rows))
        return
    table = Table("run", "task", "status", "policy", "nodes", "baseline", "best", "created")
    for s in rows:
        table.add_row(
            s["run_id"],
            s["task"],
            s["status"],
            s["policy"],
            str(s["n_nodes"]),
            _fmt(s["baseline_score"]),
            _fmt(s["best_score"]),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(s["created_at"])),
        )
    console.print(table)


@app.command()
def show(
    run_id: RunArg,
    node: Annotated[int | None, typer.Option(help="Show one node in detail.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    nodes: Annotated[bool, typer.Option("--nodes", help="Include every node.")] = False,
    transcript: Annotated[
        bool,
        typer.Option(
            "--transcript",
            help="The prompts and replies of the model calls (the node's, with --node).",
        ),
    ] = False,
    db: DbOpt = None,
) -> None:
    """Show a run (or one node) as a table or JSON."""
    store = _store(db)
    found = store.get_run(run_id)
    if node is not None:
        data = node_json(store.node(found.id, node))
        data["evaluations"] = [e.__dict__ for e in store.evaluations(found.id, node)]
    else:
        data = summarize(store, found, with_nodes=nodes)
    if transcript:
        data["transcript"] = transcripts(store, found.id, node)
    if as_json:
        print(json.dumps(data, indent=2, default=str))
        return
    if transcript:
        _print_pipe_safe(transcript_renderables(data["transcript"]))
        return
    table = Table(show_header=False, title=f"run {found.id}" + (f" node {node}" if node else ""))
    for k, v in data.items():
        if k not in ("nodes", "evaluations"):
            table.add_row(k, str(v))
    console.print(table)
    if nodes and "nodes" in data:
        nt = Table("id", "parent", "op", "status", "score", "commit", "hypothesis / error")
        for n in data["nodes"]:
            nt.add_row(
                str(n["id"]),
                str(n["parent"]),
                n["operator"],
                n["status"],
                _fmt(n["score"]),
                (n["commit"] or "")[:10],
                (n["error"] or n["hypothesis"] or "")[:70],
            )
        console.print(nt)


def _print_pipe_safe(renderables: list[Any]) -> None:
    """Print, and end quietly when the reader goes away (``| head``)."""
    try:
        for r in renderables:
            console.print(r)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None


@app.command()
def compare(
    run_ids: Annotated[list[str], typer.Argument(help="Two or more runs (ids, prefixes, 'last').")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
    db: DbOpt = None,
) -> None:
    """Runs side by side: a fork against its parent, say (what each added itself too)."""
    store = _store(db)
    runs = [store.get_run(r) for r in run_ids]
    rows = compare_runs(store, runs)
    if as_json:
        data = {r.id: {k: v[i] for k, v in rows} for i, r in enumerate(runs)}
        print(json.dumps(data, indent=2, default=str))
        return
    table = Table("", *(r.id for r in runs), title="runs compared")
    for key, values in rows:
        table.add_row(key, *(_fmt(v) if isinstance(v, float) else str(v) for v in values))
    console.print(table)


def _git(found: RunInfo) -> GitStore:
    return GitStore(RunPaths(revtree_home(), found.id).repo)


@app.command()
def diff(
    run_id: RunArg,
    node: Annotated[int, typer.Argument(help="Node id.")],
    against: Annotated[str, typer.Option(help="'parent', 'root', or a node id.")] = "parent",
    db: DbOpt = None,
) -> None:
    """Print the diff of NODE against its parent (or the root, or another node)."""
    store = _store(db)
    found = store.get_run(run_id)
    target = store.node(found.id, node)
    if against == "parent":
        base_id = target.parent_id if target.parent_id is not None else target.id
    else:
        base_id = 0 if against == "root" else int(against)
    base = store.node(found.id, base_id)
    if not (base.commit and target.commit):
        raise RevtreeError(f"node {node} or {base_id} of run {found.id} has no commit yet")
    sys.stdout.write(_git(found).diff(base.commit, target.commit))


def _load(task: Path) -> TaskSpec:
    """Load a task, printing the loader's warnings (ignored keys of imported formats)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = load_task(task)
    from revtree.tasks.compat import CompatNote

    for w in caught:
        what = "mapped" if issubclass(w.category, CompatNote) else "[yellow]warning:[/yellow]"
        err.print(f"{what} {escape(str(w.message))}")
    return spec


def _family_tree(rows: list[dict[str, Any]]) -> RichTree:
    top = RichTree("runs")
    by_parent: dict[str | None, list[dict[str, Any]]] = {}
    ids = {r["run_id"] for r in rows}
    for r in rows:
        parent = r["parent_run"] if r["parent_run"] in ids else None
        by_parent.setdefault(parent, []).append(r)

    def add(branch: RichTree, parent: str | None) -> None:
        for r in by_parent.get(parent, []):
            where = f" (from node {r['parent_node']})" if r["parent_run"] else ""
            sub = branch.add(
                f"[bold]{r['run_id']}[/bold]{where} · {r['status']} · "
                f"{r['policy']} · {r['n_nodes']} nodes · best {_fmt(r['best_score'])}"
            )
            add(sub, r["run_id"])

    add(top, None)
    return top


def _node_or_best(store: Store, run: RunInfo, node: int | None) -> int:
    """The node asked for, else the recommended one (the best without a drift alarm),
    saying why when alarms moved the choice."""
    if node is not None:
        return node
    s = summarize(store, run)
    if s["best_node"] is None:
        raise RevtreeError(f"run {run.id} has no succeeded node without an alarm; pass --node")
    if (note := recommendation_note(s)) is not None:
        err.print(escape(note))
    best: int = s["best_node"]
    return best


@app.command()
def export(
    run_id: RunArg,
    patch: Annotated[
        Path | None, typer.Option(help="Write a patch (against the root) to this file.")
    ] = None,
    node: Annotated[int | None, typer.Option(help="Node id (default: the best).")] = None,
    branch: Annotated[
        str | None, typer.Option(help="Commit the node onto a new branch of --repo instead.")
    ] = None,
    repo: Annotated[
        Path, typer.Option(help="Your git repository (holding the task's source folder).")
    ] = Path("."),
    db: DbOpt = None,
) -> None:
    """Export a node (by default the best) as a patch, or as a branch of your repository."""
    if (patch is None) == (branch is None):
        raise typer.BadParameter("give exactly one of --patch FILE or --branch NAME")
    store = _store(db)
    found = store.get_run(run_id)
    node_id = _node_or_best(store, found, node)
    if branch is not None:
        from revtree.orchestrator.housekeeping import export_branch

        done = export_branch(store, found.id, node_id, repo, branch, revtree_home())
        console.print(
            f"branch {done.branch} ({done.commit[:10]} on {done.parent[:10]}): node {node_id} "
            f"of run {found.id}, {len(done.files)} file(s) changed"
        )
        return
    assert patch is not None
    target, root = store.node(found.id, node_id), store.node(found.id, 0)
    if not (target.commit and root.commit):
        raise RevtreeError(f"node {node_id} of run {found.id} has no commit yet")
    patch.write_text(_git(found).diff(root.commit, target.commit))
    console.print(
        f"wrote {patch}: node {node_id} (score {_fmt(target.score)}) against the "
        f"baseline; apply with `git apply {patch}` in your source folder"
    )


@app.command()
def holdout(
    run_id: RunArg,
    node: Annotated[int | None, typer.Option(help="Node id (default: the best).")] = None,
    db: DbOpt = None,
) -> None:
    """Run the task's hidden holdout evaluation on a node and record it."""
    store = _store(db)
    found = store.get_run(run_id)
    node_id = _node_or_best(store, found, node)
    orch = Orchestrator(store, found.id, on_event=lambda ev: console.print(format_event(ev)))
    try:
        result = orch.holdout(node_id)
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
    from revtree.orchestrator.pilot import analyse, format_report

    if not 2 <= repeats < evals:
        raise typer.BadParameter("need 2 <= --repeats < --evals")
    spec = _load(task).with_overrides(
        search={"policy": "optuna", "parallel": 1}, budget={"max_nodes": evals - repeats + 1}
    )
    store, home = _store(db), revtree_home()
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
        orch.verify(0, repeats)
    finally:
        orch.close()
    report = analyse(
        store.nodes(new.id), store.evaluations(new.id), spec.maximize, budget_evals=evals
    )
    for line in format_report(report):
        console.print(line)


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
    from revtree.orchestrator.fork import apply_sets, fork_run

    store, home = _store(db), revtree_home()
    parent = store.get_run(run_id)
    spec = _load(task) if task else TaskSpec.model_validate(parent.spec)
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
    from revtree.orchestrator.retry import retry as run_retry

    store = _store(db)
    found = store.get_run(run_id)
    show = None if quiet else (lambda ev: console.print(format_event(ev), soft_wrap=True))
    done = run_retry(store, found.id, node, from_, set_ or [], revtree_home(), show)
    what = (
        f"scored {_fmt(done.score)}"
        if done.status.value == "succeeded"
        else f"{done.status.value} ({done.error_kind}): {done.error}"
    )
    console.print(f"node {node} of run {found.id}, attempt {done.attempt}: {what}")


@app.command()
def rm(
    run_id: RunArg,
    db: DbOpt = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
) -> None:
    """Delete a run: its rows, its git store and its logs (forks of it keep working)."""
    import shutil

    store = _store(db)
    found = store.get_run(run_id)
    if found.status is RunStatus.RUNNING and found.pid:
        raise RevtreeError(f"run {found.id} is running (pid {found.pid}); stop it first")
    children = [r.id for r in store.list_runs() if r.parent_run == found.id]
    if not yes and not typer.confirm(f"delete run {found.id}?"):
        raise typer.Exit(1)
    path = RunPaths(revtree_home(), found.id).dir
    if children:  # forks borrow this run's git objects: keep them, drop the rest
        for sub in ("logs", "work"):
            shutil.rmtree(path / sub, ignore_errors=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
    store.delete_run(found.id)
    console.print(
        f"deleted run {found.id}" + (f" (its git objects stay for {children})" if children else "")
    )


@app.command()
def stop(run_id: RunArg, db: DbOpt = None) -> None:
    """Ask the process driving a run (on this machine) to stop cleanly."""
    store = _store(db)
    found = store.get_run(run_id)
    if found.status.is_finished() or not found.pid:
        console.print(f"run {found.id} is not running ({found.status.value})")
        return
    try:
        os.kill(found.pid, signal.SIGTERM)
    except ProcessLookupError:
        console.print(f"run {found.id}: its process {found.pid} is gone; `revtree resume` it")
        return
    console.print(f"asked pid {found.pid} to stop run {found.id}")


@app.command()
def doctor(
    run_id: Annotated[str | None, typer.Argument(help="Only this run (default: all).")] = None,
    repair: Annotated[bool, typer.Option(help="Fix what can be fixed.")] = False,
    db: DbOpt = None,
) -> None:
    """Check the database against the git stores and the run processes (--repair fixes)."""
    from revtree.orchestrator.housekeeping import doctor as check

    findings = check(_store(db), revtree_home(), run_id, repair)
    if not findings:
        console.print("no problems found")
        return
    table = Table("run", "problem", "details", "repaired")
    for f in findings:
        table.add_row(f.run, f.kind, f.message, "yes" if f.repaired else "[red]no[/red]")
    console.print(table)
    if any(not f.repaired for f in findings):
        raise typer.Exit(1)


@app.command("gc")
def gc_(db: DbOpt = None) -> None:
    """Delete the LangGraph checkpoints of finished candidates and compact the database."""
    from revtree.orchestrator.housekeeping import gc as collect

    store = _store(db)
    r = collect(store, revtree_home())
    console.print(
        f"removed {r['checkpoints']} checkpoint(s), {r['writes']} write(s) and "
        f"{r['blobs']} blob(s) of {r['threads']} finished candidate(s); "
        f"{'database' if store.url.startswith('sqlite') else 'checkpoint tables'} "
        f"{r['bytes_before']} -> {r['bytes_after']} bytes"
        + ("" if r["vacuumed"] else " (not compacted)")
    )


if __name__ == "__main__":
    main()
