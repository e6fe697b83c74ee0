"""``doctor --repair`` when rows are lost: a run's nodes rebuilt from its git store, a
run's row from its folder's ``run.json``, a damaged SQLite file moved aside and what it
still holds salvaged into a fresh one (see :mod:`revtree.memory.recover`).

A rebuilt node keeps its id, parent, operator, hypothesis, commit and time; its score is
lost. It is left unfinished, as it was before its review (node 0 as a new run's baseline,
``reviewed``; the others ``coded``), in a run marked failed: ``revtree resume`` reviews and
evaluates them again, and ``show``, ``export`` and ``fork`` work meanwhile."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import make_url

from revtree.agents import Proposal, read_knobs
from revtree.errors import RevtreeError
from revtree.memory import GitStore, Node, NodeStatus, RunInfo, RunStatus, Store
from revtree.memory.recover import (
    RUN_FILE,
    Recovered,
    database_id,
    lost_nodes,
    read_run_file,
    salvage_sqlite,
)
from revtree.orchestrator.run import ROOT_TICKET, RunPaths
from revtree.tasks import TaskSpec

LOST = (
    "rebuilt from git by `revtree doctor --repair`: scores lost; "
    "`revtree resume` reviews and evaluates them again"
)
Fix = Callable[[], None]


def node_of(run_id: str, r: Recovered, depth: int, git: GitStore, spec: TaskSpec | None) -> Node:
    """The row of a node read back from its commit (unfinished: its score is lost)."""
    knobs = read_knobs(spec.knobs, git.read_files(r.commit)) if spec and spec.knobs else {}
    return Node(
        run_id,
        r.id,
        r.parent_id,
        r.operator,
        NodeStatus.REVIEWED if r.id == 0 else NodeStatus.CODED,
        depth=depth,
        commit=r.commit,
        proposal=Proposal(r.hypothesis, knobs).to_json(),
        thread_id=ROOT_TICKET if r.id == 0 else f"recovered-{r.id}",
        created_at=r.created_at,
        attempt=r.attempt,
    )


def _event(r: Recovered) -> tuple[str, str, dict]:
    return (
        "select",
        f"node {r.id}: rebuilt from its commit {r.commit[:10]} by doctor --repair "
        "(its score was lost)",
        {"recovered": True, "commit": r.commit},
    )


def lost_nodes_of(
    store: Store, home: Path, run: RunInfo, nodes: dict[int, Node]
) -> tuple[list[tuple[Recovered, Fix]], list[str]]:
    """The nodes of ``run`` whose rows are lost but whose commits vouch for them, each
    with the fix that inserts its row; and the refs that vouch for nothing."""
    git = GitStore(RunPaths(home, run.id).repo)
    try:
        found, refused = lost_nodes(git, {i: n.commit for i, n in nodes.items()})
    finally:
        git.close()
    spec = _spec(run.spec)
    depth = {i: n.depth for i, n in nodes.items()}
    out: list[tuple[Recovered, Fix]] = []
    for r in found:
        depth[r.id] = 0 if r.parent_id is None else depth[r.parent_id] + 1

        def fix(r: Recovered = r, d: int = depth[r.id]) -> None:
            git = GitStore(RunPaths(home, run.id).repo)
            try:
                store.add_node(node_of(run.id, r, d, git, spec), _event(r))
            finally:
                git.close()
            if store.get_run(run.id).status is not RunStatus.RUNNING:
                store.update_run(run.id, status=RunStatus.FAILED, reason=LOST)

        out.append((r, fix))
    return out, refused


def _spec(data: dict) -> TaskSpec | None:
    try:
        return TaskSpec.stored(data)
    except Exception:
        return None


def lost_runs(store: Store, home: Path, known: set[str], only: str | None) -> list[Path]:
    """Run folders under ``home/runs`` with a git store but no row in ``store``; one
    whose ``run.json`` names another database is that database's, not lost."""
    runs = home / "runs"
    if not runs.is_dir():
        return []
    here = database_id(store.url)
    out = []
    for folder in sorted(runs.iterdir()):
        if folder.name in known or (only and folder.name != only):
            continue
        if not (folder / "repo.git" / "HEAD").is_file():
            continue
        data = read_run_file(folder)
        if data is not None and _elsewhere(str(data.get("database") or here), here):
            continue
        out.append(folder)
    return out


def _elsewhere(named: str, here: str) -> bool:
    """Whether the database a run folder names is another one that holds its row (a
    SQLite file that exists; any server database): a home moved elsewhere is not."""
    if named == here:
        return False
    return not named.startswith("sqlite:///") or Path(named[len("sqlite:///") :]).is_file()


def describe_lost_run(folder: Path) -> str:
    git = GitStore(folder / "repo.git")
    try:
        n = len(git.node_refs())
    finally:
        git.close()
    why = (
        ""
        if read_run_file(folder)
        else f"; it has no {RUN_FILE} (made before revtree kept one), so its task is unknown "
        f"and it cannot be rebuilt: `git -C {folder / 'repo.git'} log --all` lists its commits"
    )
    return (
        f"the run folder {folder} has no rows in the database; its git store holds {n} nodes{why}"
    )


def rebuild_run(store: Store, home: Path, folder: Path) -> None:
    """Insert the run's row from ``run.json`` and its nodes from the git store."""
    data = read_run_file(folder)
    if data is None:
        raise RevtreeError(f"{folder / RUN_FILE} is missing or unreadable")
    run_id, spec = folder.name, TaskSpec.stored(data["spec"])
    git = GitStore(folder / "repo.git")
    try:
        found, _ = lost_nodes(git, {})
        if not found or found[0].id != 0:
            raise RevtreeError(f"{folder / 'repo.git'} has no baseline commit (node 0)")
        depth: dict[int, int] = {}
        rows = []
        for r in found:
            depth[r.id] = 0 if r.parent_id is None else depth[r.parent_id] + 1
            rows.append((node_of(run_id, r, depth[r.id], git, spec), _event(r)))
    finally:
        git.close()
    store.create_run(
        run_id,
        spec.name,
        spec.search.policy,
        spec.evaluate.direction,
        spec.search.seed,
        data["spec"],
        root=rows[0],
    )
    for node, event in rows[1:]:
        store.add_node(node, event)
    store.update_run(
        run_id,
        ("run", f"run failed: {LOST} ({len(rows)} node(s) from {RUN_FILE} and repo.git)", None),
        status=RunStatus.FAILED,
        reason=LOST,
        created_at=rows[0][0].created_at,
    )


def set_aside(url: str) -> tuple[Path, Path]:
    """Move a damaged SQLite file (with its -wal and -shm) into a new folder beside it;
    the database path is then free for a fresh file. (folder, moved database file)"""
    db = Path(str(make_url(url).database)).expanduser()
    folder = db.with_name(f"damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    folder.mkdir()
    for suffix in ("", "-wal", "-shm", "-journal"):
        part = db.with_name(db.name + suffix)
        if part.exists():
            shutil.move(part, folder / part.name)
    return folder, folder / db.name


def salvage(url: str) -> str:
    """Set a damaged SQLite file aside, make a fresh database in its place and copy what
    the damaged one still yields into it. What was done, in words."""
    folder, moved = set_aside(url)
    Store(url, create=True).close()  # the current schema, empty
    counts = salvage_sqlite(moved, Path(str(make_url(url).database)).expanduser())
    rows = ", ".join(f"{n} {table}" for table, n in counts.items())
    return (
        f"moved the damaged database to {folder}; salvaged into a fresh one: {rows}. "
        "Then the runs are checked against their git stores:"
    )
