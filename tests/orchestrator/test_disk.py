"""A run deletes its finished candidates' LangGraph checkpoints as it goes (every
``PRUNE_EVERY`` candidates and at its end), and the SQLite file revtree made hands the
freed pages back (``auto_vacuum=INCREMENTAL``): disk per candidate (issue 24) without
``revtree gc``. Measured in benchmarks/peer.py (disk/cand), not asserted here."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from revtree.memory import Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task

from .conftest import make_task


def _run(tmp_path: Path, home: Path, store: Store) -> tuple[set[str], set[str]]:
    """Run a 20-node task; (threads of finished nodes, threads holding checkpoints)."""
    run = create_run(store, load_task(make_task(tmp_path / "task", budget=20)), home)
    Orchestrator(store, run.id, home=home).drive()
    finished = {f"{run.id}:{n.thread_id}" for n in store.nodes(run.id) if n.thread_id}
    with sqlite3.connect(home / "revtree.db") as db:
        held = {t for (t,) in db.execute("SELECT DISTINCT thread_id FROM checkpoints")}
    return finished, held


@pytest.mark.slow  # a whole run, 4 s (issue 24)
def test_a_run_prunes_its_finished_checkpoints(tmp_path: Path, home: Path, store: Store) -> None:
    finished, held = _run(tmp_path, home, store)
    assert len(finished) == 20
    assert finished & held == set()
    with sqlite3.connect(home / "revtree.db") as db:
        assert db.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # incremental
        free, pages = (
            db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("freelist_count", "page_count")
        )
    assert free < pages // 4, (free, pages)  # the freed pages went back to the file system


@pytest.mark.slow  # a whole run, 4 s (issue 24)
def test_prune_every_0_keeps_them(
    tmp_path: Path, home: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVTREE_PRUNE_EVERY", "0")
    finished, held = _run(tmp_path, home, store)
    assert finished <= held  # every finished candidate's checkpoints are still there


@pytest.mark.slow  # a whole run, 4 s (issue 24)
def test_a_prune_of_some_tickets_takes_only_those_finished(
    tmp_path: Path, home: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prune a run makes every few candidates takes the candidates whose thread ended
    since its last (a pass over every candidate made each slower as the run grew), and
    of those only the finished; the last prune takes all."""
    from revtree.memory.checkpoints import checkpoint_tables, prune_run

    monkeypatch.setenv("REVTREE_PRUNE_EVERY", "0")
    finished, held = _run(tmp_path, home, store)
    assert finished <= held  # nothing pruned while it ran
    run_id = next(iter(finished)).split(":")[0]
    by_node = {n.id: n.thread_id for n in store.nodes(run_id) if n.thread_id}
    with sqlite3.connect(home / "revtree.db") as db:  # node 3 unfinished again (a retry)
        db.execute("UPDATE nodes SET status = 'coded' WHERE run_id = ? AND id = 3", [run_id])
    taken = [by_node[i] for i in (1, 2, 3)]
    assert prune_run(store, run_id, checkpoint_tables(store), taken) > 0
    with sqlite3.connect(home / "revtree.db") as db:
        left = {t for (t,) in db.execute("SELECT DISTINCT thread_id FROM checkpoints")}
    assert {f"{run_id}:{by_node[i]}" for i in (1, 2)} & left == set()
    assert {f"{run_id}:{by_node[i]}" for i in (3, 4, 5, 6)} <= left
    prune_run(store, run_id, checkpoint_tables(store))
    with sqlite3.connect(home / "revtree.db") as db:
        left = {t for (t,) in db.execute("SELECT DISTINCT thread_id FROM checkpoints")}
    assert left == {f"{run_id}:{by_node[3]}"}  # the unfinished one is kept
