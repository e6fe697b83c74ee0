"""The reads of ``revtree ls``, ``show``, ``watch``, ``stop`` and ``compare`` on the
standard library's ``sqlite3``, for a SQLite home whose schema is the current one: those
commands then start without SQLAlchemy (0.1 s of imports, and its ORM models), issue 24.

:meth:`SqliteReads.open` gives one only where the URL is a plain SQLite file
(``sqlite:///PATH``, no query), the file exists and opens read-only (``mode=ro``: this
module never writes, creates or migrates anything), and its ``alembic_version`` is
:data:`HEAD`. Anywhere else, a PostgreSQL URL, an older or newer schema (which the
Store migrates or refuses, as before), a file that is no database, or
``REVTREE_LIGHT_READS=0``, it gives None and the command opens the Store.

It answers as the Store does, record for record (the rows go through the same
converters, :mod:`revtree.memory.rows`; tests/memory/test_sqlite_reads.py compares them
on real runs): JSON columns decoded with ``json.loads`` (SQLAlchemy's JSON type stores
``json.dumps``), booleans made ``bool``, the same orders, the same run lookup (an exact
id, else a unique prefix, else 'last') and the same errors.
"""

from __future__ import annotations

import json
import os
import sqlite3
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

from revtree.errors import StoreError
from revtree.memory.records import Decision, EvalResult, Event, LLMCall, Node, RunInfo
from revtree.memory.rows import (
    first_decisions,
    found_run,
    row_to_call,
    row_to_eval,
    row_to_event,
    row_to_node,
    row_to_run,
)

HEAD = "0006"  # the newest migration (revtree.memory.db.HEAD is this one)
OFF_ENV = "REVTREE_LIGHT_READS"  # "0": always the Store
PREFIX = "sqlite:///"

# The columns whose SQLAlchemy types convert what SQLite holds: JSON (text) and Boolean
# (0/1); tests/memory/test_sqlite_reads.py checks these against the models.
JSON_COLUMNS = frozenset(
    {
        "alarm",
        "data",
        "extra_parents",
        "features",
        "gpus",
        "metrics",
        "policy_state",
        "proposal",
        "review",
        "spec",
        "timings",
    }
)
BOOL_COLUMNS = frozenset({"ok"})


def sqlite_path(url: str) -> str | None:
    """The file of a plain ``sqlite:///PATH`` URL, as SQLAlchemy reads it; None for any
    other URL, and for one whose path SQLAlchemy would rewrite (``%``-escapes, a query,
    ``~``) or that names no file (memory)."""
    if not url.startswith(PREFIX):
        return None
    path = url[len(PREFIX) :]
    if not path or path == ":memory:" or any(c in path for c in "?#%~"):
        return None
    return path


def _row(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> SimpleNamespace:
    row = SimpleNamespace()
    for (name, *_), value in zip(cursor.description, values, strict=True):
        if value is not None:
            if name in JSON_COLUMNS:
                value = json.loads(value)
            elif name in BOOL_COLUMNS:
                value = bool(value)
        setattr(row, name, value)
    return row


class SqliteReads:
    """A read-only connection to a current SQLite home: the reads of ``summarize``
    (:class:`~revtree.memory.reads.RunReads`) and of the runs table
    (:class:`~revtree.memory.reads.StoreReads`). No write methods."""

    def __init__(self, url: str, conn: sqlite3.Connection) -> None:
        self.url = url
        self.conn = conn

    @classmethod
    def open(cls, url: str) -> SqliteReads | None:
        """Reads of ``url``, or None where the Store must answer (see the module)."""
        path = sqlite_path(url)
        if os.environ.get(OFF_ENV) == "0" or path is None or not os.path.isfile(path):
            return None
        try:
            conn = sqlite3.connect(
                f"file:{quote(path)}?mode=ro",
                uri=True,
                timeout=60,
                check_same_thread=False,
                isolation_level=None,  # each read its own transaction, as the Store's
            )
        except sqlite3.Error:
            return None
        try:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
            ).fetchone()
            version = found and conn.execute("SELECT version_num FROM alembic_version").fetchall()
        except sqlite3.Error:
            version = None
        if version != [(HEAD,)]:
            conn.close()
            return None
        conn.row_factory = _row
        return cls(url, conn)

    def close(self) -> None:
        self.conn.close()

    def _all(self, sql: str, *args: Any) -> list[Any]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"database error on {self.url}: {e}") from e

    # -- runs ---------------------------------------------------------------------
    def get_run(self, run_id: str) -> RunInfo:
        """The run with this id, or the only one whose id starts with it, or 'last'."""
        prefixed: list[Any] = []
        if run_id in ("last", "latest"):
            exact = self._all("SELECT * FROM runs ORDER BY created_at DESC LIMIT 1")
        else:
            exact = self._all("SELECT * FROM runs WHERE id = ?", run_id)
            if not exact:  # SQLAlchemy's startswith(autoescape=True): LIKE, '/' escapes
                escaped = run_id.replace("/", "//").replace("%", "/%").replace("_", "/_")
                prefixed = self._all(
                    "SELECT * FROM runs WHERE id LIKE ? || '%' ESCAPE '/' ORDER BY id LIMIT 11",
                    escaped,
                )
        return found_run(run_id, self.url, exact[0] if exact else None, prefixed)

    def list_runs(self) -> list[RunInfo]:
        return [row_to_run(r) for r in self._all("SELECT * FROM runs ORDER BY created_at")]

    # -- a run's reads ------------------------------------------------------------
    def nodes(self, run_id: str) -> list[Node]:
        rows = self._all("SELECT * FROM nodes WHERE run_id = ? ORDER BY id", run_id)
        return [row_to_node(r) for r in rows]

    def node(self, run_id: str, node_id: int) -> Node:
        rows = self._all("SELECT * FROM nodes WHERE run_id = ? AND id = ?", run_id, node_id)
        if not rows:
            raise StoreError(f"run {run_id} has no node {node_id}")
        return row_to_node(rows[0])

    def evaluations(
        self, run_id: str, node_id: int | None = None, stage: str | None = None
    ) -> list[EvalResult]:
        sql, args = "SELECT * FROM evaluations WHERE run_id = ?", list[Any]([run_id])
        for column, value in (("node_id", node_id), ("stage", stage)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        return [row_to_eval(r) for r in self._all(sql + " ORDER BY id", *args)]

    def sandbox_seconds(self, run_id: str) -> float:
        rows = self._all("SELECT sum(duration) AS s FROM evaluations WHERE run_id = ?", run_id)
        return float(rows[0].s or 0.0)

    def decisions(self, run_id: str, nodes: dict[int, int]) -> dict[int, Decision]:
        if not nodes:
            return {}
        marks = ", ".join("?" * len(nodes))
        rows = self._all(
            "SELECT node_id, data FROM events WHERE run_id = ? AND kind = 'decision' "
            f"AND node_id IN ({marks}) ORDER BY seq",
            run_id,
            *nodes,
        )
        return first_decisions(((r.node_id, r.data) for r in rows), nodes)

    def events_since(self, run_id: str, after: int = 0, limit: int = 1000) -> list[Event]:
        rows = self._all(
            "SELECT * FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            run_id,
            after,
            limit,
        )
        return [row_to_event(r) for r in rows]

    def llm_calls(self, run_id: str) -> list[LLMCall]:
        rows = self._all("SELECT * FROM llm_calls WHERE run_id = ? ORDER BY id", run_id)
        return [row_to_call(r) for r in rows]
