"""The SQL Store on a real SQLite file and on a real PostgreSQL server (marker ``postgres``,
a fresh database per test): runs, nodes, evaluations, the event log, migrations."""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, event, inspect, text

from revtree.errors import RunNotFound, StoreError
from revtree.memory import EvalResult, Node, NodeStatus, RunStatus, Store
from revtree.memory.db import (
    HEAD,
    MIGRATIONS,
    alembic_config,
    current_revision,
    make_engine,
    normalize_url,
    table_names,
    transaction,
)
from revtree.memory.models import METADATA

from ..pg import fresh_database

BOUND = 60.0  # seconds a writer subprocess may take before the test gives up


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/x.db"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, sqlite_url: str) -> Iterator[str]:
    """An empty database: a SQLite file, or a fresh database on the PostgreSQL server."""
    if request.param == "sqlite":
        yield sqlite_url
        return
    with fresh_database() as pg_url:
        yield pg_url


@pytest.fixture
def store(url: str):
    s = Store(url)
    yield s
    s.close()


def new_run(store: Store, run_id: str = "run-1") -> str:
    store.create_run(run_id, "demo", "greedy", "maximize", 7, {"name": "demo"})
    return run_id


def root(run_id: str, node_id: int = 0, parent: int | None = None) -> Node:
    return Node(
        run_id=run_id,
        id=node_id,
        parent_id=parent,
        operator="draft",
        status=NodeStatus.PENDING,
        depth=0 if parent is None else 1,
    )


def seqs(store: Store, run_id: str) -> list[int]:
    return [e.seq for e in store.events_since(run_id, limit=100_000)]


def test_create_run_records_it_with_an_event(store):
    info = store.create_run("run-1", "demo", "greedy", "minimize", 7, {"name": "demo", "k": [1]})
    assert (info.id, info.task_name, info.policy, info.seed) == ("run-1", "demo", "greedy", 7)
    assert info.status is RunStatus.RUNNING and not info.maximize
    assert info.spec == {"name": "demo", "k": [1]}
    events = store.events_since("run-1")
    assert [(e.seq, e.kind) for e in events] == [(1, "run")]
    assert store.list_runs() == [info]
    assert table_names(store.engine) == [
        "alembic_version",
        "evaluations",
        "events",
        "llm_calls",
        "nodes",
        "runs",
    ]


def test_add_and_update_node(store):
    run = new_run(store)
    ev = store.add_node(
        root(run), ("node", "node 0 selected", {"op": "draft"}), policy_state={"rng": [1, 2, 3]}
    )
    assert (ev.seq, ev.node_id, ev.data) == (2, 0, {"op": "draft"})
    assert store.get_run(run).policy_state == {"rng": [1, 2, 3]}
    stored = store.node(run, 0)
    assert stored == dataclasses.replace(root(run), created_at=stored.created_at)
    assert stored.created_at > 0

    ev2 = store.update_node(
        run,
        0,
        ("node", "node 0 succeeded", None),
        status=NodeStatus.SUCCEEDED,
        score=1.5,
        commit="abc",
        n_evals=2,
        timings={"eval": 0.5},
    )
    assert ev2 is not None and ev2.seq == 3
    node = store.node(run, 0)
    assert (node.status, node.score, node.commit, node.n_evals) == (
        NodeStatus.SUCCEEDED,
        1.5,
        "abc",
        2,
    )
    assert node.status.is_finished()
    assert store.node_timings(run) == {0: {"eval": 0.5}}
    assert store.update_node(run, 0, None, error=None) is None
    assert seqs(store, run) == [1, 2, 3]

    with pytest.raises(StoreError, match="no node 9"):
        store.update_node(run, 9, None, score=1.0)
    with pytest.raises(StoreError):
        store.node(run, 9)
    # a typo, a statement's own parameter or nothing to set: refused, the node unchanged
    for wrong in ({"scroe": 2.0}, {"_run": "x", "score": 2.0}, {}):
        with pytest.raises(StoreError, match="needs node columns"):
            store.update_node(run, 0, ("node", "not said", None), **wrong)
    assert store.node(run, 0).score == 1.5 and seqs(store, run) == [1, 2, 3]


def test_failed_write_adds_no_event_and_leaves_no_gap(store):
    run = new_run(store)
    store.add_node(root(run), ("node", "first", None))
    with pytest.raises(StoreError):
        store.add_node(root(run), ("node", "duplicate id", None))  # same (run, id)
    assert seqs(store, run) == [1, 2]
    assert store.add_event(run, "note", "after the failure").seq == 3


def test_event_seqs_increase_by_one_per_run_independently(store):
    a, b = new_run(store, "run-a"), new_run(store, "run-b")
    for i in range(5):
        store.add_event(a, "note", f"a{i}")
        if i % 2:
            store.add_event(b, "note", f"b{i}", data={"i": i})
    assert seqs(store, a) == [1, 2, 3, 4, 5, 6]
    assert seqs(store, b) == [1, 2, 3]
    assert [e.message for e in store.events_since(a, after=4)] == ["a3", "a4"]
    assert [e.data for e in store.events_since(b, after=1)] == [{"i": 1}, {"i": 3}]
    assert [e.seq for e in store.events_since(a, after=1, limit=2)] == [2, 3]


def test_update_run_status_with_event(store):
    run = new_run(store)
    ev = store.update_run(
        run, ("run", "stopped by user", None), status="stopped", reason="user", wall_used=12.5
    )
    assert ev is not None and ev.seq == 2
    info = store.get_run(run)
    assert (info.status, info.reason, info.wall_used) == (RunStatus.STOPPED, "user", 12.5)
    assert info.status.is_finished()


def test_duplicate_evaluation_is_ignored(store):
    run = new_run(store)
    store.add_node(root(run), ("node", "n0", None))
    first = EvalResult(
        node_id=0,
        stage="full",
        repeat=0,
        ok=True,
        score=1.0,
        metrics={"score": 1.0},
        exit_code=0,
        duration=2.0,
    )
    again = EvalResult(
        node_id=0,
        stage="full",
        repeat=0,
        ok=False,
        score=None,
        duration=3.0,
        error="second",
        error_kind="crash",
    )
    assert store.record_evaluation(run, first, ("eval", "full 0", None)) is not None
    events_before = seqs(store, run)
    assert store.record_evaluation(run, again, ("eval", "full 0 again", None)) is None
    assert seqs(store, run) == events_before
    assert store.evaluation_counts(run) == {(0, "full", 0): 1}
    assert store.evaluations(run) == [first]
    store.record_evaluation(run, EvalResult(0, "full", 1, True, 3.0, duration=1.0))
    assert store.evaluation_counts(run) == {(0, "full", 0): 1, (0, "full", 1): 1}
    assert store.sandbox_seconds(run) == 3.0
    assert [e.repeat for e in store.evaluations(run, node_id=0)] == [0, 1]


def test_get_run_by_prefix_and_last(store):
    for run_id in ("abc123", "abd456", "x_y1"):
        new_run(store, run_id)
        time.sleep(0.01)  # distinct created_at, so 'last' is well defined
    assert store.get_run("abc").id == "abc123"
    assert store.get_run("abd456").id == "abd456"
    assert store.get_run("x_").id == "x_y1"
    assert store.get_run("last").id == "x_y1"
    with pytest.raises(RunNotFound, match="ambiguous"):
        store.get_run("ab")
    with pytest.raises(RunNotFound, match="no run"):
        store.get_run("zzz")
    with pytest.raises(RunNotFound, match="no run"):
        store.get_run("a_")  # '_' is a literal here, not a LIKE wildcard
    with pytest.raises(RunNotFound, match="no run"):
        store.get_run("a%")


def test_last_on_an_empty_store_is_not_found(store):
    with pytest.raises(RunNotFound):
        store.get_run("last")


def test_second_store_on_the_same_file_sees_the_data(store, url):
    run = new_run(store)
    store.add_node(root(run), ("node", "n0", None))
    other = Store(url)
    try:
        assert other.get_run(run).task_name == "demo"
        assert [n.id for n in other.nodes(run)] == [0]
        other.add_event(run, "note", "from the other store")
        assert seqs(store, run) == [1, 2, 3]
    finally:
        other.close()


def test_delete_run_removes_everything(store):
    run = new_run(store)
    store.add_node(root(run), ("node", "n0", None))
    store.record_evaluation(run, EvalResult(0, "full", 0, True, 1.0))
    keep = new_run(store, "run-keep")
    store.delete_run(run)
    with pytest.raises(RunNotFound):
        store.get_run(run)
    assert store.nodes(run) == [] and store.evaluations(run) == [] and seqs(store, run) == []
    assert seqs(store, keep) == [1]


def upgrade_to(engine: Engine, revision: str) -> None:
    """The migrations replayed by alembic up to ``revision``, as an older revtree did, in
    one transaction (``transaction``: on SQLite, ``engine.begin()`` would run each step in
    the driver's autocommit mode)."""
    with transaction(engine, write=True) as conn:
        command.upgrade(alembic_config(conn), revision)


def schema(engine: Engine) -> dict[str, object]:
    """Every table as the database describes it: its columns in order (type, null,
    default), keys, indexes, unique, foreign and check constraints, and its row count;
    on SQLite also every object's normalised SQL (AUTOINCREMENT, COLLATE, partial and
    expression indexes, triggers, views, constraint names), on PostgreSQL its views and
    triggers."""
    seen = inspect(engine)
    with engine.connect() as conn:
        tables: dict[str, object] = {
            table: {
                "columns": [
                    (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                    for c in seen.get_columns(table)
                ],
                "pk": seen.get_pk_constraint(table)["constrained_columns"],
                "indexes": sorted(
                    (i["name"], tuple(map(str, i["column_names"])), bool(i["unique"]))
                    for i in seen.get_indexes(table)
                ),
                "unique": sorted(str(u) for u in seen.get_unique_constraints(table)),
                "foreign": sorted(str(f) for f in seen.get_foreign_keys(table)),
                "checks": sorted(str(c) for c in seen.get_check_constraints(table)),
                "rows": conn.exec_driver_sql(f'SELECT count(*) FROM "{table}"').scalar(),
            }
            for table in sorted(seen.get_table_names())
        }
        if engine.dialect.name == "sqlite":
            objects = conn.exec_driver_sql(
                "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
            )
            tables["sqlite_master"] = [
                (kind, name, table, re.sub(r"\s*([(),])\s*", r"\1", " ".join((sql or "").split())))
                for kind, name, table, sql in objects
            ]
        else:
            tables["views"] = sorted(seen.get_view_names())
            tables["triggers"] = sorted(
                conn.exec_driver_sql(
                    "SELECT trigger_name, event_object_table FROM information_schema.triggers"
                ).all()
            )
    return tables


def test_migration_matches_the_models(url):
    """The migrations replayed one by one give what the models say."""
    engine = make_engine(url)
    try:
        upgrade_to(engine, "head")
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(context, METADATA)
        assert diff == []
    finally:
        engine.dispose()


def test_a_new_database_is_made_as_the_migrations_make_it(url, tmp_path):
    """A Store on an empty database makes the newest schema from the models at once
    (no alembic import, no replay): the same tables, columns, types, defaults, keys,
    indexes and constraints as the migrations replayed one by one, stamped HEAD, and
    an older revision still upgrades step by step."""
    made = Store(url)
    with made.engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == HEAD
    if url.startswith("sqlite"):
        assert schema(made.engine) == replayed_schema(f"sqlite:///{tmp_path}/replayed.db")
        older = make_engine(f"sqlite:///{tmp_path}/older.db")
        upgrade_to(older, "0005")
        Store(f"sqlite:///{tmp_path}/older.db").close()  # upgrades it, keeps its tables
        assert schema(older) == schema(made.engine)
        older.dispose()
    else:
        with fresh_database() as other:
            assert schema(made.engine) == replayed_schema(other)
    made.close()


def replayed_schema(url: str) -> dict[str, object]:
    """The :func:`schema` of the empty database at ``url`` once alembic has replayed every
    migration in it."""
    engine = make_engine(url)
    try:
        upgrade_to(engine, "head")
        return schema(engine)
    finally:
        engine.dispose()


def test_head_constant_is_the_newest_migration():
    scripts = ScriptDirectory(str(MIGRATIONS))
    assert scripts.get_heads() == [HEAD]
    assert scripts.get_current_head() == HEAD


def test_store_stamps_the_head_revision(store):
    with store.engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == HEAD


def test_current_revision_reads_what_alembic_reads(url):
    """The read that spares every command alembic's import: None on an empty database,
    an older revision where one is stamped, HEAD after the migration, as alembic says."""
    engine = make_engine(url)
    try:
        for stamp in (None, "0005", HEAD):
            if stamp is not None:
                upgrade_to(engine, stamp)
            with engine.connect() as conn:
                alembic = MigrationContext.configure(conn).get_current_revision()
                assert current_revision(conn) == alembic == stamp
    finally:
        engine.dispose()


def test_wal_mode_is_on(sqlite_url, tmp_path):
    store = Store(sqlite_url)
    new_run(store)
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    store.close()
    raw = sqlite3.connect(tmp_path / "x.db")
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persisted in the file
    finally:
        raw.close()


def test_postgres_urls_use_psycopg_3():
    for url in ("postgresql://u:p@h:5/db", "postgres://u:p@h:5/db", "postgresql+psycopg://u@h/db"):
        assert normalize_url(url).drivername == "postgresql+psycopg"
        assert make_engine(url).dialect.driver == "psycopg"
    assert normalize_url("sqlite:///x.db").drivername == "sqlite"


def test_connections_opening_a_fresh_sqlite_file_at_once_all_get_wal(tmp_path):
    """SQLite's switch to WAL does not wait on the busy timeout: without a retry, about
    one open in a hundred of four at once on a fresh file failed ("database is
    locked") on a loaded machine."""
    errors: list[BaseException] = []
    modes: list[str] = []

    def connect(url: str, start: threading.Barrier) -> None:
        try:
            start.wait(timeout=BOUND)
            engine = make_engine(url)
            with engine.connect() as conn:
                modes.append(conn.exec_driver_sql("PRAGMA journal_mode").scalar())
                conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (x)")
            engine.dispose()
        except BaseException as e:  # surfaced below
            errors.append(e)

    for i in range(60):
        start = threading.Barrier(4)
        url = f"sqlite:///{tmp_path / f'{i}.db'}"
        threads = [threading.Thread(target=connect, args=(url, start)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=BOUND)
    assert errors == []
    assert modes == ["wal"] * 240


def test_stores_migrating_a_fresh_database_at_once_all_succeed(url):
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def open_store() -> None:
        try:
            start.wait(timeout=BOUND)
            Store(url).close()
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=BOUND)
    assert errors == []
    store = Store(url)
    try:
        with store.engine.connect() as conn:
            assert MigrationContext.configure(conn).get_current_revision() == HEAD
        assert new_run(store) == "run-1"
    finally:
        store.close()


@pytest.mark.parametrize("own_store", [False, True], ids=["shared-store", "store-per-thread"])
def test_concurrent_thread_writers_get_gap_free_seqs(store, url, own_store):
    run = new_run(store)
    before = len(seqs(store, run))
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def writer(w: int) -> None:
        s = Store(url) if own_store else store
        try:
            start.wait(timeout=BOUND)
            for i in range(50):
                s.add_event(run, "note", f"w{w}-{i}", data={"w": w, "i": i})
        except BaseException as e:  # surfaced below
            errors.append(e)
        finally:
            if own_store:
                s.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=BOUND)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    _assert_gap_free(store, run, before, writers=4, per_writer=50)


WRITER = """
import sys, time, pathlib
from revtree.memory import Store
url, run, w, n, folder = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
store = Store(url)
pathlib.Path(folder, f"ready-{w}").touch()
deadline = time.monotonic() + 30
while not pathlib.Path(folder, "go").exists() and time.monotonic() < deadline:
    time.sleep(0.005)
for i in range(n):
    store.add_event(run, "note", f"w{w}-{i}", data={"w": w, "i": i})
store.close()
"""


@pytest.mark.slow  # writer processes per database, 4-5 s (issue 24)
def test_concurrent_process_writers_get_gap_free_seqs(store, url, tmp_path):
    run = new_run(store)
    before = len(seqs(store, run))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, run, str(w), "60", str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(2)
    ]
    try:
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline and not all(
            (tmp_path / f"ready-{w}").exists() or procs[w].poll() is not None for w in range(2)
        ):
            time.sleep(0.01)
        (tmp_path / "go").touch()
        outputs = [p.communicate(timeout=BOUND) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    _assert_gap_free(store, run, before, writers=2, per_writer=60)


def _assert_gap_free(store: Store, run: str, before: int, writers: int, per_writer: int) -> None:
    events = store.events_since(run, limit=100_000)
    total = before + writers * per_writer
    assert [e.seq for e in events] == list(range(1, total + 1))
    assert store.get_run(run).id == run
    written = [e for e in events if e.kind == "note"]
    for w in range(writers):
        mine = [e.data["i"] for e in written if e.data and e.data["w"] == w]
        assert mine == list(range(per_writer))  # each writer's events in its own order


def test_listeners_see_committed_events_in_order(store, url):
    run = new_run(store)
    other = Store(url)
    seen: list[tuple[int, bool]] = []

    def listener(event):  # runs after the commit: another connection can already read it
        stored = [e.seq for e in other.events_since(run, after=event.seq - 1, limit=1)]
        seen.append((event.seq, stored == [event.seq]))

    store.listeners.append(listener)
    try:
        store.add_event(run, "note", "one")
        store.add_node(root(run), ("node", "n0", None))
        with pytest.raises(StoreError):
            store.add_node(root(run), ("node", "duplicate", None))  # rolled back: not shown
        store.record_evaluation(run, EvalResult(0, "full", 0, True, 1.0), ("eval", "e", None))
        store.record_evaluation(run, EvalResult(0, "full", 0, True, 1.0), ("eval", "dup", None))
        store.update_node(run, 0, None, score=1.0)  # no event, nothing to show
    finally:
        other.close()
    assert seen == [(2, True), (3, True), (4, True)]


def test_a_failing_listener_is_dropped_and_the_write_stands(store):
    run = new_run(store)
    calls: list[int] = []

    def broken(event):
        calls.append(event.seq)
        raise RuntimeError("display crashed")

    store.listeners.append(broken)
    store.add_event(run, "note", "a")
    store.add_event(run, "note", "b")
    assert calls == [2] and store.listeners == []
    assert seqs(store, run) == [1, 2, 3]


def test_a_write_transaction_takes_the_lock_as_it_begins_and_a_read_does_not(tmp_path):
    """SQLite: ``transaction(write=True)`` begins with BEGIN IMMEDIATE (it waits for
    another writer before its body runs), a read with a plain BEGIN (it runs beside one);
    a read after a write on the same pooled connection begins plainly."""
    engine = make_engine(f"sqlite:///{tmp_path}/x.db")
    said: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda _c, _u, sql, *_: said.append(sql))
    with transaction(engine, write=True) as conn:
        conn.execute(text("select 1"))
    with transaction(engine) as conn:
        conn.execute(text("select 2"))
    assert said == ["BEGIN IMMEDIATE", "select 1", "BEGIN", "select 2"]

    other = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
    entered = {"read": threading.Event(), "write": threading.Event()}

    def enter(kind: str) -> None:
        with transaction(engine, write=kind == "write") as conn:
            entered[kind].set()
            conn.execute(text("select 3"))

    threads = [threading.Thread(target=enter, args=(k,), daemon=True) for k in entered]
    for t in threads:
        t.start()
    assert entered["read"].wait(10)
    assert not entered["write"].wait(0.3)  # waits on the busy handler, at its BEGIN
    other.execute("COMMIT")
    assert entered["write"].wait(10)
    for t in threads:
        t.join(10)
    other.close()
    engine.dispose()
