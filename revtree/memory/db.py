"""Engines, sessions and migrations.

SQLite (the default) runs in WAL mode with a busy timeout; write transactions start
with ``BEGIN IMMEDIATE`` so concurrent writers queue instead of failing on a lock
upgrade. Any SQLAlchemy URL works; PostgreSQL (``postgresql+psycopg://``, psycopg 3) is
the backend for memory shared by several processes or machines: a bare ``postgresql://``
or ``postgres://`` URL means psycopg 3 too, and concurrent migrations queue on an advisory
lock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from revtree.errors import StoreError

MIGRATIONS = Path(__file__).parent / "migrations"
HEAD = "0006"
MIGRATE_TRIES = 6
MIGRATION_LOCK = 0x72657674  # PostgreSQL advisory lock key ("revt") held while migrating


def revtree_home() -> Path:
    """``$REVTREE_HOME``, by default ``~/.revtree``."""
    return Path(os.environ.get("REVTREE_HOME") or Path.home() / ".revtree").expanduser()


def default_url() -> str:
    """``$REVTREE_DB``, else the SQLite file ``$REVTREE_HOME/revtree.db``."""
    return os.environ.get("REVTREE_DB") or f"sqlite:///{revtree_home() / 'revtree.db'}"


def normalize_url(url: str) -> URL:
    """The URL as SQLAlchemy reads it; PostgreSQL URLs without a driver use psycopg 3."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def make_engine(url: str) -> Engine:
    parsed = normalize_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, pool_pre_ping=True, pool_size=10, max_overflow=20)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
    cur = dbapi_conn.cursor()
    for pragma in (  # the busy timeout first: switching a fresh file to WAL takes a lock
        "busy_timeout=60000",
        "journal_mode=WAL",
        "synchronous=NORMAL",
        "foreign_keys=ON",
    ):
        cur.execute(f"PRAGMA {pragma}")
    cur.close()


def _sqlite_begin(conn: Connection) -> None:
    immediate = conn.get_execution_options().get("sqlite_immediate", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


@contextmanager
def transaction(engine: Engine, write: bool = False) -> Iterator[Connection]:
    """One transaction: committed on success, rolled back and wrapped on error."""
    bind = engine.execution_options(sqlite_immediate=True) if write else engine
    try:
        with bind.begin() as conn:
            yield conn
    except SQLAlchemyError as e:
        raise StoreError(f"database error on {engine.url.render_as_string()}: {e}") from e


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (cheap when it is already there)."""
    from alembic.runtime.migration import MigrationContext

    for attempt in range(MIGRATE_TRIES):
        try:
            with engine.connect() as conn:
                if MigrationContext.configure(conn).get_current_revision() == HEAD:
                    return
            _upgrade(engine)
            return
        except (OperationalError, StoreError):  # another process migrated at the same time
            if attempt == MIGRATE_TRIES - 1:
                raise
            time.sleep(0.1 * (attempt + 1))  # SQLite: a read that would have to upgrade
            # to a write while another connection migrates gets "locked" at once


def _upgrade(engine: Engine) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.execution_options(sqlite_immediate=True).begin() as conn:
        if conn.dialect.name == "postgresql":  # another process may be migrating: queue
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def table_names(engine: Engine) -> list[str]:
    return sorted(inspect(engine).get_table_names())
