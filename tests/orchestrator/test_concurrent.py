"""Several runs at once into ONE database, end to end, in real processes.

Three ``revtree run`` processes write into the same database (the default SQLite file
in ``REVTREE_HOME``; and, marker ``postgres``, one PostgreSQL database) while a
``revtree watch`` process follows each run. What is checked: every run completes with
its whole budget, nothing is evaluated twice, each run's event seqs are gapless and in
order, each watcher printed every event of its run in that order, and doctor finds
nothing wrong.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from revtree.memory import NodeStatus, RunStatus, Store

from .conftest import make_task, revtree_here, spawn, wait_for

pytestmark = pytest.mark.slow
RUNS = 3
NODES = 8
BOUND = 300.0  # seconds any process of the test may take
EVENT_LINE = re.compile(r"^\d\d:\d\d:\d\d\s+(\d+) ")  # cli.format_event: time, seq, kind


def _finish(procs: list[subprocess.Popen[str]]) -> list[str]:
    """Wait for every process (bounded); their output. Kills any left on failure."""
    try:
        outs = [p.communicate(timeout=BOUND)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=30)
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"{p.args!r} exited {p.returncode}:\n{out}"
    return outs


def _watched_seqs(out: str) -> list[int]:
    return [int(m.group(1)) for line in out.splitlines() if (m := EVENT_LINE.match(line))]


def test_runs_and_watchers_at_once_into_one_database(
    tmp_path: Path, home: Path, db_url: str
) -> None:
    tasks = [make_task(tmp_path / f"t{i}", budget=NODES, parallel=2, sleep=0.1) for i in range(3)]
    args = ("--quiet", "--sandbox", "local")
    runners = [spawn(home, "run", str(t), *args, REVTREE_DB=db_url) for t in tasks]
    store = Store(db_url)
    try:
        wait_for(lambda: len(store.list_runs()) == RUNS, 120, f"{RUNS} runs in the database")
        run_ids = [r.id for r in store.list_runs()]
        follow = ("--timeout", str(BOUND))
        watchers = [spawn(home, "watch", r, *follow, REVTREE_DB=db_url) for r in run_ids]
        _finish(runners)
        watched = _finish(watchers)
        for run_id, out in zip(run_ids, watched, strict=True):
            seqs = _check_run(store, run_id)
            assert _watched_seqs(out) == seqs, out  # every event, in order, once
            assert out.rstrip().splitlines()[-1].startswith("run completed")
        assert "no problems found" in revtree_here(home, "doctor", REVTREE_DB=db_url).stdout
    finally:
        store.close()


def _check_run(store: Store, run_id: str) -> list[int]:
    """The run completed its budget without repeats; its gapless event seqs."""
    run = store.get_run(run_id)
    assert run.status is RunStatus.COMPLETED, run.reason
    nodes = store.nodes(run_id)
    assert len(nodes) == NODES and all(n.status is NodeStatus.SUCCEEDED for n in nodes)
    assert set(store.evaluation_counts(run_id).values()) == {1}
    events = store.events_since(run_id, limit=100_000)
    seqs = [e.seq for e in events]
    assert seqs == list(range(1, len(seqs) + 1))
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    return seqs
