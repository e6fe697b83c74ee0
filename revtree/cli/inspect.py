"""The commands that read a run without driving it: watch, ls, show, compare, diff and
export (which writes only your patch file or branch)."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from revtree import collector
from revtree.cli.app import (
    DbOpt,
    RunArg,
    app,
    console,
    err,
    node_or_best,
    open_reads,
    open_store,
    plain,
    reads_if_any,
    visible,
)
from revtree.cli.render import (
    family_tree,
    fmt,
    fmt_value,
    print_event,
    print_pipe_safe,
    runs_table,
)
from revtree.errors import RevtreeError
from revtree.memory.records import RunInfo, RunStatus

if TYPE_CHECKING:
    from revtree.memory.gitstore import GitStore
    from revtree.memory.reads import StoreReads


@app.command()
def watch(
    run_id: RunArg,
    db: DbOpt = None,
    since: Annotated[int, typer.Option(help="Show events after this seq (0: all).")] = 0,
    poll: Annotated[float, typer.Option(help="Seconds between polls.")] = 0.25,
    timeout: Annotated[float | None, typer.Option(help="Give up after this many seconds.")] = None,
) -> None:
    """Follow a run's live log from another terminal until the run ends (or its process
    is gone: killed, crashed)."""
    store = open_reads(db)
    found = store.get_run(run_id)
    last, start, checked = since, time.monotonic(), 0.0
    collector.settle()  # a long poll from here (revtree.collector)
    while True:
        events = store.events_since(found.id, last)
        for ev in events:
            print_event(ev)
            last = ev.seq
        if not events:
            current = store.get_run(found.id)
            if current.status.is_finished() and not store.events_since(found.id, last):
                console.print(plain(f"run {current.status.value}: {current.reason}"))
                return
            if time.monotonic() - checked >= LIVENESS_EVERY:
                checked = time.monotonic()
                _exit_if_gone(current)
            if timeout is not None and time.monotonic() - start > timeout:
                raise typer.Exit(1)
            time.sleep(min(poll, LIVENESS_EVERY))


LIVENESS_EVERY = 1.0  # seconds between checks that a followed run's process lives


def _exit_if_gone(run: RunInfo) -> None:
    """A run marked running whose process (on this machine) is dead never ends: say so
    and exit 1 instead of following it forever (``doctor --repair`` marks it failed)."""
    from revtree.orchestrator.liveness import alive

    if run.status is not RunStatus.RUNNING or not run.pid or alive(run.pid, run.host):
        return
    err.print(
        escape(
            f"run {run.id}: its process {run.pid} is gone (killed?); "
            f"`revtree resume {run.id}` continues it"
        )
    )
    raise typer.Exit(1)


@app.command("ls")
def ls(
    db: DbOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (every digit) instead of a table.")
    ] = False,
    tree: Annotated[bool, typer.Option("--tree", help="Show forks as a family tree.")] = False,
) -> None:
    """List runs."""
    store = reads_if_any(db)
    rows = [] if store is None else summaries(store)
    if as_json:
        console.print_json(json.dumps(rows))
        return
    if tree:
        console.print(family_tree(rows))
        return
    console.print(runs_table(rows, console))


def summaries(store: StoreReads) -> list[dict[str, Any]]:
    """``ls``'s rows (the report's modules are imported only where there is a store)."""
    from revtree.orchestrator.commands.report import summarize

    return [summarize(store, r) for r in store.list_runs()]


# ``show``'s rows whose key alone does not say what the number is.
LABELS = {
    "improvement": "improvement (relative)",
    "gain": "gain (absolute)",
    "operators": "operators (bandit)",
}


def show_value(key: str, v: object) -> str:
    """A ``show`` row's value: the relative improvement as a signed percentage of the
    baseline (positive: better), the operator bandit one arm a line (:func:`arms_text`),
    the rest as :func:`fmt_value` writes them."""
    if key == "improvement" and isinstance(v, float):
        return f"{v:+.2%} of the baseline (positive: better)"
    if key == "operators" and isinstance(v, dict):
        return arms_text(v["arms"])
    return fmt_value(key, v)


def arms_text(arms: dict[str, dict[str, Any]]) -> str:
    """The operator bandit's arms, one a line: ``improve: 12 candidates, mean reward
    0.31`` (``-`` before its first)."""
    lines = []
    for name, a in arms.items():
        mean = "-" if a["mean_reward"] is None else f"{a['mean_reward']:.2f}"
        lines.append(f"{name}: {a['pulls']} candidates, mean reward {mean}")
    return "\n".join(lines)


def clip(text: str, limit: int) -> str:
    """``text`` on one line, cut to at most ``limit`` characters at a space with an
    ellipsis (a single word longer than that is cut, with the ellipsis)."""
    text = re.sub(r"[ \t\n]+", " ", text).strip()  # other controls: shown by plain()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    at = cut.rfind(" ")
    return (cut[:at] if at > 0 else cut).rstrip(" ,;:") + "…"


@app.command()
def show(
    run_id: RunArg,
    node: Annotated[int | None, typer.Option(help="Show one node in detail.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (every digit) instead of a table.")
    ] = False,
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
    from revtree.orchestrator.commands.report import (
        node_json,
        summarize,
        transcript_renderables,
        transcripts,
    )

    store = open_reads(db)
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
        print_pipe_safe(transcript_renderables(data["transcript"]))
        return
    table = Table(show_header=False, title=f"run {found.id}" + (f" node {node}" if node else ""))
    for k, v in data.items():
        if k not in ("nodes", "evaluations"):
            table.add_row(plain(LABELS.get(k, k)), plain(show_value(k, v)))
    console.print(table)
    if data.get("evaluations"):
        et = Table("stage", "repeat", "attempt", "ok", "score", "seconds", "host", "gpus")
        for e in data["evaluations"]:
            et.add_row(
                plain(e["stage"]),
                str(e["repeat"]),
                str(e["attempt"]),
                "yes" if e["ok"] else "no",
                fmt(e["score"]),
                f"{e['duration']:.2f}",
                plain(e["host"] or "-"),
                plain(",".join(e["gpus"]) or "-"),
            )
        console.print(et)
    if nodes and "nodes" in data:
        nt = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False)
        for name in ("id", "parent", "op", "status", "score", "commit"):
            nt.add_column(name, no_wrap=True)
        texts = [clip(n["error"] or n["hypothesis"] or "", 70) for n in data["nodes"]]
        longest = max((len(w) for t in texts for w in t.split()), default=10)
        nt.add_column("hypothesis / error", min_width=min(longest, 40))
        for n, text in zip(data["nodes"], texts, strict=True):
            nt.add_row(
                str(n["id"]),
                "-" if n["parent"] is None else str(n["parent"]),
                plain(n["operator"]),
                n["status"],
                fmt(n["score"]),
                (n["commit"] or "")[:10],
                plain(text),
            )
        console.print(nt)


@app.command()
def compare(
    run_ids: Annotated[list[str], typer.Argument(help="Two or more runs (ids, prefixes, 'last').")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (every digit) instead of a table.")
    ] = False,
    db: DbOpt = None,
) -> None:
    """Runs side by side: a fork against its parent, say (what each added itself too)."""
    from revtree.orchestrator.commands.report import compare as compare_runs

    store = open_reads(db)
    runs = [store.get_run(r) for r in run_ids]
    rows = compare_runs(store, runs)
    if as_json:
        data = {r.id: {k: v[i] for k, v in rows} for i, r in enumerate(runs)}
        print(json.dumps(data, indent=2, default=str))
        return
    table = Table("", *(escape(r.id) for r in runs), title="runs compared")
    for key, values in rows:
        table.add_row(plain(key), *(plain(fmt(v) if isinstance(v, float) else v) for v in values))
    console.print(table)


def _git(found: RunInfo) -> GitStore:
    from revtree.memory.gitstore import GitStore
    from revtree.memory.home import revtree_home
    from revtree.orchestrator.run import RunPaths

    return GitStore(RunPaths(revtree_home(), found.id).repo)


@app.command()
def diff(
    run_id: RunArg,
    node: Annotated[int, typer.Argument(help="Node id.")],
    against: Annotated[str, typer.Option(help="'parent', 'root', or a node id.")] = "parent",
    db: DbOpt = None,
) -> None:
    """Print the diff of NODE against its parent (or the root, or another node)."""
    store = open_store(db)
    found = store.get_run(run_id)
    target = store.node(found.id, node)
    if against == "parent":
        base_id = target.parent_id if target.parent_id is not None else target.id
    else:
        base_id = 0 if against == "root" else int(against)
    base = store.node(found.id, base_id)
    if not (base.commit and target.commit):
        raise RevtreeError(f"node {node} or {base_id} of run {found.id} has no commit yet")
    text = _git(found).diff(base.commit, target.commit)
    sys.stdout.write(visible(text) if sys.stdout.isatty() else text)  # a file: byte-exact


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
    store = open_store(db)
    found = store.get_run(run_id)
    node_id = node_or_best(store, found, node)
    if branch is not None:
        from revtree.memory.home import revtree_home
        from revtree.orchestrator.commands.export import export_branch

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
        f"wrote {patch}: node {node_id} (score {fmt(target.score)}) against the "
        f"baseline; apply with `git apply {patch}` in your source folder"
    )
