"""Check and repair the memory (``doctor``): first that a SQLite database is readable at
all (:func:`check_database`), then the SQL rows against the per-run git stores and the
processes that claim runs."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from shlex import quote
from typing import Any

from sqlalchemy.engine import make_url

from revtree.errors import RunNotFound
from revtree.memory import GitStore, NodeStatus, RunInfo, RunStatus, Store
from revtree.memory.gitstore import NODE_REF
from revtree.memory.recover import Recovered, read_run_file
from revtree.orchestrator.commands.doctor_rebuild import (
    describe_lost_run,
    lost_nodes_of,
    lost_runs,
    rebuild_run,
)
from revtree.orchestrator.run import RunPaths, alive

HAS_COMMIT = (
    NodeStatus.CODED,
    NodeStatus.REVIEWED,
    NodeStatus.EVALUATING,
    NodeStatus.SUCCEEDED,
)
CRASHED = "crashed (found by doctor)"


@dataclasses.dataclass
class Finding:
    run: str
    kind: str
    message: str
    repaired: bool = False


def missing_database(url: str, home: Path) -> str | None:
    """What to say when a SQLite file is gone while run folders of the home remain (they
    hold their git stores and ``run.json``: ``--repair`` rebuilds their rows); else None."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = Path(parsed.database).expanduser()
    runs = home / "runs"
    folders = sorted(runs.glob("*/repo.git/HEAD")) if runs.is_dir() else []
    if path.exists() or not folders:
        return None
    return (
        f"the database {path} is missing, but {runs} holds {len(folders)} run folder(s) "
        "with their git stores: `revtree doctor --repair` makes a fresh database and "
        "rebuilds their runs and nodes from them (without their scores)"
    )


def check_database(url: str, home: Path) -> str | None:
    """For a SQLite database: None when its file passes ``PRAGMA integrity_check`` (or
    ``quick_check``, where the full check cannot run), or does not exist yet; else what is
    wrong and how to recover, in plain words. Other databases: None (their server checks
    its own storage). Opens the file directly, so a damaged one cannot fail on the way."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = Path(parsed.database).expanduser()
    if not path.is_file():
        return None
    problem = _integrity(path)
    if problem is None:
        return None
    db, fixed = quote(str(path)), quote(str(path.with_name("fixed.db")))
    damaged = quote(str(path.with_name("damaged")))
    runs = home / "runs"
    return (
        f"the database {path} is damaged: {problem}\n"
        "Until it is replaced, commands on it fail or may read wrong rows. Stop every run "
        "that uses it, then `revtree doctor --repair` moves it aside (into a damaged-<time> "
        "folder beside it), salvages what SQLite can still read into a fresh file and "
        "rebuilds the nodes it lost from the git stores (without their scores). Or by "
        "hand, either:\n"
        f"  - restore {path.name} from a backup or a copy, if you have one; or\n"
        "  - salvage what SQLite can still read into a new file, move the damaged one "
        "away with its -wal and -shm files, and put the new one in its place:\n"
        f'      sqlite3 {db} ".recover" | sqlite3 {fixed}\n'
        f"      mkdir {damaged} && mv {db}* {damaged}/ && mv {fixed} {db}\n"
        "    then run `revtree doctor` again: it checks the salvaged rows against the git "
        "stores.\n"
        f"The code of every node is safe either way: the git stores under "
        f"{runs}/<run id>/repo.git are separate from the database and keep every commit "
        f"(`git -C {runs}/<run id>/repo.git log --all` lists them)."
    )


def _integrity(path: Path) -> str | None:
    """None if ``path`` is a sound SQLite database (or cannot be opened for another reason:
    a lock, permissions, which the command's own error then names), else what is wrong."""
    error: sqlite3.DatabaseError | None = None
    for pragma in ("integrity_check", "quick_check"):
        try:
            conn = sqlite3.connect(path, timeout=60)
            try:
                rows = [
                    line
                    for r in conn.execute(f"PRAGMA {pragma}(20)")
                    for line in str(r[0]).splitlines()
                    if line.strip() and not line.startswith("***")
                ]
            finally:
                conn.close()
        except sqlite3.DatabaseError as e:
            error = error or e
            continue
        if rows == ["ok"]:
            return None
        more = f" (and {len(rows) - 5} more)" if len(rows) > 5 else ""
        return f"PRAGMA {pragma} reports: " + "; ".join(rows[:5]) + more
    if "not a database" in str(error):
        return f"it is not an SQLite database at all (SQLite says: {error})"
    if isinstance(error, sqlite3.OperationalError) and "disk I/O" in str(error):
        return f"SQLite cannot read it or its -wal file (SQLite says: {error})"
    if isinstance(error, sqlite3.OperationalError):  # locked, unreadable: not damage
        return None
    return f"SQLite cannot read it (SQLite says: {error})"


def doctor(
    store: Store, home: Path, run_id: str | None = None, repair: bool = False
) -> list[Finding]:
    """Check the database against the git stores and the processes (and fix what can be
    fixed with ``repair``). An empty list means all is well."""
    try:
        runs = [store.get_run(run_id)] if run_id else store.list_runs()
    except RunNotFound:
        runs = []
        if run_id is None or not (RunPaths(home, run_id).repo / "HEAD").is_file():
            raise
    findings: list[Finding] = []
    for run in runs:
        findings.extend(_check_run(store, home, run, repair))
    for folder in lost_runs(store, home, {r.id for r in store.list_runs()}, run_id):
        f = Finding(folder.name, "lost-run", describe_lost_run(folder))
        if repair and read_run_file(folder) is not None:
            rebuild_run(store, home, folder)
            f.repaired = True
        findings.append(f)
    return findings


def _check_run(store: Store, home: Path, run: RunInfo, repair: bool) -> list[Finding]:
    out: list[Finding] = []

    def found(kind: str, message: str, fix: Any = None) -> None:
        f = Finding(run.id, kind, message)
        if repair and fix is not None:
            fix()
            f.repaired = True
        out.append(f)

    if run.status is RunStatus.RUNNING and run.pid and not alive(run.pid, run.host):
        pid, host = run.pid, run.host
        found(
            "dead-run",
            f"run is marked running but its process {pid} on {host} is gone",
            lambda: store.update_run(
                run.id,
                ("run", f"run failed: {CRASHED}; `revtree resume` continues", None),
                status=RunStatus.FAILED,
                reason=CRASHED,
                pid=None,
            ),
        )

    nodes = {n.id: n for n in store.nodes(run.id)}
    repo = RunPaths(home, run.id).repo
    lost: dict[int, Recovered] = {}
    if (repo / "HEAD").is_file():
        recovered, _ = lost_nodes_of(store, home, run, nodes)
        live = run.status is RunStatus.RUNNING and run.pid and alive(run.pid, run.host)
        for r, fix in recovered:  # rows lost, commits kept: rebuilt (not while it runs)
            lost[r.id] = r
            found(
                "lost-node",
                f"node {r.id} ({r.operator} from node {r.parent_id}) has no row, but its "
                f"commit {r.commit[:10]} is in the git store: rebuilt without its score",
                None if live else fix,
            )
    if 0 not in nodes and 0 not in lost:  # runs are created in one transaction
        found("no-root", "run has no root node (node 0): it cannot be resumed; `revtree rm` it")
    stray = sorted({e.node_id for e in store.evaluations(run.id)} - nodes.keys())
    for node_id in stray:
        found(
            "orphan-evaluation",
            f"evaluations of node {node_id}, which does not exist",
            lambda node_id=node_id: store.delete_evaluations(run.id, node_id, "doctor --repair"),
        )

    for n in nodes.values():
        if n.commit is None and n.status in HAS_COMMIT:
            found("no-commit", f"node {n.id} is {n.status.value} but has no commit")

    if not (repo / "HEAD").is_file():
        found("missing-repo", f"the git store {repo} is missing")
        return out
    git = GitStore(repo)
    try:
        refs = git.node_refs()
        for n in nodes.values():
            if n.commit is None:
                continue
            if not git.has_commit(n.commit):
                found("missing-commit", f"commit {n.commit[:10]} of node {n.id} is not in {repo}")
                continue
            sha = n.commit
            if n.id not in refs:
                found(
                    "missing-ref",
                    f"node {n.id} has no ref {NODE_REF.format(n.id)}",
                    lambda i=n.id, s=sha: git.set_node_ref(i, s),
                )
            elif refs[n.id] != sha:
                found(
                    "wrong-ref",
                    f"ref of node {n.id} points at {refs[n.id][:10]}, not {sha[:10]}",
                    lambda i=n.id, s=sha: git.set_node_ref(i, s),
                )
        for ref_id in sorted(refs.keys() - nodes.keys() - lost.keys()):
            found(
                "stray-ref",
                f"ref {NODE_REF.format(ref_id)} has no node",
                lambda r=ref_id: git.repo.git.update_ref("-d", NODE_REF.format(r)),
            )
    finally:
        git.close()
    return out
