"""LangGraph's checkpoints in the run database: the saver, and their garbage collection.

The saver keeps each candidate's pipeline thread (where its graph stands, the state
its steps hand each other) in the same database as revtree's tables: SQLite's in the
same file; on PostgreSQL, ``PostgresSaver`` with its tables in their own schema
(``langgraph``), apart from revtree's; in memory for other backends. SQL rows stay the
single source of a candidate's results: a checkpoint says only which step is next.

``gc`` deletes the checkpoints of finished candidates (their state lives in the SQL
rows) from LangGraph's tables, in the SQLite file or in PostgreSQL's ``langgraph``
schema, and compacts them (``VACUUM``); it also drops the checkpoints of runs deleted
by ``rm``.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import BindParameter, bindparam, inspect, select, text
from sqlalchemy.engine import URL, Connection

from revtree.errors import RevtreeError
from revtree.memory.db import normalize_url, transaction, wal
from revtree.memory.records import NodeStatus
from revtree.memory.store import NODES, Store


def make_checkpointer(url: str) -> Any:
    """LangGraph's saver on the run database: SQLite's in the same file; on PostgreSQL,
    ``PostgresSaver`` with its tables in their own schema (``langgraph``), apart from
    revtree's; in memory for other backends. ``.conn`` is closed by ``close``.
    """
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(parsed.database, check_same_thread=False, timeout=60)
        wal(conn)
        conn.execute("PRAGMA synchronous=NORMAL")
        saver = SqliteSaver(conn)
        saver.setup()
        return saver
    if parsed.get_backend_name() == "postgresql":
        return _postgres_checkpointer(parsed)
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


CHECKPOINT_SCHEMA = "langgraph"
CHECKPOINT_LOCK = 0x6C677270  # advisory lock key ("lgrp") held while creating the tables


def _postgres_checkpointer(parsed: URL) -> Any:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    conninfo = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    conn = psycopg.connect(
        conninfo,
        autocommit=True,  # as PostgresSaver requires (its migrations create indexes CONCURRENTLY)
        prepare_threshold=0,
        row_factory=dict_row,
        options=f"-c search_path={CHECKPOINT_SCHEMA}",
    )
    try:
        # Several runs (processes, machines) may start at once: set up one at a time. Poll
        # for the lock rather than wait in a transaction: the holder's CREATE INDEX
        # CONCURRENTLY waits for every open transaction, a waiting one included (deadlock).
        deadline = time.monotonic() + 300
        while not _try_lock(conn, CHECKPOINT_LOCK):
            if time.monotonic() > deadline:
                raise RevtreeError("timed out waiting to set up LangGraph's PostgreSQL tables")
            time.sleep(0.05)
        try:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {CHECKPOINT_SCHEMA}")
            saver = PostgresSaver(conn)
            saver.setup()
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (CHECKPOINT_LOCK,))
    except BaseException:
        conn.close()
        raise
    return saver


def _try_lock(conn: Any, key: int) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (key,)).fetchone()
    return bool(row and row["ok"])


def close(saver: Any) -> None:
    """Close the saver's connection, if it has one."""
    conn = getattr(saver, "conn", None)
    if conn is not None:
        conn.close()


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


def finished_threads(
    conn: Connection, run_id: str | None = None, tickets: Collection[str] | None = None
) -> list[str]:
    """The LangGraph thread ids (``run:ticket``) of every finished candidate (of
    ``run_id`` and those ``tickets`` if given), their node
    rows locked (``FOR SHARE`` on PostgreSQL; SQLite's write transaction holds the whole
    file) until the transaction ends. A finished node's checkpoints are read again only
    by ``revtree retry``, which first resets the node to unfinished (and copes with
    pruned checkpoints): the lock keeps that reset from interleaving with the delete."""
    done = [s.value for s in NodeStatus if s.is_finished()]
    query = select(NODES.c.run_id, NODES.c.thread_id).where(
        NODES.c.status.in_(done), NODES.c.thread_id.is_not(None)
    )
    if run_id is not None:
        query = query.where(NODES.c.run_id == run_id)
    if tickets is not None:
        query = query.where(NODES.c.thread_id.in_(list(tickets)))
    rows = conn.execute(query.with_for_update(read=True))
    return [f"{run_id}:{ticket}" for run_id, ticket in rows]


ORPHAN = (  # a thread of no run: its run was deleted (``revtree rm``)
    "NOT EXISTS (SELECT 1 FROM runs WHERE substr({t}.thread_id, 1, length(runs.id) + 1)"
    " = runs.id || ':')"
)


def prune_run(
    store: Store,
    run_id: str,
    where: CheckpointTables | None,
    tickets: Collection[str] | None = None,
) -> int:
    """Delete the checkpoints of one run's finished candidates (``tickets``: of those
    only; no orphans, no compaction): what a running run does every few candidates, for
    the candidates whose thread ended since its last prune (a pass over every candidate
    of the run made each prune slower as the run grew), so that the pages freed
    are reused by the next candidates' checkpoints instead of the file growing by about
    12 KB per candidate; on SQLite, the freed pages are then handed back to the file
    system (``PRAGMA incremental_vacuum``, where the file was made with
    ``auto_vacuum=INCREMENTAL``, as revtree makes it). How many rows went."""
    if where is None:
        return 0
    counts = _prune(store, where, run_id, tickets)
    if where.dialect == "sqlite":  # give the freed pages back (files made by revtree)
        with _autocommit(store) as cur:
            # it frees a page per step; sqlite3's execute steps once, a script to the end
            cur.executescript("PRAGMA incremental_vacuum;")
    return sum(n for key, n in counts.items() if key != "threads")


def _prune(
    store: Store,
    where: CheckpointTables,
    run_id: str | None = None,
    tickets: Collection[str] | None = None,
) -> dict[str, int]:
    """Delete, in one write transaction, the rows of finished candidates' threads (of
    ``run_id``, else of every run) and, for every run, of threads whose run no longer
    exists from every checkpoint table; the counts per report key, and ``threads``: how
    many threads had rows. A run's row is committed before any of its checkpoints, so a
    run being created has no orphan threads."""
    counts = dict.fromkeys(where.tables, 0)
    pruned: set[str] = set()
    ids: BindParameter[list[str]] = bindparam("ids", expanding=True)
    with transaction(store.engine, write=True) as conn:
        threads = finished_threads(conn, run_id, tickets)
        for key, table in where.tables.items():
            name = where.qualified(table)
            for cond, params in _conditions(name, threads, orphans=run_id is None):
                found = text(f"SELECT DISTINCT thread_id FROM {name} WHERE {cond}")
                gone = text(f"DELETE FROM {name} WHERE {cond}")
                if params:
                    found, gone = found.bindparams(ids), gone.bindparams(ids)
                pruned.update(conn.execute(found, params).scalars())
                counts[key] += conn.execute(gone, params).rowcount
    return {**counts, "threads": len(pruned)}


def _conditions(
    name: str, threads: list[str], orphans: bool = True
) -> Iterator[tuple[str, dict[str, Any]]]:
    """WHERE clauses (and their parameters) for the rows of table ``name`` to delete:
    ``threads`` a chunk at a time, then the orphans."""
    for i in range(0, len(threads), CHUNK):
        yield "thread_id IN :ids", {"ids": threads[i : i + CHUNK]}
    if orphans:
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


def gc(store: Store) -> dict[str, Any]:
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
