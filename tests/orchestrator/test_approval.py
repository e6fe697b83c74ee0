"""Human approval, end to end through the CLI: a run started with ``--approve`` holds
each candidate before its evaluation; ``revtree approve`` / ``reject`` from a second
process decide; a stop and resume while a candidate waits loses nothing."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from revtree.memory import NodeStatus, Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task
from tests.orchestrator.conftest import make_task, revtree, revtree_here, spawn, wait_for


def waiting(store: Store, run_id: str) -> list[int]:
    """Nodes announced as waiting for approval and not decided yet."""
    events = store.events_since(run_id, 0, 10_000)
    asked = [e.node_id for e in events if e.kind == "approval" and e.node_id is not None]
    decided = {e.node_id for e in events if e.kind == "decision"}
    return [n for n in asked if n not in decided]


def only_run(store: Store) -> str:
    runs = store.list_runs()
    assert len(runs) == 1
    return runs[0].id


def start_waiting(home: Path, store: Store, task: Path) -> tuple[subprocess.Popen[str], str]:
    """``revtree run TASK --approve`` in a subprocess, once node 1 waits for approval."""
    proc = spawn(home, "run", str(task), "--approve")
    run_id = wait_for(lambda: store.list_runs() and only_run(store), what="the run")
    assert isinstance(run_id, str)
    wait_for(lambda: waiting(store, run_id) == [1], what="node 1 to wait")
    return proc, run_id


@pytest.mark.slow  # 24 s of --quick under -n 2 (issue 24)
def test_approve_and_reject_from_a_second_process(tmp_path: Path, home: Path, store: Store) -> None:
    proc, run_id = start_waiting(home, store, make_task(tmp_path / "t", budget=3))
    try:
        node = store.node(run_id, 1)
        assert node.status is NodeStatus.CODED  # held before its evaluation
        assert not store.evaluations(run_id, 1)
        shown = [e.message for e in store.events_since(run_id) if e.kind == "approval"]
        assert "waits for approval" in shown[0] and "sol.py" in shown[0]  # hypothesis + diff
        assert f"revtree approve {run_id} 1" in shown[0]
        # held is not in flight: show says it apart (issue 26)
        held = json.loads(revtree_here(home, "show", run_id, "--json").stdout)
        assert (held["waiting"], held["n_waiting"], held["n_in_flight"]) == ([1], 1, 0), held
        assert re.search(r"n_waiting +│ 1 ", revtree_here(home, "show", run_id).stdout)

        out = revtree(home, "approve", run_id, "1")
        assert "approved" in out.stdout
        wait_for(lambda: store.node(run_id, 1).status.is_finished(), what="node 1 to finish")
        assert store.node(run_id, 1).status is NodeStatus.SUCCEEDED

        wait_for(lambda: waiting(store, run_id) == [2], what="node 2 to wait")
        revtree(home, "reject", run_id, "2", "--why", "touches the wrong constant")
        assert proc.wait(timeout=120) == 0, proc.stdout.read() if proc.stdout else ""
        said = proc.stdout.read() if proc.stdout else ""
    finally:
        proc.kill()
    # a rejection is not a failure: the summary counts it apart (issue 26)
    assert "(2 ok, 0 failed, 1 rejected, 0 unfinished)" in said, said
    shown = json.loads(revtree_here(home, "show", run_id, "--json").stdout)
    assert (shown["n_failed"], shown["n_rejected"]) == (0, 1)
    node2 = store.node(run_id, 2)
    assert node2.status is NodeStatus.REJECTED and node2.error_kind == "rejected"
    assert "rejected by the user: touches the wrong constant" in (node2.error or "")
    assert not store.evaluations(run_id, 2)  # a rejected candidate is never evaluated
    assert store.get_run(run_id).status.value == "completed"


@pytest.mark.slow  # 24 s of --quick under -n 2 (issue 24)
def test_a_stop_and_resume_while_waiting_loses_nothing(
    tmp_path: Path, home: Path, store: Store
) -> None:
    proc, run_id = start_waiting(home, store, make_task(tmp_path / "t", budget=2))
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert store.get_run(run_id).status.value == "stopped"
    held = store.node(run_id, 1)
    assert held.status is NodeStatus.CODED and held.commit is not None

    # decided while no process drives the run: stored, applied on resume
    revtree(home, "approve", run_id, "1")
    out = revtree(home, "resume", run_id)
    node = store.node(run_id, 1)
    assert node.status is NodeStatus.SUCCEEDED and node.commit == held.commit, out.stdout
    asked = [e for e in store.events_since(run_id) if e.kind == "approval" and e.node_id == 1]
    assert len(asked) == 1  # not asked again: the decision was in SQL
    assert len(store.nodes(run_id)) == 2  # the same candidate, not a new one
    assert store.get_run(run_id).status.value == "completed"


@pytest.mark.slow  # 60 s of --quick under -n 2 (issue 24)
def test_decisions_that_make_no_sense_are_refused(tmp_path: Path, home: Path, store: Store) -> None:
    task = make_task(tmp_path / "t", budget=2)
    # a finished run without --approve (in this process: the run is not under test),
    # then the refusals in-process: each is decided before anything is written
    run_id = create_run(store, load_task(task), home).id
    Orchestrator(store, run_id, home=home).drive()
    off = revtree_here(home, "approve", run_id, "1", check=False)
    assert off.returncode == 2 and "does not hold candidates for approval" in off.stderr
    held = tmp_path / "h"
    proc = spawn(home, "run", str(make_task(held, budget=2)), "--approve")
    try:
        run2 = wait_for(
            lambda: [r.id for r in store.list_runs() if r.id != run_id], what="the second run"
        )
        assert isinstance(run2, list)
        wait_for(lambda: waiting(store, run2[0]) == [1], what="node 1 to wait")
        for args, says in [
            (("approve", run2[0], "0"), "is not waiting for approval"),
            (("approve", run2[0], "9"), "has no node 9"),
            (("reject", run2[0], "7"), "has no node 7"),
        ]:
            bad = revtree_here(home, *args, check=False)
            assert bad.returncode == 2 and says in bad.stderr, bad.stderr
        revtree_here(home, "reject", run2[0], "1")  # no --why: still a clear reason
        assert proc.wait(timeout=120) == 0
        twice = revtree_here(home, "approve", run2[0], "1", check=False)
        assert twice.returncode == 2 and "was already rejected" in twice.stderr, twice.stderr
        assert "that decision stands" in twice.stderr
    finally:
        proc.kill()
    assert "rejected by the user: no reason given" in (store.node(run2[0], 1).error or "")


@pytest.mark.slow  # 13 s of --quick under -n 2 (issue 24)
def test_a_budget_spent_while_candidates_wait_ends_the_run(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "t", budget=5)
    out = revtree(home, "run", str(task), "--approve", "--budget-time", "4", timeout=120)
    run = store.get_run(only_run(store))
    assert run.status.value == "completed" and "max_wall" in (run.reason or ""), out.stdout
    held = [n for n in store.nodes(run.id) if n.id > 0]
    assert held and all(n.status is NodeStatus.CODED for n in held)  # kept for a resume
    warned = [e for e in store.events_since(run.id) if e.kind == "warning" and e.data]
    assert any("wait for approval" in e.message for e in warned)
