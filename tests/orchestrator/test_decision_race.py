"""One decision per waiting node (issue 23, item 4): ``revtree approve`` and ``revtree
reject`` run at once on one waiting node both exited 0 and the latest event won, so a
rejection reported as done was overridden and the rejected code evaluated. Now the
decision is taken atomically in SQL: exactly one of the pair exits 0, the other exits
non-zero naming the decision that won, and what the run does follows the winner.

To make the two meet, the test holds the database's write lock (SQLite: a BEGIN
IMMEDIATE; PostgreSQL: the run's row FOR UPDATE) while both start and look for an
earlier decision, and lets go once both wait to write (PostgreSQL: both seen waiting on
a lock in pg_stat_activity; SQLite: a second after both have the database open). Before
the fix both then wrote their decision and exited 0 on every pair."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from revtree.memory import NodeStatus, Store
from tests.orchestrator.conftest import cli_env, make_task, spawn, wait_for

PAIRS = 4


@contextlib.contextmanager
def write_lock_held(db: str, run_id: str) -> Iterator[object]:
    """Hold the lock a decision takes until the block ends; yields a probe that says
    whether two other sessions wait on a lock (PostgreSQL) or None (SQLite)."""
    if db.startswith("sqlite"):
        conn = sqlite3.connect(db.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield None
        finally:
            conn.execute("COMMIT")
            conn.close()
        return
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(db).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(url) as holder, psycopg.connect(url, autocommit=True) as probe:
        holder.execute("SELECT 1 FROM runs WHERE id = %s FOR UPDATE", (run_id,))

        def two_waiting() -> bool:
            row = probe.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            return bool(row and row[0] >= 2)

        yield two_waiting
        holder.commit()


def waiting(store: Store, run_id: str) -> list[int]:
    events = store.events_since(run_id, 0, 10_000)
    asked = [e.node_id for e in events if e.kind == "approval" and e.node_id is not None]
    decided = {e.node_id for e in events if e.kind == "decision"}
    return [n for n in asked if n not in decided]


def has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (its /proc fd links)."""
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if Path(fd.readlink()) == path:
                    return True
    return False


def decider(home: Path, db: str, verb: str, run_id: str, node: int) -> subprocess.Popen[str]:
    args = [verb, run_id, str(node), "--db", db] + (["--why", "racing"] if verb == "reject" else [])
    return subprocess.Popen(
        [sys.executable, "-m", "revtree", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(home, REVTREE_SANDBOX="local"),
    )


@pytest.mark.slow(seconds=15)
def test_approve_and_reject_at_once_take_one_decision(
    tmp_path: Path, home: Path, db_url: str
) -> None:
    store = Store(db_url)
    task = make_task(tmp_path / "t", budget=PAIRS + 1)
    run = spawn(home, "run", str(task), "--approve", "--db", db_url, REVTREE_SANDBOX="local")
    outcomes = []
    try:
        run_id = wait_for(lambda: [r.id for r in store.list_runs()], what="the run")[0]
        for node in range(1, PAIRS + 1):
            wait_for(lambda n=node: waiting(store, run_id) == [n], what=f"node {node} to wait")
            # reject first on odd nodes, approve first on even ones
            verbs = ("reject", "approve") if node % 2 else ("approve", "reject")
            with write_lock_held(db_url, run_id) as two_waiting:
                procs = {v: decider(home, db_url, v, run_id, node) for v in verbs}
                if callable(two_waiting):
                    wait_for(two_waiting, what="both deciders to wait on the lock")
                else:  # SQLite shows no waiters: both have the database open, then a moment
                    db = Path(db_url.removeprefix("sqlite:///")).resolve()
                    wait_for(
                        lambda db=db, procs=procs: all(
                            has_open(p.pid, db) or p.poll() is not None for p in procs.values()
                        ),
                        what="both deciders to open the database",
                    )
                    time.sleep(1)
            out = {v: p.communicate(timeout=120)[0] for v, p in procs.items()}
            codes = {v: p.returncode for v, p in procs.items()}
            winners = [v for v, c in codes.items() if c == 0]
            assert len(winners) == 1, (node, codes, out)
            (won,) = winners
            (lost,) = [v for v in verbs if v != won]
            said = "approved" if won == "approve" else "rejected"
            assert f"was already {said}" in out[lost], out[lost]  # the loser names the winner
            decisions = [
                e
                for e in store.events_since(run_id, 0, 10_000)
                if e.kind == "decision" and e.node_id == node
            ]
            assert len(decisions) == 1, decisions  # the loser wrote nothing
            wait_for(lambda n=node: store.node(run_id, n).status.is_finished(), what="a finish")
            got = store.node(run_id, node)
            if won == "approve":  # evaluated
                assert got.status is not NodeStatus.REJECTED and store.evaluations(run_id, node)
            else:  # never evaluated
                assert got.status is NodeStatus.REJECTED and not store.evaluations(run_id, node)
            outcomes.append(won)
        assert run.wait(timeout=120) == 0
    finally:
        run.kill()
        run.wait(timeout=30)
        store.close()
    assert len(outcomes) == PAIRS
