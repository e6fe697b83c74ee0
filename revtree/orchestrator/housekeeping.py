"""Housekeeping: export a node as a branch of your repository, check and repair the
memory (``doctor``), and prune finished LangGraph checkpoints (``gc``).

``export_branch`` writes one commit on top of the user's HEAD through a temporary index
file, so the user's working tree and index are never touched. ``doctor`` compares the
SQL rows with the per-run git stores and the processes that claim runs. ``gc`` deletes
the checkpoints of finished candidates (their state lives in the SQL rows) from
LangGraph's tables, in the SQLite file or in PostgreSQL's ``langgraph`` schema, and
compacts them (``VACUUM``); it also drops the checkpoints of runs deleted by ``rm``.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import BindParameter, bindparam, delete, inspect, select, text
from sqlalchemy.engine import Connection

from revtree.errors import RevtreeError
from revtree.memory import GitStore, Node, NodeStatus, RunInfo, RunStatus, Store
from revtree.memory.db import transaction
from revtree.memory.gitstore import NODE_REF
from revtree.memory.store import EVALS, NODES
from revtree.orchestrator.fork import lineage
from revtree.orchestrator.runner import CHECKPOINT_SCHEMA, RunPaths, _alive
from revtree.tasks import TaskSpec
from revtree.tasks.load import source_dir

HAS_COMMIT = (
    NodeStatus.CODED,
    NodeStatus.REVIEWED,
    NodeStatus.EVALUATING,
    NodeStatus.SUCCEEDED,
)
CRASHED = "crashed (found by doctor)"


# -- export ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Exported:
    branch: str
    commit: str
    parent: str
    files: list[str]  # paths in the user's repository that the commit changes


def _git(repo: Path, *args: str, env: dict[str, str] | None = None, stdin: str = "") -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=stdin.encode(),
        capture_output=True,
        env=env,
    )
    if proc.returncode != 0:
        raise RevtreeError(
            f"git {' '.join(args)} failed in {repo}: {proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout.decode().strip()


def _hypothesis(node: Node) -> str:
    text = str((node.proposal or {}).get("hypothesis") or "").strip()
    return text.splitlines()[0] if text else "-"


def _score(node: Node) -> str:
    return "-" if node.score is None else f"{node.score:.6g}"


def lineage_message(run: RunInfo, nodes: dict[int, Node], node_id: int) -> str:
    """A commit message: a summary line, then one line per node from the root to the node."""
    node = nodes[node_id]
    lines = [
        f"revtree: node {node_id} of run {run.id} (score {_score(node)})",
        "",
        f"Lineage in run {run.id} (task {run.task_name}), root first:",
    ]
    for n in lineage(nodes, node_id):
        lines.append(
            f"- node {n.id} [{n.operator}] {n.status.value}, score {_score(n)}: {_hypothesis(n)}"
        )
    return "\n".join(lines) + "\n"


def export_branch(
    store: Store, run_id: str, node_id: int, repo: Path, branch: str, home: Path
) -> Exported:
    """Put the node's changes (against the run's root) on a new branch of ``repo``: one
    commit on top of its HEAD, written without touching its working tree or index."""
    run = store.get_run(run_id)
    nodes = {n.id: n for n in store.nodes(run.id)}
    node = nodes.get(node_id)
    if node is None:
        raise RevtreeError(f"run {run.id} has no node {node_id}")
    root = nodes.get(0)
    if node.commit is None or root is None or root.commit is None:
        raise RevtreeError(f"node {node_id} of run {run.id} has no commit")
    repo = Path(repo)
    if not repo.is_dir():
        raise RevtreeError(f"repository {repo} does not exist")
    top = Path(_git(repo, "rev-parse", "--show-toplevel")).resolve()
    head = subprocess.run(
        ["git", "-C", str(top), "rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
        capture_output=True,
        text=True,
    )
    if head.returncode != 0:
        raise RevtreeError(f"repository {top} has no HEAD commit; commit something first")
    parent = head.stdout.strip()
    if subprocess.run(
        ["git", "check-ref-format", "--branch", branch], capture_output=True
    ).returncode:
        raise RevtreeError(f"{branch!r} is not a valid branch name")
    exists = subprocess.run(
        ["git", "-C", str(top), "show-ref", "--verify", "--quiet", f"refs/heads/{branch}"]
    )
    if exists.returncode == 0:
        raise RevtreeError(f"branch {branch!r} already exists in {top}")
    src = source_dir(TaskSpec.model_validate(run.spec))
    try:
        rel = src.relative_to(top)
    except ValueError:
        raise RevtreeError(
            f"the task's source folder {src} is not inside the repository {top}"
        ) from None
    prefix = "" if str(rel) == "." else rel.as_posix() + "/"

    git = GitStore(RunPaths(home, run.id).repo)
    try:
        if not git.has_commit(node.commit):
            raise RevtreeError(f"commit {node.commit[:10]} of node {node_id} is missing")
        before, after = git.list_files(root.commit), git.list_files(node.commit)
        changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
        with tempfile.TemporaryDirectory(prefix="revtree-export-") as tmp:
            env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
            if not _has_identity(top):
                env.update(
                    GIT_AUTHOR_NAME="revtree",
                    GIT_AUTHOR_EMAIL="revtree@localhost",
                    GIT_COMMITTER_NAME="revtree",
                    GIT_COMMITTER_EMAIL="revtree@localhost",
                )
            _git(top, "read-tree", "HEAD", env=env)
            rows = []
            for path in changed:
                if path in after:
                    binsha, mode = after[path]
                    data = git.blob(binsha)
                    sha = _hash_object(top, data)
                    rows.append(f"{mode:o} {sha}\t{prefix}{path}")
                else:
                    rows.append(f"0 {'0' * 40}\t{prefix}{path}")
            if rows:
                _git(top, "update-index", "--index-info", env=env, stdin="\n".join(rows) + "\n")
            tree = _git(top, "write-tree", env=env)
            message = lineage_message(run, nodes, node_id)
            commit = _git(top, "commit-tree", tree, "-p", parent, "-F", "-", env=env, stdin=message)
        _git(top, "branch", branch, commit)
    finally:
        git.close()
    return Exported(branch, commit, parent, [prefix + p for p in changed])


def _has_identity(top: Path) -> bool:
    return all(
        subprocess.run(["git", "-C", str(top), "config", key], capture_output=True).returncode == 0
        for key in ("user.name", "user.email")
    )


def _hash_object(top: Path, data: bytes) -> str:
    proc = subprocess.run(
        ["git", "-C", str(top), "hash-object", "-w", "--stdin"],
        input=data,
        capture_output=True,
    )
    if proc.returncode != 0:
        raise RevtreeError(f"git hash-object failed in {top}: {proc.stderr.decode().strip()}")
    return proc.stdout.decode().strip()


# -- doctor ---------------------------------------------------------------------------
@dataclasses.dataclass
class Finding:
    run: str
    kind: str
    message: str
    repaired: bool = False


def doctor(
    store: Store, home: Path, run_id: str | None = None, repair: bool = False
) -> list[Finding]:
    """Check the database against the git stores and the processes (and fix what can be
    fixed with ``repair``). An empty list means all is well."""
    runs = [store.get_run(run_id)] if run_id else store.list_runs()
    findings: list[Finding] = []
    for run in runs:
        findings.extend(_check_run(store, home, run, repair))
    return findings


def _check_run(store: Store, home: Path, run: RunInfo, repair: bool) -> list[Finding]:
    out: list[Finding] = []

    def found(kind: str, message: str, fix: Any = None) -> None:
        f = Finding(run.id, kind, message)
        if repair and fix is not None:
            fix()
            f.repaired = True
        out.append(f)

    if run.status is RunStatus.RUNNING and run.pid and not _alive(run.pid, run.host):
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
    if 0 not in nodes:  # cannot happen since runs are created in one transaction
        found("no-root", "run has no root node (node 0): it cannot be resumed; `revtree rm` it")
    stray = sorted({e.node_id for e in store.evaluations(run.id)} - nodes.keys())
    for node_id in stray:
        found(
            "orphan-evaluation",
            f"evaluations of node {node_id}, which does not exist",
            lambda node_id=node_id: _delete_evals(store, run.id, node_id),
        )

    for n in nodes.values():
        if n.commit is None and n.status in HAS_COMMIT:
            found("no-commit", f"node {n.id} is {n.status.value} but has no commit")

    repo = RunPaths(home, run.id).repo
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
        for ref_id in sorted(refs.keys() - nodes.keys()):
            found(
                "stray-ref",
                f"ref {NODE_REF.format(ref_id)} has no node",
                lambda r=ref_id: git.repo.git.update_ref("-d", NODE_REF.format(r)),
            )
    finally:
        git.close()
    return out


def _delete_evals(store: Store, run_id: str, node_id: int) -> None:
    with transaction(store.engine, write=True) as conn:
        conn.execute(delete(EVALS).where(EVALS.c.run_id == run_id, EVALS.c.node_id == node_id))


# -- gc -------------------------------------------------------------------------------
SQLITE_TABLES = {"checkpoints": "checkpoints", "writes": "writes"}
POSTGRES_TABLES = {
    "checkpoints": "checkpoints",
    "blobs": "checkpoint_blobs",
    "writes": "checkpoint_writes",
}
CHUNK = 500  # thread ids per DELETE


@dataclasses.dataclass(frozen=True)
class CheckpointTables:
    """Where LangGraph's saver keeps its rows in the run database (see
    ``runner.make_checkpointer``): report key -> table, qualified by ``schema``."""

    dialect: str
    schema: str | None
    tables: dict[str, str]

    def qualified(self, table: str) -> str:
        return f"{self.schema}.{table}" if self.schema else table


def checkpoint_tables(store: Store) -> CheckpointTables | None:
    """The checkpoint tables that exist in the store's database; ``None`` where the
    checkpoints live in memory (SQLite ``:memory:``, other backends) or none exist yet."""
    url = store.engine.url
    dialect = url.get_backend_name()
    if dialect == "sqlite" and url.database not in (None, "", ":memory:"):
        schema, wanted = None, SQLITE_TABLES
    elif dialect == "postgresql":
        schema, wanted = CHECKPOINT_SCHEMA, POSTGRES_TABLES
    else:
        return None
    present = set(inspect(store.engine).get_table_names(schema=schema))
    tables = {k: t for k, t in wanted.items() if t in present}
    return CheckpointTables(dialect, schema, tables) if tables else None


def finished_threads(conn: Connection) -> list[str]:
    """The LangGraph thread ids (``run:ticket``) of every finished candidate, their node
    rows locked (``FOR SHARE`` on PostgreSQL; SQLite's write transaction holds the whole
    file) until the transaction ends. A finished node's checkpoints are read again only
    by ``revtree retry``, which first resets the node to unfinished (and copes with
    pruned checkpoints): the lock keeps that reset from interleaving with the delete."""
    done = [s.value for s in NodeStatus if s.is_finished()]
    rows = conn.execute(
        select(NODES.c.run_id, NODES.c.thread_id)
        .where(NODES.c.status.in_(done), NODES.c.thread_id.is_not(None))
        .with_for_update(read=True)
    )
    return [f"{run_id}:{ticket}" for run_id, ticket in rows]


ORPHAN = (  # a thread of no run: its run was deleted (``revtree rm``)
    "NOT EXISTS (SELECT 1 FROM runs WHERE substr({t}.thread_id, 1, length(runs.id) + 1)"
    " = runs.id || ':')"
)


def _prune(store: Store, where: CheckpointTables) -> dict[str, int]:
    """Delete, in one write transaction, the rows of finished candidates' threads and of
    threads whose run no longer exists from every checkpoint table; the counts per
    report key, and ``threads``: how many threads had rows. A run's row is committed
    before any of its checkpoints, so a run being created has no orphan threads."""
    counts = dict.fromkeys(where.tables, 0)
    pruned: set[str] = set()
    ids: BindParameter[list[str]] = bindparam("ids", expanding=True)
    with transaction(store.engine, write=True) as conn:
        threads = finished_threads(conn)
        for key, table in where.tables.items():
            name = where.qualified(table)
            for cond, params in _conditions(name, threads):
                found = text(f"SELECT DISTINCT thread_id FROM {name} WHERE {cond}")
                gone = text(f"DELETE FROM {name} WHERE {cond}")
                if params:
                    found, gone = found.bindparams(ids), gone.bindparams(ids)
                pruned.update(conn.execute(found, params).scalars())
                counts[key] += conn.execute(gone, params).rowcount
    return {**counts, "threads": len(pruned)}


def _conditions(name: str, threads: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """WHERE clauses (and their parameters) for the rows of table ``name`` to delete:
    ``threads`` a chunk at a time, then the orphans."""
    for i in range(0, len(threads), CHUNK):
        yield "thread_id IN :ids", {"ids": threads[i : i + CHUNK]}
    yield ORPHAN.format(t=name), {}


@contextmanager
def _autocommit(store: Store) -> Iterator[Any]:
    """A DBAPI cursor outside any transaction block (VACUUM refuses to run in one). The
    connection is dropped afterwards rather than handed back to the pool changed."""
    raw = store.engine.raw_connection()
    try:
        driver = raw.driver_connection
        if store.engine.dialect.name == "postgresql":
            driver.autocommit = True  # type: ignore[union-attr]
        # sqlite: revtree's engine already runs sqlite3 with isolation_level=None
        cur = raw.cursor()
        try:
            yield cur
        finally:
            cur.close()
    finally:
        raw.invalidate()
        raw.close()


def _compact(store: Store, where: CheckpointTables) -> None:
    """SQLite: ``VACUUM`` the file and truncate its WAL. PostgreSQL: ``VACUUM ANALYZE``
    the checkpoint tables only (not ``FULL``: that would lock out running runs)."""
    with _autocommit(store) as cur:
        if where.dialect == "sqlite":
            cur.execute("VACUUM")
            cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return
        for table in where.tables.values():
            cur.execute(f"VACUUM ANALYZE {where.qualified(table)}")


def _bytes(store: Store, where: CheckpointTables) -> int:
    """SQLite: the database file and its WAL. PostgreSQL: the checkpoint tables with
    their indexes and TOAST."""
    if where.dialect == "sqlite":
        path = Path(str(store.engine.url.database)).expanduser()
        return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    with transaction(store.engine) as conn:
        return sum(
            int(conn.execute(text("SELECT pg_total_relation_size(:t)"), {"t": name}).scalar_one())
            for name in map(where.qualified, where.tables.values())
        )


def gc(store: Store, home: Path) -> dict[str, Any]:
    """Delete the checkpoints of finished candidates (and of deleted runs) and compact,
    on SQLite and on PostgreSQL alike. Safe while runs are going: an unfinished
    candidate's thread is never touched. What running runs feel: the delete is one
    write transaction (SQLite: the file's write lock; PostgreSQL: row locks); SQLite's
    ``VACUUM`` rewrites the file under the write lock (writers wait, up to their 60 s
    busy timeout: gc a big file between runs); PostgreSQL's ``VACUUM ANALYZE`` blocks
    no reads or writes. ``bytes_*``: the SQLite file with its WAL, or on PostgreSQL the
    checkpoint tables with their indexes."""
    report: dict[str, Any] = {
        "threads": 0,
        "checkpoints": 0,
        "writes": 0,
        "blobs": 0,
        "vacuumed": False,
        "bytes_before": 0,
        "bytes_after": 0,
    }
    where = checkpoint_tables(store)
    if where is None:
        return report  # checkpoints live in memory: nothing to prune
    report["bytes_before"] = _bytes(store, where)
    report.update(_prune(store, where))
    _compact(store, where)
    report["vacuumed"] = True
    report["bytes_after"] = _bytes(store, where)
    return report
