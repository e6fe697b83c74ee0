"""Engines, sessions and migrations.

SQLite (the default) runs in WAL mode with a busy timeout; write transactions start
with ``BEGIN IMMEDIATE`` so concurrent writers queue instead of failing on a lock
upgrade. Any SQLAlchemy URL works; PostgreSQL (``postgresql+psycopg://``, psycopg 3) is
the backend for memory shared by several processes or machines: a bare ``postgresql://``
or ``postgres://`` URL means psycopg 3 too, and concurrent migrations queue on an advisory
lock.

Opening is where a mistyped ``--db`` shows: :func:`make_engine` refuses a URL that does
not parse (a bare path, say) and, unless asked to ``create``, a SQLite file that does not
exist (:class:`NoDatabase`, so that a read leaves nothing behind); :func:`probe` turns a
database that cannot be reached or read into one line naming the URL, its password
hidden (:func:`display_url`).
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import sqlite3
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from revtree.errors import StoreError
from revtree.memory.sqlite_reads import HEAD  # kept there, importable without SQLAlchemy

MIGRATIONS = Path(__file__).parent / "migrations"
MIGRATE_TRIES = 12  # backoff 0.1, 0.2, ... s: about 6.6 s in all (a loaded CI ran out of 6)
MIGRATION_LOCK = 0x72657674  # PostgreSQL advisory lock key ("revt") held while migrating
CONNECT_TIMEOUT = 10  # seconds for a PostgreSQL server to answer (the OS default is minutes)
MEMORY = "sqlite://"  # an empty store that lives as long as the process (nothing on disk)


class NoDatabase(StoreError):
    """A SQLite file that a read would have created; ``folder`` tells whether its folder
    exists (a missing one is likely a mistyped path)."""

    def __init__(self, message: str, folder: bool) -> None:
        super().__init__(message)
        self.folder = folder


def normalize_url(url: str) -> URL:
    """The URL as SQLAlchemy reads it; PostgreSQL URLs without a driver use psycopg 3.
    Raises :class:`StoreError` (one line) for text that is no database URL."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    try:
        parsed = make_url(url)
    except ArgumentError:
        hint = "e.g. sqlite:////abs/path/revtree.db or postgresql://USER@HOST/DB"
        if "://" not in url and not re.search(r"\w@", url):  # a path: say its URL
            hint = f"for a SQLite file: sqlite:///{Path(url).expanduser().absolute()}"
        raise StoreError(f"--db {_mask(url)!r} is not a database URL ({hint})") from None
    except ValueError as e:  # a port that is no number
        raise StoreError(f"--db {_mask(url)!r} is not a database URL ({e})") from None
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _mask(text: str) -> str:
    """``text`` with anything like a password replaced by ``***``: ``user:secret@``, up to
    the last ``@`` before the host (an unescaped ``@`` in a password), and a ``password=``
    query parameter."""
    text = re.sub(r"((?:^|/|[\s'\"])[^:/@?#\s'\"]*):[^/?#\s'\"]*@", r"\1:***@", text)
    return re.sub(r"(?i)(password=)[^&\s'\"]*", r"\1***", text)


def hide(text: str, url: URL) -> str:
    """``text`` (a message about ``url``) with the URL's secrets hidden: its password, a
    ``password`` query parameter, and the part of a host before an ``@`` (what a password
    with an unescaped ``@`` leaves there, which the driver's own message quotes)."""
    host = url.host or ""
    if "@" in host:
        text = text.replace(host, "***@" + host.rpartition("@")[2])
    return _mask(text)


def display_url(url: str) -> str:
    """The URL to show a person: its password hidden."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return _mask(url)
    return hide(parsed.render_as_string(hide_password=True), parsed)


# Every engine made here, disposed at exit if it still lives: its connections close, so a
# SQLite file merges its write-ahead log and drops it (the last connection's close does)
# and a PostgreSQL server sees its sessions end. The interpreter's collection at exit did
# it for an engine in a reference cycle; ``revtree.collector`` freezes what a command
# holds, which that collection then leaves alone. Only in the process that made it: a
# forked child that exits normally must not close (and checkpoint) its parent's connections.
_ENGINES: weakref.WeakKeyDictionary[Engine, int] = weakref.WeakKeyDictionary()


@atexit.register
def _dispose_all() -> None:
    for engine, pid in list(_ENGINES.items()):
        if pid != os.getpid():
            continue
        try:
            engine.dispose()
        except Exception:  # exiting: one engine's failure must not stop the rest
            continue


def make_engine(url: str, create: bool = True) -> Engine:
    """An engine on ``url`` (disposed at exit, if it still lives then). ``create``: a
    SQLite file (and its folder) is made if missing; otherwise a missing file raises
    :class:`NoDatabase` and nothing is made."""
    engine = _make_engine(url, create)
    _ENGINES[engine] = os.getpid()
    return engine


def _make_engine(url: str, create: bool) -> Engine:
    parsed = normalize_url(url)
    if parsed.get_backend_name() != "sqlite":
        psycopg = parsed.get_driver_name() == "psycopg"
        connect = {"connect_timeout": CONNECT_TIMEOUT} if psycopg else {}
        try:
            return create_engine(
                parsed, pool_pre_ping=True, pool_size=10, max_overflow=20, connect_args=connect
            )
        except (ImportError, NoSuchModuleError):  # e.g. mysql://: no driver installed
            raise StoreError(
                f"--db {display_url(url)!r}: revtree stores runs in SQLite or PostgreSQL "
                "(sqlite:///PATH or postgresql://USER@HOST/DB)"
            ) from None
    memory = not parsed.database or parsed.database == ":memory:"
    if not memory:
        path = Path(parsed.database or "").expanduser()
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.exists():
            folder = path.parent.is_dir()
            why = "no run has used it yet" if folder else f"the folder {path.parent} does not exist"
            raise NoDatabase(f"no database at {path}: {why}", folder)
    pool: dict[str, Any] = {"poolclass": StaticPool} if memory else {}  # one shared connection
    engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False}, **pool)
    event.listen(engine, "connect", _sqlite_connect)  # (no "begin" listener: ``_begin``)
    return engine


def probe(engine: Engine) -> None:
    """Connect once, reading the schema version, so that a database that cannot be
    reached or is no database fails here in one line (:class:`StoreError`) naming the
    URL with its password hidden, not as a traceback from deep in a migration."""
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
            inspect(conn).get_table_names()
    except (SQLAlchemyError, sqlite3.Error) as e:  # a connect hook's error is not wrapped
        cause = str(getattr(e, "orig", None) or e).strip().splitlines()
        first = cause[0] if cause else type(e).__name__
        shown = engine.url.render_as_string(hide_password=True)
        shown, first = hide(shown, engine.url), hide(first, engine.url)
        raise StoreError(f"cannot open the database {shown}: {first}") from None


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
    cur = dbapi_conn.cursor()
    for pragma in (  # the busy timeout first: switching a fresh file to WAL takes a lock
        "busy_timeout=60000",
        # a new file only (no effect once it has tables): pages freed by the checkpoint
        # prunes can be given back to the file system (checkpoints.prune_run)
        "auto_vacuum=INCREMENTAL",
        "synchronous=NORMAL",
        "foreign_keys=ON",
    ):
        cur.execute(f"PRAGMA {pragma}")
    wal(cur)
    cur.close()


def wal(cur: sqlite3.Cursor | sqlite3.Connection) -> None:
    """Put the file in WAL mode. The switch does not wait on SQLite's busy handler: on a
    fresh file that other connections are opening at the same moment it can fail at once
    with "database is locked" (1 open in 100 of four at once, on a loaded machine), so it
    is retried, as long as the busy timeout would have waited."""
    deadline = time.monotonic() + 60
    for attempt in itertools.count():
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(min(0.01 * (attempt + 1), 0.2))


def _begin(conn: Connection, write: bool) -> None:
    """SQLite: the BEGIN the driver is told not to issue (``_sqlite_connect``), ``BEGIN
    IMMEDIATE`` for a write. Issued here, in the two places that begin revtree's
    transactions (``transaction``, ``_locked``), rather than from a "begin" listener on
    the engine: any listener of a connection's events sends each statement of each
    connection through SQLAlchemy's event dispatch, which made a write transaction
    about 160 us against 115 us without (SQLite, ``select 1`` inside, 3000 in a loop).
    A connection begun elsewhere (``engine.begin()``, ``inspect(engine)``) runs in the
    driver's autocommit mode, one statement at a time: fine for the schema reads that
    do so (``probe``, ``migrate``'s look), not for work that must be atomic."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


@contextmanager
def transaction(engine: Engine, write: bool = False) -> Iterator[Connection]:
    """One transaction: committed on success, rolled back and wrapped on error. ``write``:
    on SQLite it takes the write lock as it begins (``BEGIN IMMEDIATE``), so that two
    writers wait on the busy handler rather than one failing at its first write."""
    try:
        with engine.connect() as conn, conn.begin():
            _begin(conn, write)
            yield conn
    except SQLAlchemyError as e:
        raise StoreError(f"database error on {engine.url.render_as_string()}: {e}") from e


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (cheap when it is already there: one read,
    and alembic is imported only to upgrade). An empty database is made at the newest
    revision at once (``_create``)."""
    for attempt in range(MIGRATE_TRIES):
        try:
            with engine.connect() as conn:
                revision = current_revision(conn)
            if revision == HEAD or (revision is None and _create(engine)):
                return
            _upgrade(engine)
            return
        except (OperationalError, StoreError):  # another process migrated at the same time
            if attempt == MIGRATE_TRIES - 1:
                raise
            time.sleep(0.1 * (attempt + 1))  # SQLite: a read that would have to upgrade
            # to a write while another connection migrates gets "locked" at once


def current_revision(conn: Connection) -> str | None:
    """The schema's revision as alembic records it (its ``alembic_version`` table, one row:
    our migrations have no branches); None where no migration has run."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    revision = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    return None if revision is None else str(revision)


def _create(engine: Engine) -> bool:
    """The newest schema made from the models in an empty database, and stamped as alembic
    stamps it, in one transaction. Where the database is not empty: True if another process
    made it at HEAD meanwhile, else False (tables without a revision: ``_upgrade``
    decides). Replaying every
    migration instead costs alembic's import and each step: 0.15 s of a first ``revtree
    run`` in a new home. tests/memory/test_store.py holds the two to the same schema."""
    from revtree.memory.models import METADATA

    with _locked(engine) as conn:
        if inspect(conn).get_table_names():  # made meanwhile: True spares alembic's import
            return current_revision(conn) == HEAD
        METADATA.create_all(conn)
        conn.exec_driver_sql(
            "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
            "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
        )
        conn.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": HEAD})
    return True


def _upgrade(engine: Engine) -> None:
    from alembic import command

    with _locked(engine) as conn:
        command.upgrade(alembic_config(conn), "head")


def alembic_config(conn: Connection) -> Any:
    """alembic's configuration of our migrations, on ``conn`` (an ``alembic.config.Config``;
    alembic is imported here, only where a schema moves)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    return cfg


@contextmanager
def _locked(engine: Engine) -> Iterator[Connection]:
    """A write transaction that no other process migrates beside: SQLite's ``BEGIN
    IMMEDIATE``, PostgreSQL's advisory lock (another process may be migrating: queue)."""
    with engine.connect() as conn, conn.begin():
        _begin(conn, write=True)
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        yield conn


def table_names(engine: Engine) -> list[str]:
    return sorted(inspect(engine).get_table_names())
