"""``revtree dashboard``: serve the web dashboard of every run in a store (see
docs/dashboard.md), until Ctrl-C or SIGTERM."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import sys
from types import FrameType
from typing import Annotated

import typer
from rich.markup import escape

from revtree import collector
from revtree.cli.app import DbOpt, app, err, open_store


@app.command()
def dashboard(
    db: DbOpt = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on (127.0.0.1: this machine only).")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="TCP port (0: any free port).", min=0, max=65535)
    ] = 8765,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Refuse every action (stop, fork...).")
    ] = False,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="A name requests may give in their Host header besides the bind address "
            "(and localhost for a loopback one); repeatable.",
        ),
    ] = None,
) -> None:
    """Serve a browser view of every run, with actions (token-protected) and a live log."""
    from revtree.web import Dashboard, PortBusy

    open_store(db).close()  # a missing or unreadable database: one line, nothing created
    try:
        dash = Dashboard(db, host, port, read_only=read_only, allow_hosts=allow_host)
    except PortBusy as e:
        err.print(f"[red]error:[/red] {escape(str(e))}")
        raise typer.Exit(1) from None
    warning = exposure_warning(host, read_only)
    if warning:
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    say_url(f"dashboard: {dash.url}")

    def ignore(signum: int, frame: FrameType | None) -> None:
        """Re-raised by uvicorn after its graceful shutdown: nothing left to do."""

    signal.signal(signal.SIGTERM, ignore)
    collector.settle()  # a long-lived server from here (revtree.collector)
    with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the Ctrl-C it handled
        dash.serve()
    sys.stdout.flush()


def exposure_warning(host: str, read_only: bool) -> str | None:
    """What to tell a user whose dashboard listens beyond this machine (None: it doesn't)."""
    name = host.strip("[]")
    try:
        if name == "localhost" or ipaddress.ip_address(name).is_loopback:
            return None
    except ValueError:  # a host name: it may resolve anywhere
        pass
    what = "every run's data" if read_only else "every run's data and its actions (token-protected)"
    return (
        f"--host {host} serves {what} beyond this machine, over plain HTTP; "
        "anyone who can reach the port can read it; requests must name it in their Host "
        f"header as {host} (or an --allow-host name)"
    )


def say_url(line: str) -> None:
    """Print the ``dashboard: URL`` line; a closed stdout (``| head -0``, ``>&-``) must not
    stop the server: the line goes to stderr then, and stdout to /dev/null."""
    try:
        print(line, flush=True)
    except (BrokenPipeError, ValueError, OSError):  # ValueError: a closed sys.stdout
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        with contextlib.suppress(Exception):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (for the rest of the process)
        with contextlib.suppress(Exception):
            print(line, file=sys.stderr, flush=True)
