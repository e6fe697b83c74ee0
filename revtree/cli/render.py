"""How the commands show things: scores, live-log lines and the live log's progress bar
(``LiveLog``), the run summary, the family tree of forks, and printing that survives a
closed pipe."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from typing import TYPE_CHECKING, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from rich.tree import Tree as RichTree

from revtree.cli.app import console, plain, visible
from revtree.memory.records import TWIN, Event, RunInfo, RunStatus

if TYPE_CHECKING:
    from revtree.memory.store import Store

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
    "refused": "yellow",  # a coder's answer that could not be applied (a repair follows)
}


def fmt(v: Any) -> str:
    """A number for people: six significant digits (``--json`` keeps them all)."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def fmt_time(ts: float) -> str:
    """A timestamp as local ISO time, to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def fmt_value(key: str, v: Any, indent: str = "") -> str:
    """A value of ``show`` for people: times (``*_at``) as local ISO, numbers to six
    significant digits, a dict as ``key: value`` lines, a list one item a line."""
    if v is None or v == [] or v == {}:
        return "-"
    if isinstance(v, int | float) and not isinstance(v, bool) and key.endswith("_at"):
        return fmt_time(v)
    if isinstance(v, dict):
        lines = []
        for k, sub in v.items():
            text = fmt_value(str(k), sub, indent + "  ")
            sep = "\n" if "\n" in text and isinstance(sub, dict | list) else " "
            lines.append(f"{indent}{k}:{sep}{text}")
        return "\n".join(lines)
    if isinstance(v, list):
        if all(not isinstance(x, dict | list) for x in v):
            return ", ".join(fmt_value(key, x) for x in v)
        items = (
            ", ".join(f"{k}: {fmt_value(str(k), y)}" for k, y in x.items())
            if isinstance(x, dict)
            else fmt_value(key, x)
            for x in v
        )
        return "\n".join(f"{indent}- {item}" for item in items)
    return fmt(v)


def format_event(ev: Event, width: int | None = None) -> Text:
    """One live-log line: time, seq, kind, message. With ``width`` (the terminal's
    columns) the message is wrapped at spaces to fit, each further line indented under
    the message's first (a hanging indent), so that the terminal never breaks a word; a
    word longer than a line (a URL, a path) is kept whole and overflows rather than cut.
    Without ``width`` (piped, captured: see :func:`wrap_width`) it is one whole line.
    Print it with ``soft_wrap=True``, so that the console does not wrap it again."""
    stamp = time.strftime("%H:%M:%S", time.localtime(ev.ts))
    style = STYLES.get(ev.kind, "")
    if ev.kind == "node" and (ev.data or {}).get("status") in ("failed", "rejected"):
        style = "red"
    prefix = f"{stamp} {ev.seq:>5} {ev.kind:<8} "
    line = Text(prefix, style="dim")
    message = visible(ev.message)
    if width is not None:
        message = hang(message, width, len(prefix))
    line.append(message, style=style)
    return line


def wrap_width(out: Console) -> int | None:
    """The columns to wrap live-log lines to: the terminal's width when ``out`` writes to a
    real terminal (its file is a tty), None (whole lines) when it is piped or captured, so
    that ``| grep``, a log file and a test see each event on one line."""
    try:
        tty = out.file.isatty()
    except (AttributeError, ValueError, OSError):  # a closed or odd stream
        tty = False
    return out.width if tty else None


def print_event(ev: Event) -> None:
    """Print one live-log line, wrapped (in a terminal only) by :func:`format_event`."""
    console.print(format_event(ev, wrap_width(console)), soft_wrap=True)


def hang(message: str, width: int, indent: int) -> str:
    """``message`` wrapped at spaces into ``width`` columns after a first-line prefix of
    ``indent`` columns, later lines indented by as much (two spaces where that would leave
    under 30 columns for the text); its own line breaks are kept, words are never split."""
    if width - indent < 30:
        indent = 2
    pad = " " * indent
    lines: list[str] = []
    for para in message.split("\n"):
        lines += textwrap.wrap(
            para,
            max(width - indent, 1),
            break_long_words=False,
            break_on_hyphens=False,
            drop_whitespace=True,
        ) or [""]
    return ("\n" + pad).join(lines)


def print_summary(store: Store, run: RunInfo) -> None:
    from revtree.orchestrator.commands.report import gain_text, recommendation_note, summarize

    s = summarize(store, run)
    table = Table(title=f"run {run.id}", show_header=False, title_style="bold")
    table.add_row("status", plain(f"{s['status']} ({s['reason']})"))
    table.add_row(
        "nodes",
        f"{s['n_nodes']} ({s['n_succeeded']} ok, {s['n_failed']} failed, "
        + (f"{s['n_rejected']} rejected, " if s["n_rejected"] else "")
        + (f"{s['n_waiting']} waiting for approval, " if s["n_waiting"] else "")
        + f"{s['n_in_flight']} unfinished)"
        + (
            f", {s['n_inherited']} inherited from run {s['parent_run']}" if s["n_inherited"] else ""
        ),
    )
    table.add_row("baseline", fmt(s["baseline_score"]))
    if s["best_node"] is None:
        table.add_row("best", "- (no node scored)")
    else:
        table.add_row("best", f"{fmt(s['best_score'])} at node {s['best_node']}{gain_text(s)}")
    for h in s["holdout"]:
        table.add_row(
            "holdout", plain(f"node {h['node']}: {fmt(h['score']) if h['ok'] else h['error']}")
        )
    if s["guard"]["runs"]:
        table.add_row("guard", f"{s['guard']['runs']} guard holdouts, {s['guard']['seconds']:.1f}s")
    for a in s["alarms"]:
        if a.get("kind") != "subtree":
            table.add_row("alarm", escape(f"node {a['node']} ({a['kind']}): {a['message']}"))
    before = s["inherited_sandbox_seconds"]  # a fork's history: evaluated in its parent run
    table.add_row(
        "time",
        f"{s['wall_seconds']:.1f}s wall, {s['sandbox_seconds']:.1f} sandbox-s"
        + (f" ({before:.1f} of them inherited, spent by run {s['parent_run']})" if before else ""),
    )
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
    final = s.get("final_holdout")
    if final is not None and not final["better"]:  # better on dev only: nothing to take
        console.print(
            f"not an improvement: node {s['best_node']} is better on dev only (its final "
            "holdout is no better than the baseline's), so there is nothing to export"
        )
    elif s["best_node"] not in (None, 0):  # the baseline is your own code: nothing to export
        console.print(
            f"export it:  revtree export {run.id} --node {s['best_node']} --patch best.patch"
        )
    if run.status is not RunStatus.COMPLETED:
        console.print(f"continue:   revtree resume {run.id}")


def runs_table(rows: list[dict[str, Any]], out: Console) -> Table:
    """The table of ``revtree ls``. Ids are what people type, so the id column is never
    cut; where the table is wider than the terminal, a lighter layout drops what the id
    already says (the task), shortens the dates, and the other columns wrap."""
    table = _runs_table(rows, compact=False)
    wide = Measurement.get(out, out.options.update_width(10_000), table).maximum
    return table if wide <= out.width else _runs_table(rows, compact=True)


def _runs_table(rows: list[dict[str, Any]], compact: bool) -> Table:
    id_width = max((len(r["run_id"]) for r in rows), default=3)
    with_task = not compact or any(not r["run_id"].startswith(r["task"]) for r in rows)
    table = (
        Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False) if compact else Table()
    )
    table.add_column("run", no_wrap=True, min_width=id_width, overflow="fold")
    if with_task:
        table.add_column("task", overflow="fold")
    table.add_column("status", no_wrap=True)
    for name in ("policy", "nodes", "baseline", "best", "created"):
        table.add_column(name, overflow="fold")
    when = "%m-%d %H:%M" if compact else "%Y-%m-%d %H:%M"
    for r in rows:
        cells = [plain(r["run_id"]), plain(r["task"])] if with_task else [plain(r["run_id"])]
        table.add_row(
            *cells,
            r["status"],
            plain(r["policy"]),
            str(r["n_nodes"]),
            fmt(r["baseline_score"]),
            fmt(r["best_score"]),
            time.strftime(when, time.localtime(r["created_at"])),
        )
    return table


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
                f"[bold]{escape(r['run_id'])}[/bold]{where} · {r['status']} · "
                f"{escape(r['policy'])} · {r['n_nodes']} nodes · best {fmt(r['best_score'])}"
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


class LiveLog:
    """Prints each committed event and keeps a progress bar over the node budget."""

    def __init__(self, run: RunInfo, total: int | None, quiet: bool = False, done: int = 0) -> None:
        """``done``: the nodes finished before (a resumed run)."""
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
        self.done = done

    def __call__(self, ev: Event) -> None:
        if not self.quiet:
            try:
                out = self.progress.console
                out.print(format_event(ev, wrap_width(out)), soft_wrap=True)
            except OSError:  # the reader went away (EPIPE, EIO): the run goes on, unseen
                console.on_broken_pipe()
                self.quiet = True
        if ev.kind == "node" and (ev.data or {}).get("error_kind") != TWIN:  # not in max_nodes
            self.done += 1
            self.progress.update(self.task, completed=self.done)
        if ev.kind == "best":
            score = ev.data.get("score") if ev.data else None
            self.progress.update(self.task, best=f"best {fmt(score)}")
