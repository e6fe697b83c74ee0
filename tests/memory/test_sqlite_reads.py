"""``memory.sqlite_reads``: the read-only commands' reads of a current SQLite home on the
standard library's sqlite3. On real SQLite files written by the real Store, every read
gives what the Store's gives, record for record (and so does ``summarize``); anywhere it
must not answer (another schema, another database, a URL it cannot read as SQLAlchemy
does, ``REVTREE_LIGHT_READS=0``) it gives None; it never writes."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import JSON, Boolean, create_engine

from revtree.errors import RunNotFound, StoreError
from revtree.memory import NodeStatus, Store
from revtree.memory.db import alembic_config
from revtree.memory.models import METADATA
from revtree.memory.reads import StoreReads
from revtree.memory.records import EvalResult, LLMCall, Node, RunStatus
from revtree.memory.sqlite_reads import BOOL_COLUMNS, JSON_COLUMNS, OFF_ENV, SqliteReads
from revtree.orchestrator.commands.report import compare, summarize, transcripts
from tests.dashboard.test_summary_view import a_run


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'revtree.db'}"


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    s = Store(url)
    yield s
    s.close()


def light(url: str) -> SqliteReads:
    reads = SqliteReads.open(url)
    assert reads is not None
    return reads


def more_runs(store: Store) -> None:
    """Beside ``a_run``'s r1: a fork of it whose nodes carry every JSON column, a failed
    model call, an evaluation with metrics, host and GPUs; and runs whose ids hold LIKE's
    wildcards (a prefix lookup must not read them as wildcards)."""
    now = time.time()
    root = Node("f_1", 0, None, "baseline", NodeStatus.SUCCEEDED, score=5.0, n_evals=1)
    store.create_run(
        "f_1", "quad", "greedy", "minimize", 3, {"search": {"seed": 3, "operators": "bandit"}},
        parent_run="r1", parent_node=3, root=(root, ("n", "root", {"k": [1, 2]})),
    )  # fmt: skip
    node = Node(
        "f_1", 1, 0, "crossover", NodeStatus.FAILED, depth=1, error="boom", error_kind="crash",
        extra_parents=(0,), proposal={"hypothesis": "h", "knobs": {"X": 1.5}},
        review={"ok": False, "why": "w"}, lesson="l", alarm={"drift": 0.3},
        features={"len": 12, "complexity": 0.5}, created_at=now, finished_at=now + 1,
        thread_id="t1", attempt=2,
    )  # fmt: skip
    store.add_node(node, ("node", "node 1", None), policy_state={"islands": [[0, 1]]})
    store.update_node("f_1", 1, ("x", "timed", None), timings={"code": 1.25})
    result = EvalResult(
        1, "full", 0, False, None, {"f": 1.0, "nested": {"a": [1]}}, 3, 0.5, "out", "err",
        "failed", "crash", "/logs/x", attempt=2, host="h1", gpus=("0", "1"),
    )  # fmt: skip
    store.record_evaluation("f_1", result)
    call = LLMCall("proposer", "m2", 5, 0, 0, 0, 0.0, 0.2, False, 1, "refused", None, None)
    store.record_llm_call("f_1", call)
    store.update_run("f_1", ("run", "done", None), status=RunStatus.FAILED, reason="why")
    for run_id in ("f%2", "fx1", "f/3"):
        store.create_run(run_id, "quad", "greedy", "maximize", 0, {})


def as_json(value: object) -> str:
    """``value`` as ``show --json`` prints it (records by their fields)."""
    return json.dumps(value, default=lambda o: getattr(o, "__dict__", str(o)), sort_keys=True)


def every_read(reads: StoreReads, run_id: str) -> list[object]:
    nodes = reads.nodes(run_id)
    return [
        reads.get_run(run_id),
        nodes,
        [reads.node(run_id, n.id) for n in nodes],
        reads.evaluations(run_id),
        reads.evaluations(run_id, 3),
        reads.evaluations(run_id, None, "holdout"),
        reads.evaluations(run_id, 1, "full"),
        reads.sandbox_seconds(run_id),
        reads.decisions(run_id, {n.id: n.attempt for n in nodes}),
        reads.decisions(run_id, {2: 2}),  # another attempt: no decision
        reads.events_since(run_id),
        reads.events_since(run_id, 2, 3),
        reads.llm_calls(run_id),
    ]


def test_every_read_gives_the_stores_records(url: str, store: Store) -> None:
    a_run(store)
    more_runs(store)
    reads = light(url)
    assert reads.list_runs() == store.list_runs() and len(reads.list_runs()) == 5
    for run in store.list_runs():
        # as JSON too: 1 == True, but `show --json` would print 1 for true
        mine, theirs = every_read(reads, run.id), every_read(store, run.id)
        assert (mine, as_json(mine)) == (theirs, as_json(theirs)), run.id
        for with_nodes in (False, True):
            mine, theirs = summarize(reads, run, with_nodes), summarize(store, run, with_nodes)
            assert (mine, as_json(mine)) == (theirs, as_json(theirs)), run.id
        assert transcripts(reads, run.id) == transcripts(store, run.id)
    assert compare(reads, store.list_runs()) == compare(store, store.list_runs())
    # what the comparison covers: every JSON column set, a decision, a failed call
    fork = reads.node("f_1", 1)
    assert fork.features == {"len": 12, "complexity": 0.5} and fork.extra_parents == (0,)
    assert reads.decisions("r1", {2: 1})[2].accepted is True
    assert [c.ok for c in reads.llm_calls("f_1")] == [False]
    assert reads.evaluations("f_1")[0].gpus == ("0", "1")
    assert reads.get_run("f_1").policy_state == {"islands": [[0, 1]]}


def test_run_lookup_and_errors_are_the_stores(url: str, store: Store) -> None:
    a_run(store)
    more_runs(store)
    reads = light(url)
    for asked in ("last", "latest", "r1", "r", "f_", "f%", "f/", "fx", "F_1"):
        assert reads.get_run(asked) == store.get_run(asked), asked
    assert reads.get_run("f_").id == "f_1"  # '_' is no wildcard: fx1 does not match
    for asked in ("f", "nope", "%", "_1"):
        with pytest.raises(RunNotFound) as mine:
            reads.get_run(asked)
        with pytest.raises(RunNotFound) as theirs:
            store.get_run(asked)
        assert str(mine.value) == str(theirs.value), asked
    with pytest.raises(StoreError) as mine:
        reads.node("r1", 99)
    with pytest.raises(StoreError) as theirs:
        store.node("r1", 99)
    assert str(mine.value) == str(theirs.value)


def test_an_empty_home_reads_as_the_stores(url: str, store: Store) -> None:
    reads = light(url)
    assert reads.list_runs() == [] and reads.nodes("x") == [] and reads.sandbox_seconds("x") == 0
    with pytest.raises(RunNotFound, match="no run 'last'"):
        reads.get_run("last")


def test_the_converted_columns_are_the_models_json_and_boolean_ones() -> None:
    json_columns, bool_columns = set(), set()
    for table in METADATA.tables.values():
        for column in table.columns:
            if isinstance(column.type, JSON):
                json_columns.add(column.name)
            elif isinstance(column.type, Boolean):
                bool_columns.add(column.name)
    assert (json_columns, bool_columns) == (set(JSON_COLUMNS), set(BOOL_COLUMNS))


def downgrade_to(url: str, revision: str) -> None:
    """Take the schema back to ``revision`` with alembic, on an engine without the Store's
    ``foreign_keys=ON``: the downgrade copies ``nodes`` into a new table and drops the old,
    which with foreign keys on would cascade to every evaluation."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), revision)
    finally:
        engine.dispose()


def test_another_schema_or_database_is_left_to_the_store(
    url: str, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a_run(store)
    store.close()
    assert light(url).get_run("r1").id == "r1"
    monkeypatch.setenv(OFF_ENV, "0")
    assert SqliteReads.open(url) is None
    monkeypatch.delenv(OFF_ENV)
    downgrade_to(url, "0005")  # an older schema: the Store migrates it first
    assert SqliteReads.open(url) is None
    Store(url).close()
    assert light(url).nodes("r1")[0].features is None
    raw = sqlite3.connect(tmp_path / "revtree.db")
    with raw:
        raw.execute("UPDATE alembic_version SET version_num = '0099'")  # a newer revtree's
    assert SqliteReads.open(url) is None
    with raw:
        raw.execute("DROP TABLE alembic_version")
    raw.close()
    assert SqliteReads.open(url) is None
    (tmp_path / "text.db").write_text("no database\n" * 100)
    for other in (
        f"sqlite:///{tmp_path / 'text.db'}",  # no database: the Store says so in one line
        f"sqlite:///{tmp_path / 'missing.db'}",  # the Store says it is missing
        f"sqlite:///{tmp_path / 'revtree.db'}?timeout=5",  # a query SQLAlchemy reads
        "sqlite://",
        "sqlite:///:memory:",
        "postgresql://u@localhost/revtree",
    ):
        assert SqliteReads.open(other) is None, other
    assert not (tmp_path / "missing.db").exists()


def test_it_opens_read_only(url: str, store: Store, tmp_path: Path) -> None:
    a_run(store)
    reads = light(url)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reads.conn.execute("DELETE FROM runs")
    reads.close()
    assert [r.id for r in store.list_runs()] == ["r1"]
