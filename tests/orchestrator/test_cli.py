"""The CLI in real subprocesses: run, signals, kill -9 and resume, watch; what show, export
and diff print after a run is read in-process (revtree_here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from revtree.memory import NodeStatus, RunStatus, Store

from .conftest import make_task, revtree, revtree_here, spawn, wait_for

pytestmark = pytest.mark.slow


def _finished(store: Store, run_id: str) -> int:
    return sum(n.status.is_finished() for n in store.nodes(run_id))


def _only_run(store: Store) -> str:
    runs = wait_for(store.list_runs, what="the run to be created")
    return runs[0].id  # type: ignore[index]


def _check_complete(store: Store, run_id: str, budget: int) -> None:
    run = store.get_run(run_id)
    assert run.status is RunStatus.COMPLETED, run
    nodes = store.nodes(run_id)
    assert len(nodes) == budget
    assert all(n.status.is_finished() for n in nodes)
    counts = store.evaluation_counts(run_id)
    assert set(counts.values()) == {1}, "an evaluation was stored twice"
    for n in nodes:
        if n.status is NodeStatus.SUCCEEDED:
            assert (n.id, "full", 0) in counts, f"node {n.id} lost its evaluation"


def test_run_show_export(tmp_path: Path, home: Path, store: Store) -> None:
    task = make_task(tmp_path / "t", budget=6, parallel=2)
    out = revtree(home, "run", str(task)).stdout
    assert "new best" in out and "baseline" in out and "revtree export" in out
    shown = json.loads(revtree_here(home, "show", "last", "--json", "--nodes").stdout)
    assert shown["status"] == "completed" and shown["n_nodes"] == 6
    assert shown["best_score"] < shown["baseline_score"]
    assert {"id", "parent", "status", "operator", "score", "commit", "n_evaluations"} <= set(
        shown["nodes"][0]
    )
    patch = tmp_path / "best.patch"
    revtree_here(home, "export", shown["run_id"], "--patch", str(patch))
    work = tmp_path / "apply"
    subprocess.run(["cp", "-r", str(task), str(work)], check=True)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "apply", str(patch.resolve())], check=True)
    best = shown["nodes"][shown["best_node"]]
    # the evaluator reports on descriptor 3, as in a sandbox
    subprocess.run(["sh", "-c", f"{sys.executable} ev.py 3>metrics.json"], cwd=work, check=True)
    assert json.loads((work / "metrics.json").read_text())["f"] == pytest.approx(best["score"])
    diff = revtree_here(home, "diff", shown["run_id"], str(shown["best_node"]), "--against", "root")
    assert diff.stdout.startswith("diff --git a/sol.py b/sol.py")


def test_malformed_task_gives_a_clear_error(tmp_path: Path, home: Path) -> None:
    task = make_task(tmp_path / "t")
    (task / "task.toml").write_text((task / "task.toml").read_text().replace("metric", "metrc"))
    proc = revtree(home, "run", str(task), check=False)
    assert proc.returncode == 2
    assert "task.toml" in proc.stderr and "evaluate.metrc" in proc.stderr


@pytest.mark.parametrize("how", ["sigint", "sigkill"])
def test_interrupted_run_resumes_without_loss_or_duplicates(
    tmp_path: Path, home: Path, store: Store, how: str
) -> None:
    budget = 14
    task = make_task(tmp_path / "t", budget=budget, parallel=2, sleep=0.4)
    proc = spawn(home, "run", str(task))
    run_id = _only_run(store)
    wait_for(lambda: _finished(store, run_id) >= 4, what="4 finished nodes")
    wait_for(
        lambda: any(n.status is NodeStatus.EVALUATING for n in store.nodes(run_id)),
        what="an evaluation in flight",
    )
    recorded = {(e.node_id, e.stage, e.repeat): e.score for e in store.evaluations(run_id)}
    proc.send_signal(signal.SIGINT if how == "sigint" else signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    run = store.get_run(run_id)
    if how == "sigint":
        assert proc.returncode == 130, out
        assert run.status is RunStatus.STOPPED
        assert "revtree resume" in out
    else:
        assert proc.returncode == -signal.SIGKILL
        assert run.status is RunStatus.RUNNING  # it never got to say otherwise
    assert _finished(store, run_id) < budget
    revtree(home, "resume", run_id)
    _check_complete(store, run_id, budget)
    after = {(e.node_id, e.stage, e.repeat): e.score for e in store.evaluations(run_id)}
    assert all(after[k] == v for k, v in recorded.items()), "a recorded result changed"
    assert not list((home / "runs" / run_id / "work").glob("revtree-*"))


def test_resume_refuses_a_run_driven_by_a_live_process(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "t", budget=40, sleep=0.3)
    proc = spawn(home, "run", str(task))
    try:
        run_id = _only_run(store)
        wait_for(lambda: _finished(store, run_id) >= 1, what="a finished node")
        second = revtree_here(home, "resume", run_id, check=False)  # this process: a second one
        assert second.returncode == 2 and "being driven by pid" in second.stderr
        revtree_here(home, "stop", run_id)
        proc.wait(timeout=60)
        assert store.get_run(run_id).status is RunStatus.STOPPED
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_watch_sees_events_while_they_are_written(tmp_path: Path, home: Path, store: Store) -> None:
    task = make_task(tmp_path / "t", budget=60, sleep=0.3)
    runner = spawn(home, "run", str(task), "--quiet")
    run_id = _only_run(store)
    watcher = subprocess.Popen(
        [sys.executable, "-m", "revtree", "watch", run_id, "--timeout", "120"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "REVTREE_HOME": str(home), "COLUMNS": "200"},
    )
    assert watcher.stdout is not None
    first = watcher.stdout.readline()
    assert " run " in first
    seen_at = _finished(store, run_id)
    # the run goes on while the watcher follows it; then it is stopped from outside
    wait_for(lambda: _finished(store, run_id) >= seen_at + 3, what="3 more nodes")
    revtree(home, "stop", run_id)
    # read the rest through the same buffered reader as the first line: communicate()
    # would skip what readline() already buffered (the watcher prints in batches)
    rest = watcher.stdout.read()
    watcher.wait(timeout=120)
    runner.communicate(timeout=120)
    assert watcher.returncode == 0
    assert "run stopped" in rest
    lines = [ln for ln in (first + rest).splitlines() if ln[:2].isdigit()]
    seqs = [int(ln.split()[1]) for ln in lines]
    assert seqs == [e.seq for e in store.events_since(run_id)]
    later = [ln for ln in lines if " node " in ln and "scored" in ln]
    assert len(later) >= seen_at + 3


def test_detach_then_watch(tmp_path: Path, home: Path, store: Store) -> None:
    task = make_task(tmp_path / "t", budget=4)
    out = revtree(home, "run", str(task), "--detach").stdout
    assert "detached" in out
    run_id = _only_run(store)
    watched = revtree(home, "watch", run_id, "--timeout", "120").stdout
    assert "run completed" in watched
    assert store.get_run(run_id).status is RunStatus.COMPLETED
