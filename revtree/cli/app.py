"""The typer app every command registers with, its shared options, the consoles and
``main()``, which turns a :class:`RevtreeError` into ``error: ...`` and exit code 2."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.segment import Segment
from rich.text import Text

from revtree.errors import RevtreeError

if TYPE_CHECKING:  # the command modules import the engine inside each command, so that
    # `--version`, `--help` and the read-only commands start without it (issue 24)
    from revtree.memory import RunInfo, Store
    from revtree.memory.reads import StoreReads

# The order ``revtree --help`` lists the commands in (typer lists them as registered, the
# sub-apps after them): they are defined in several modules, so see order_commands().
COMMAND_ORDER = (
    "init",
    "check",
    "demo",
    "run",
    "resume",
    "approve",
    "reject",
    "watch",
    "dashboard",
    "ls",
    "show",
    "compare",
    "diff",
    "export",
    "holdout",
    "pilot",
    "tune",
    "fork",
    "retry",
    "rm",
    "stop",
    "doctor",
    "gc",
)

# Help in click's plain layout: it wraps descriptions at words to the terminal's width
# under a short option column, reflows docstring paragraphs, and reads no markup (so
# ``[runner]`` in a help text shows as written); rich's panels squeeze the descriptions
# into a narrow column at 80 columns and cut them with an ellipsis.
app = typer.Typer(
    rich_markup_mode=None,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Grow a tree of git revisions of your code, scored by your evaluator.",
)


# What a terminal would act on rather than show: C0 controls but newline and tab, DEL, C1
# controls (the 8-bit CSI and OSC too) and the bidirectional overrides ("Trojan Source").
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with every control character written as a visible escape (``\\x1b[2J``,
    ``\\r``, ``\\u202e``): what a candidate, a model or a task wrote can neither clear the
    screen, move the cursor, set a hyperlink or the clipboard, nor fake a line."""

    def one(m: re.Match[str]) -> str:
        c = ord(m.group())
        return "\\r" if c == 13 else f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    return CONTROL.sub(one, text)


def plain(value: object) -> Text:
    """Candidate text for a table cell or a line: no markup is read in it (``[red]``,
    ``[link=...]`` show as written), and control characters show as escapes."""
    return Text(visible(str(value)))


class PipeConsole(Console):
    """A console that goes quiet when its reader goes away (``revtree run ... | head``):
    rich's default raises ``SystemExit(1)`` from whatever thread printed, which would
    fail a run half-way. Its stream is pointed at /dev/null, as the Python docs advise
    for SIGPIPE, so that nothing later (the exit's flush included) hits the pipe.

    It is also where candidate text is made safe for a terminal, whatever the path to it:
    strings are made :func:`visible` before their markup is read (so a table keeps its
    widths), and every segment of text is again just before it is written; only rich's own
    control segments (a progress bar's cursor moves) and the styles of our own markup
    reach the terminal as escape sequences. Markup in candidate text is the caller's to
    escape (``escape()`` or :func:`plain`)."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(visible(text), **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            seg if seg.control else Segment(visible(seg.text), seg.style, seg.control)
            for seg in buffer
        )

    def on_broken_pipe(self) -> None:
        self.quiet = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.file.fileno())
            os.close(devnull)


console = PipeConsole(highlight=False)
err = PipeConsole(stderr=True, highlight=False)

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db", help="SQLAlchemy URL (default $REVTREE_DB or sqlite at $REVTREE_HOME/revtree.db)."
    ),
]
DetachOpt = Annotated[
    bool, typer.Option(help="Keep running in the background.", show_default=False)
]
QuietOpt = Annotated[
    bool, typer.Option(help="No live log lines, only the summary.", show_default=False)
]


def _parallel(value: str | None) -> str | None:
    if value is None or value == "auto" or (value.isdigit() and 1 <= int(value) <= 256):
        return value
    raise typer.BadParameter(f"expected a number 1..256 or 'auto', got {value!r}")


ParallelOpt = Annotated[
    str | None,
    typer.Option(
        help="Evaluations running at once: a number, or 'auto' (this machine's CPUs over "
        "the task's [runner] cpus; on a Ray cluster, as many as its free resources hold, "
        "followed as nodes join and leave).",
        callback=_parallel,
    ),
]
RunArg = Annotated[str, typer.Argument(help="Run id, a unique prefix of it, or 'last'.")]


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        console.print(f"revtree {version('revtree')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Grow a tree of git revisions of your code, scored by your evaluator."""


PR_SET_DUMPABLE = 4


def protect() -> None:
    """``sandboxes.local.protect_orchestrator``, without loading the sandboxes (a command
    that evaluates nothing need not: 16 ms): this process made non-dumpable, so that the
    processes of the same user (a local sandbox's) cannot read its ``/proc/PID/environ``
    (API keys), memory or fds."""
    if sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def main() -> None:
    from revtree import collector
    from revtree.cli.coercion import install

    collector.hold()  # no full collection over the imports (settled where a loop starts)
    protect()  # our /proc/PID/environ (API keys) out of the sandboxes' reach
    install()  # no pydantic to pass a string parameter on as the string it is
    try:
        app()
    except RevtreeError as e:
        err.print(f"[red]error:[/red] {escape(str(e))}", soft_wrap=True)
        raise SystemExit(2) from None
    finally:
        collector.leave()  # nothing for the interpreter's shutdown to collect


def order_commands() -> None:
    """Put the registered commands in :data:`COMMAND_ORDER` (any others after them); called
    once every command module has registered its commands."""
    rank = {name: i for i, name in enumerate(COMMAND_ORDER)}

    def key(command: Any) -> int:  # a typer CommandInfo: its name, else its function's
        name: str = command.name or command.callback.__name__
        return rank.get(name, len(rank))

    app.registered_commands.sort(key=key)


def open_store(db: str | None, create: bool = False) -> Store:
    """The store of ``--db`` (else ``$REVTREE_DB``, else the home's SQLite file).

    Only a command that records a new run passes ``create``; any other leaves a missing
    SQLite file (and its folder) uncreated and says so in one line. A URL that does not
    parse or a database that cannot be reached is one line too."""
    from revtree.memory import Store
    from revtree.memory.db import NoDatabase

    try:
        return Store(db, create=create)
    except NoDatabase as e:
        raise RevtreeError(f"{e} (--db, $REVTREE_DB)") from None


def store_if_any(db: str | None) -> Store | None:
    """``open_store``, except that the default database that no run has made yet is
    None (``ls``: no runs), not an error, and is neither created nor migrated (nor is
    SQLAlchemy imported, where no database is named and the default file is missing)."""
    from revtree.memory.home import no_default_database

    if db is None and no_default_database():
        return None
    from revtree.memory import Store
    from revtree.memory.db import NoDatabase

    try:
        return Store(db, create=False)
    except NoDatabase as e:
        if db or os.environ.get("REVTREE_DB"):
            raise RevtreeError(f"{e} (--db, $REVTREE_DB)") from None
        return None


def open_reads(db: str | None) -> StoreReads:
    """What a command that only reads opens: the light reads of a SQLite home whose
    schema is current (``memory.sqlite_reads``: the standard library's sqlite3, no
    SQLAlchemy), else the Store (``open_store``), which also migrates an older schema."""
    from revtree.memory.home import default_url
    from revtree.memory.sqlite_reads import SqliteReads

    return SqliteReads.open(db or default_url()) or open_store(db)


def reads_if_any(db: str | None) -> StoreReads | None:
    """``open_reads`` where there is a database; None as ``store_if_any`` has it."""
    from revtree.memory.home import default_url, no_default_database
    from revtree.memory.sqlite_reads import SqliteReads

    if db is None and no_default_database():
        return None
    return SqliteReads.open(db or default_url()) or store_if_any(db)


def node_or_best(store: Store, run: RunInfo, node: int | None) -> int:
    """The node asked for, else the recommended one (the best without a drift alarm),
    saying why when alarms moved the choice."""
    from revtree.orchestrator.commands.report import recommendation_note, summarize

    if node is not None:
        return node
    s = summarize(store, run)
    if s["best_node"] is None:
        raise RevtreeError(f"run {run.id} has no succeeded node without an alarm; pass --node")
    if (note := recommendation_note(s)) is not None:
        err.print(escape(note))
    best: int = s["best_node"]
    return best
