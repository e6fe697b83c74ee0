"""The commands that act on a run without driving it: rm, stop, approve, reject,
doctor and gc."""

from __future__ import annotations

import os
import signal
import time
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from revtree.cli.app import DbOpt, RunArg, app, console, open_reads, open_store
from revtree.errors import RevtreeError
from revtree.memory.records import RunStatus


@app.command()
def rm(
    run_id: RunArg,
    db: DbOpt = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
) -> None:
    """Delete a run: its rows, its git store and its logs (forks of it keep working)."""
    import shutil

    from revtree.memory.home import revtree_home
    from revtree.orchestrator.run import RunPaths

    store = open_store(db)
    found = store.get_run(run_id)
    if found.status is RunStatus.RUNNING and found.pid:
        raise RevtreeError(f"run {found.id} is running (pid {found.pid}); stop it first")
    children = [r.id for r in store.list_runs() if r.parent_run == found.id]
    if not yes and not typer.confirm(f"delete run {found.id}?"):
        raise typer.Exit(1)
    paths = RunPaths(revtree_home(), found.id)
    path = paths.dir
    if paths.work.is_dir():  # the [sandbox] workspaces folders its sessions left
        from revtree.sandboxes.workspace import reap_recorded

        reap_recorded(paths.work, None)
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
    store = open_reads(db)  # a signal to its process: nothing is written here
    found = store.get_run(run_id)
    for _ in range(100):  # a run just started records its pid a moment later: 10 s at most
        if found.status is not RunStatus.RUNNING or found.pid:
            break
        time.sleep(0.1)
        found = store.get_run(run_id)
    if found.status.is_finished() or not found.pid:
        console.print(f"run {found.id} is not running ({found.status.value})")
        raise typer.Exit(1)
    try:
        os.kill(found.pid, signal.SIGTERM)
    except ProcessLookupError:
        console.print(f"run {found.id}: its process {found.pid} is gone; `revtree resume` it")
        raise typer.Exit(1) from None
    console.print(f"asked pid {found.pid} to stop run {found.id}")


@app.command()
def doctor(
    run_id: Annotated[str | None, typer.Argument(help="Only this run (default: all).")] = None,
    repair: Annotated[bool, typer.Option(help="Fix what can be fixed.")] = False,
    db: DbOpt = None,
) -> None:
    """Check the database against the git stores and the run processes (--repair fixes)."""
    from revtree.memory.home import default_url, revtree_home
    from revtree.orchestrator.commands.doctor import check_database, missing_database
    from revtree.orchestrator.commands.doctor import doctor as check

    if (missing := missing_database(db or default_url(), revtree_home())) and not repair:
        console.print(escape(missing), soft_wrap=True)
        raise typer.Exit(1)
    if (damage := check_database(db or default_url(), revtree_home())) is not None:
        console.print(escape(damage), soft_wrap=True)
        if not repair:
            raise typer.Exit(1)
        from revtree.orchestrator.commands.doctor_rebuild import salvage

        console.print(escape(salvage(db or default_url())), soft_wrap=True)
    findings = check(open_store(db, create=repair), revtree_home(), run_id, repair)
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
    from revtree.memory.checkpoints import gc as collect

    store = open_store(db)
    r = collect(store)
    console.print(
        f"removed {r['checkpoints']} checkpoint(s), {r['writes']} write(s) and "
        f"{r['blobs']} blob(s) of {r['threads']} finished candidate(s); "
        f"{'database' if store.url.startswith('sqlite') else 'checkpoint tables'} "
        f"{r['bytes_before']} -> {r['bytes_after']} bytes"
        + ("" if r["vacuumed"] else " (not compacted)")
    )


NodeArg = Annotated[int, typer.Argument(help="The node waiting for approval.")]


@app.command()
def approve(run_id: RunArg, node: NodeArg, db: DbOpt = None) -> None:
    """Let a candidate that waits for approval go on to its evaluation."""
    from revtree.orchestrator.commands.approve import decide

    ev = decide(open_store(db), run_id, node, accepted=True)
    console.print(escape(ev.message))


@app.command()
def reject(
    run_id: RunArg,
    node: NodeArg,
    why: Annotated[str, typer.Option("--why", help="The reason, kept on the node.")] = "",
    db: DbOpt = None,
) -> None:
    """Reject a candidate that waits for approval: it is recorded, never evaluated."""
    from revtree.orchestrator.commands.approve import decide

    ev = decide(open_store(db), run_id, node, accepted=False, why=why)
    console.print(escape(ev.message))
