"""How the commands show things: scores, live-log lines, the run summary, the family
tree of forks, and printing that survives a closed pipe."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree as RichTree

from revtree.cli.app import console
from revtree.memory import Event, RunInfo, RunStatus, Store
from revtree.orchestrator.commands.report import gain_text, recommendation_note, summarize

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


def fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.6g}"


def format_event(ev: Event) -> Text:
    stamp = time.strftime("%H:%M:%S", time.localtime(ev.ts))
    style = STYLES.get(ev.kind, "")
    if ev.kind == "node" and (ev.data or {}).get("status") in ("failed", "rejected"):
        style = "red"
    line = Text(f"{stamp} {ev.seq:>5} {ev.kind:<8} ", style="dim")
    line.append(ev.message, style=style)
    return line


def print_summary(store: Store, run: RunInfo) -> None:
    s = summarize(store, run)
    table = Table(title=f"run {run.id}", show_header=False, title_style="bold")
    table.add_row("status", f"{s['status']} ({s['reason']})")
    table.add_row(
        "nodes",
        f"{s['n_nodes']} ({s['n_succeeded']} ok, {s['n_failed']} failed, "
        f"{s['n_in_flight']} unfinished)",
    )
    table.add_row("baseline", fmt(s["baseline_score"]))
    table.add_row("best", f"{fmt(s['best_score'])} at node {s['best_node']}{gain_text(s)}")
    for h in s["holdout"]:
        table.add_row("holdout", f"node {h['node']}: {fmt(h['score']) if h['ok'] else h['error']}")
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


def family_tree(rows: list[dict[str, Any]]) -> RichTree:
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
                f"{r['policy']} · {r['n_nodes']} nodes · best {fmt(r['best_score'])}"
            )
            add(sub, r["run_id"])

    add(top, None)
    return top


def print_pipe_safe(renderables: list[Any]) -> None:
    """Print, and end quietly when the reader goes away (``| head``)."""
    try:
        for r in renderables:
            console.print(r)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None
