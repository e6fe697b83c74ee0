"""Whole runs on a real PostgreSQL server (marker ``postgres``; a fresh database per test).

The Store and LangGraph's checkpointer both live in that database, LangGraph's tables in
their own schema. Skipped when ``REVTREE_TEST_PG`` is unset; CI always sets it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import inspect

from revtree.memory import NodeStatus, RunStatus, Store
from revtree.memory.checkpoints import CHECKPOINT_SCHEMA, checkpoint_tables, prune_run
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task

from ..pg import fresh_database
from .conftest import make_task

pytestmark = pytest.mark.postgres
BOUND = 240.0  # seconds a run may take before the test gives up


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.fixture
def pg_store(pg_url: str, home: Path) -> Iterator[Store]:
    s = Store(pg_url)
    yield s
    s.close()


def _drive(store: Store, home: Path, task: Path) -> str:
    run = create_run(store, load_task(task), home)
    orch = Orchestrator(store, run.id, home=home)
    try:
        orch.drive()
    finally:
        orch.close()
    return run.id


def _assert_complete(store: Store, run_id: str, nodes: int) -> None:
    run = store.get_run(run_id)
    assert run.status is RunStatus.COMPLETED, run.reason
    got = store.nodes(run_id)
    assert len(got) == nodes
    assert all(n.status is NodeStatus.SUCCEEDED for n in got)
    counts = store.evaluation_counts(run_id)
    assert set(counts.values()) == {1}  # nothing evaluated twice
    assert {n.id for n in got} == {key[0] for key in counts}  # and every node evaluated
    seqs = [e.seq for e in store.events_since(run_id, limit=100_000)]
    assert seqs == list(range(1, len(seqs) + 1))


def test_a_run_completes_on_postgres(
    tmp_path: Path, home: Path, pg_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert pg_store.engine.dialect.name == "postgresql"
    monkeypatch.setenv("REVTREE_PRUNE_EVERY", "0")  # keep them: counted below, then pruned
    run_id = _drive(pg_store, home, make_task(tmp_path / "t", budget=8, parallel=2))
    _assert_complete(pg_store, run_id, 8)
    # LangGraph's checkpoints are in that database too, in their own schema
    tables = inspect(pg_store.engine)
    assert "checkpoints" in tables.get_table_names(schema=CHECKPOINT_SCHEMA)
    assert "checkpoints" not in tables.get_table_names()
    assert "runs" not in tables.get_table_names(schema=CHECKPOINT_SCHEMA)

    def held() -> int:
        with pg_store.engine.connect() as conn:
            return int(
                conn.exec_driver_sql(
                    f"SELECT count(*) FROM {CHECKPOINT_SCHEMA}.checkpoints "
                    "WHERE thread_id LIKE %(p)s",
                    {"p": f"{run_id}:%"},
                ).scalar_one()
            )

    assert held() > 0
    # what a run does by itself every 16 candidates (REVTREE_PRUNE_EVERY) works here too
    assert prune_run(pg_store, run_id, checkpoint_tables(pg_store)) > 0
    assert held() == 0


def test_two_runs_driven_at_once_into_one_database(tmp_path: Path, home: Path, pg_url: str) -> None:
    results: dict[int, str] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def drive(i: int) -> None:
        store = Store(pg_url)  # one Store per driver, as two processes would have
        try:
            task = make_task(tmp_path / f"t{i}", budget=8, parallel=2)
            start.wait(timeout=BOUND)
            results[i] = _drive(store, home, task)
        except BaseException as e:  # surfaced below
            errors.append(e)
        finally:
            store.close()

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=BOUND)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    store = Store(pg_url)
    try:
        assert len(set(results.values())) == 2
        for run_id in results.values():
            _assert_complete(store, run_id, 8)
    finally:
        store.close()


def test_resume_after_a_stop_on_postgres(tmp_path: Path, home: Path, pg_store: Store) -> None:
    run = create_run(pg_store, load_task(make_task(tmp_path / "t", budget=8, parallel=2)), home)
    first = Orchestrator(pg_store, run.id, home=home)
    first.parts.budget.limits = first.spec.with_overrides(budget={"max_nodes": 4}).budget
    try:
        first.drive()  # a first session that ends early, as a stop would
    finally:
        first.close()
    pg_store.update_run(run.id, ("run", "stopped by user", None), status=RunStatus.STOPPED)
    assert len(pg_store.nodes(run.id)) == 4
    before = {(e.node_id, e.stage, e.repeat): e for e in pg_store.evaluations(run.id)}

    again = Orchestrator(pg_store, run.id, home=home)
    try:
        again.drive()
    finally:
        again.close()
    _assert_complete(pg_store, run.id, 8)
    after = {(e.node_id, e.stage, e.repeat): e for e in pg_store.evaluations(run.id)}
    assert {k: after[k] for k in before} == before  # nothing recorded was lost or redone
