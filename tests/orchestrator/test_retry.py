"""``revtree retry``: re-run one candidate from a step, keeping the earlier attempt.

Real git, real SQL (SQLite, and PostgreSQL under the ``postgres`` marker), real
evaluator subprocesses. The task's evaluator fails for an "infrastructure" reason
(a marker file on the host is absent) on every candidate but the baseline, until the
test creates the marker.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from revtree.memory import NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, RunPaths, create_run
from revtree.orchestrator.commands.doctor import doctor
from revtree.orchestrator.run import alive
from revtree.tasks import load_task

from .conftest import drive_here, make_task, revtree, revtree_here, spawn, wait_for

FLAKY = """\
import os, sys
import sol
if (sol.X, sol.N) != (3.0, 2) and not os.path.exists(os.environ["MARKER"]):
    print("scratch volume not mounted", file=sys.stderr)
    raise SystemExit(3)
"""


@pytest.fixture(autouse=True)
def _keep_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs keep their finished candidates' checkpoints (REVTREE_PRUNE_EVERY=0), as
    before runs pruned their own: what gc and retry do with them is under test here."""
    monkeypatch.setenv("REVTREE_PRUNE_EVERY", "0")


@pytest.fixture
def st(db_url: str) -> Iterator[Store]:
    s = Store(db_url)
    yield s
    s.close()


def _flaky_task(root: Path, budget: int = 3) -> tuple[Path, Path]:
    task = make_task(root, budget=budget)
    marker = root.parent / "marker"
    ev = task / "ev.py"
    ev.write_text(FLAKY + ev.read_text())
    toml = task / "task.toml"
    toml.write_text(
        toml.read_text().replace('SLEEP = "0.0"', f'SLEEP = "0.0", MARKER = "{marker}"')
    )
    return task, marker


def _failed_run(st: Store, home: Path, task: Path) -> str:
    run = create_run(st, load_task(task), home)
    orch = Orchestrator(st, run.id, home=home)
    orch.drive()
    nodes = st.nodes(run.id)
    assert nodes[0].status is NodeStatus.SUCCEEDED
    assert all(n.status is NodeStatus.FAILED and n.error_kind == "crash" for n in nodes[1:])
    return run.id


def _retry(
    home: Path, db_url: str, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return drive_here(home, "retry", *args, "--db", db_url, check=check)


def _refused(home: Path, db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``revtree retry ARGS`` expected to be refused, in this process (revtree_here): a
    refusal is decided before the run is claimed, so a subprocess proves nothing more."""
    return revtree_here(home, "retry", *args, "--db", db_url, check=False)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _assert_healthy(st: Store, home: Path, run_id: str) -> None:
    assert doctor(st, home, run_id) == []
    run = st.get_run(run_id)
    assert run.status is RunStatus.COMPLETED and run.pid is None
    seqs = [e.seq for e in st.events_since(run_id, limit=100_000)]
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.slow  # a whole run and a retry
def test_retry_where_the_thread_kept_one_checkpoint_starts_it_over(
    tmp_path: Path, home: Path, db_url: str, st: Store
) -> None:
    """By default a thread's checkpoint is written as it exits, so there is none from
    before the evaluation to fork at: the retry starts the thread over, and each step
    skips what the node holds (the same proposal and commit, evaluated once more)."""
    task, marker = _flaky_task(tmp_path / "t")
    run_id = _failed_run(st, home, task)
    before = st.node(run_id, 1)
    orch = Orchestrator(st, run_id, home=home)
    try:
        config = {"configurable": {"thread_id": f"{run_id}:{before.thread_id}"}}
        assert [s.next for s in orch.graph.get_state_history(config)] == [()]  # one, at the end
    finally:
        orch.close()
    marker.touch()
    assert "retry of node 1 from evaluate (attempt 2)" in _retry(home, db_url, run_id, "1").stdout
    node = st.node(run_id, 1)
    assert node.status is NodeStatus.SUCCEEDED and node.attempt == 2
    assert node.commit == before.commit and node.proposal == before.proposal
    assert [(e.attempt, e.ok) for e in st.evaluations(run_id, 1)] == [(1, False), (2, True)]
    _assert_healthy(st, home, run_id)


@pytest.mark.slow  # 16 s of --quick under -n 2 (issue 24)
def test_retry_from_evaluate_after_an_infrastructure_failure(
    tmp_path: Path, home: Path, db_url: str, st: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a checkpoint per step (not the default's one per thread): the retry forks the
    # thread at the one before the evaluation, and the test reads the history below
    monkeypatch.setenv("REVTREE_DURABILITY", "async")
    task, marker = _flaky_task(tmp_path / "t")
    run_id = _failed_run(st, home, task)
    before = st.node(run_id, 1)
    marker.touch()  # the infrastructure is fixed

    out = _retry(home, db_url, run_id, "1").stdout  # default step: evaluate
    assert "retry of node 1 from evaluate (attempt 2)" in out

    node = st.node(run_id, 1)
    assert node.status is NodeStatus.SUCCEEDED and node.attempt == 2
    assert node.commit == before.commit and node.proposal == before.proposal
    assert node.error is None and node.score is not None
    evals = st.evaluations(run_id, 1)
    assert [(e.attempt, e.ok) for e in evals] == [(1, False), (2, True)]
    assert "scratch volume not mounted" in (evals[0].error or "")  # the old attempt is kept
    retry_ev = next(e for e in st.events_since(run_id) if e.kind == "retry")
    assert retry_ev.node_id == 1 and retry_ev.data is not None
    assert retry_ev.data["previous"]["status"] == "failed"
    assert retry_ev.data["previous"]["error_kind"] == "crash"
    assert st.node(run_id, 2).status is NodeStatus.FAILED  # untouched
    _assert_healthy(st, home, run_id)
    assert "no problems found" in revtree_here(home, "doctor", run_id, "--db", db_url).stdout

    # the knob study and the policy see the new outcome; the thread was forked (time
    # travel) at the checkpoint that was about to evaluate, replayed from the review
    orch = Orchestrator(st, run_id, home=home)
    try:
        config = {"configurable": {"thread_id": f"{run_id}:{node.thread_id}"}}
        history = list(orch.graph.get_state_history(config))
        fork = next(s for s in history if s.metadata and s.metadata.get("source") == "update")
        # replayed from the end of the review (where approval is on, it comes next)
        assert fork.next == ("evaluate",) and fork.parent_config is not None
        base = orch.graph.get_state(fork.parent_config)
        assert base.next == ("evaluate",) and base.metadata["source"] == "loop"
        values = [t.value for t in orch.agents.proposer.study.trials if t.value is not None]
        assert node.score in values
        assert 1 in {n.id for n in orch.snapshot().succeeded}
    finally:
        orch.close()


@pytest.mark.slow  # 12 s of --quick under -n 2 (issue 24)
def test_retry_from_code_makes_a_new_commit_and_keeps_the_old(
    tmp_path: Path, home: Path, db_url: str, st: Store
) -> None:
    task, marker = _flaky_task(tmp_path / "t")
    run_id = _failed_run(st, home, task)
    old = st.node(run_id, 2)
    marker.touch()

    _retry(home, db_url, run_id, "2", "--from", "code")

    node = st.node(run_id, 2)
    assert node.status is NodeStatus.SUCCEEDED and node.attempt == 2
    assert node.commit and node.commit != old.commit and node.proposal == old.proposal
    repo = RunPaths(home, run_id).repo
    root = st.node(run_id, 0).commit
    assert _git(repo, "rev-parse", f"{node.commit}^") == root
    assert _git(repo, "rev-parse", "refs/revtree/nodes/2") == node.commit
    assert _git(repo, "rev-parse", "refs/revtree/attempts/2/1") == old.commit
    assert "attempt 2" in _git(repo, "log", "-1", "--format=%B", node.commit)
    assert [e.attempt for e in st.evaluations(run_id, 2)] == [1, 2]
    commits = [e for e in st.events_since(run_id) if e.kind == "commit" and e.node_id == 2]
    assert len(commits) == 2
    _assert_healthy(st, home, run_id)


@pytest.mark.slow  # 12 s of --quick under -n 2 (issue 24)
def test_retry_from_propose_proposes_again(
    tmp_path: Path, home: Path, db_url: str, st: Store
) -> None:
    task, marker = _flaky_task(tmp_path / "t")
    run_id = _failed_run(st, home, task)
    old = st.node(run_id, 1)
    marker.touch()

    _retry(home, db_url, run_id, "1", "--from", "propose")

    node = st.node(run_id, 1)
    assert node.status is NodeStatus.SUCCEEDED and node.attempt == 2
    assert node.proposal is not None and node.commit != old.commit
    events = st.events_since(run_id)
    at = next(i for i, e in enumerate(events) if e.kind == "retry")
    after = [e.kind for e in events[at:] if e.node_id == 1]
    assert after[:4] == ["retry", "propose", "commit", "evaluate"]
    assert events[at].data is not None and events[at].data["previous"]["proposal"] == old.proposal
    _assert_healthy(st, home, run_id)


@pytest.mark.slow  # 22 s of --quick under -n 2 (issue 24)
def test_retry_with_set_changes_the_run_config(
    tmp_path: Path, home: Path, db_url: str, st: Store
) -> None:
    task, marker = _flaky_task(tmp_path / "t")
    run_id = _failed_run(st, home, task)
    marker.touch()
    # on SQLite, gc deletes the finished threads' checkpoints: the retry then starts the
    # thread over, each step skipping the work the node holds
    pruned = revtree_here(home, "gc", "--db", db_url).stdout
    assert db_url.startswith("postgresql") or "removed 0 checkpoint" not in pruned

    _retry(home, db_url, run_id, "2", "--set", "sandbox.memory=8g", "--set", "evaluate.timeout=30")

    spec = st.get_run(run_id).spec
    assert spec["sandbox"]["memory"] == 8 * 2**30 and spec["evaluate"]["timeout"] == 30
    assert any("sandbox.memory=8g" in e.message for e in st.events_since(run_id))
    node = st.node(run_id, 2)
    assert node.status is NodeStatus.SUCCEEDED and node.attempt == 2 and len(st.nodes(run_id)) == 3
    assert [e.attempt for e in st.evaluations(run_id, 2)] == [1, 2]
    refused = _refused(home, db_url, run_id, "1", "--set", "search.policy=mcts")
    assert refused.returncode == 2 and "revtree fork" in refused.stderr
    assert st.get_run(run_id).spec["search"]["policy"] == "greedy"
    _assert_healthy(st, home, run_id)


@pytest.mark.slow  # 42 s of --quick under -n 2 (issue 24)
def test_retry_refuses_what_it_cannot_do(
    tmp_path: Path, home: Path, db_url: str, st: Store
) -> None:
    task, _ = _flaky_task(tmp_path / "t")
    run_id = _failed_run(st, home, task)

    def refused(*args: str) -> str:
        proc = _refused(home, db_url, run_id, *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        return proc.stderr

    assert f"run {run_id} has no node 9" in refused("9")
    assert "baseline" in refused("0", "--from", "code")
    assert "one of propose, code, evaluate" in refused("1", "--from", "review")
    st.update_node(run_id, 2, status=NodeStatus.EVALUATING)
    assert f"node 2 of run {run_id} is still evaluating" in refused("2")
    st.update_node(run_id, 2, status=NodeStatus.FAILED)
    # a live process (this one) drives the run: the retry in a process of its own
    st.claim_run(run_id, os.getpid(), socket.gethostname(), alive)
    driven = revtree(home, "retry", run_id, "1", "--db", db_url, check=False)
    assert driven.returncode == 2 and "being driven by pid" in driven.stderr
    assert st.node(run_id, 1).attempt == 1  # nothing was changed
    assert all(e.kind != "retry" for e in st.events_since(run_id))


@pytest.mark.slow  # 41 s of --quick under -n 2 (issue 24)
def test_a_retry_of_the_baseline_and_a_node_with_children(
    tmp_path: Path, home: Path, db_url: str, st: Store
) -> None:
    task = make_task(tmp_path / "t", budget=4)
    run = create_run(st, load_task(task), home)
    Orchestrator(st, run.id, home=home).drive()
    parents = {n.parent_id for n in st.nodes(run.id)}
    assert 0 in parents
    proc = _refused(home, db_url, run.id, "0", "--from", "code")
    assert proc.returncode == 2 and "baseline" in proc.stderr
    _retry(home, db_url, run.id, "0")  # the baseline, with children, from evaluate
    root = st.node(run.id, 0)
    assert root.status is NodeStatus.SUCCEEDED and root.attempt == 2
    attempts = [e.attempt for e in st.evaluations(run.id, 0) if e.repeat == 0]
    assert attempts == [1, 2]  # (later repeats: the baseline's verification)
    for parent in sorted(p for p in parents if p)[:1]:
        proc = _refused(home, db_url, run.id, str(parent), "--from", "propose")
        assert proc.returncode == 2 and "has children" in proc.stderr
    _assert_healthy(st, home, run.id)


@pytest.mark.slow  # 52 s of --quick under -n 2 (issue 24)
def test_a_killed_retry_is_finished_by_resume(
    tmp_path: Path, home: Path, db_url: str, st: Store
) -> None:
    task, marker = _flaky_task(tmp_path / "t")
    run_id = _failed_run(st, home, task)
    marker.touch()
    proc = spawn(home, "retry", run_id, "1", "--set", 'sandbox.env.SLEEP="2"', "--db", db_url)
    try:
        wait_for(
            lambda: st.node(run_id, 1).status is NodeStatus.EVALUATING,
            what="the retry's evaluation",
        )
        assert st.node(run_id, 1).attempt == 2
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    refused = _refused(home, db_url, run_id, "1")
    assert refused.returncode == 2 and "still evaluating" in refused.stderr
    drive_here(home, "resume", run_id, "--db", db_url)
    node = st.node(run_id, 1)
    assert node.status is NodeStatus.SUCCEEDED and node.attempt == 2
    counts = st.evaluation_counts(run_id)
    assert counts.pop((1, "full", 0)) == 2  # node 1: two attempts
    assert set(counts.values()) == {1}
    first = [(e.attempt, e.ok) for e in st.evaluations(run_id, 1) if e.repeat == 0]
    assert first == [(1, False), (2, True)]
    assert st.node(run_id, 2).status is NodeStatus.FAILED  # the budget was spent
    _assert_healthy(st, home, run_id)


@pytest.mark.slow  # a run parked for approval, approved, then a retry
def test_a_retry_from_evaluate_of_a_run_with_approval_waits_for_approval_again(
    tmp_path: Path, home: Path, db_url: str, st: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread forked before ``evaluate`` goes where the review's edge sends a
    candidate with no verdict: to ``approve``, where the run asks for approval. The new
    attempt's code is not run before a person approves it again."""
    import threading

    monkeypatch.setenv("REVTREE_DURABILITY", "async")  # a checkpoint about to evaluate
    spec = load_task(make_task(tmp_path / "t", budget=2)).with_overrides(
        search={"approve": "evaluate"}
    )
    run = create_run(st, spec, home)
    orch = Orchestrator(st, run.id, home=home)
    driving = threading.Thread(target=orch.drive, daemon=True)
    driving.start()
    try:
        wait_for(
            lambda: any(e.kind == "approval" for e in st.events_since(run.id, 0, 10_000)),
            what="node 1 to wait for approval",
        )
        st.decide(run.id, 1, 1, True)
        driving.join(120)
        assert not driving.is_alive()
    finally:
        orch.close()
    assert st.node(run.id, 1).status is NodeStatus.SUCCEEDED and st.evaluations(run.id, 1)

    out = _retry(home, db_url, run.id, "1", "--from", "evaluate").stdout
    assert "retry of node 1 (attempt 2): waits for approval" in out, out
    node = st.node(run.id, 1)
    assert node.attempt == 2 and not node.status.is_finished()
    assert {e.attempt for e in st.evaluations(run.id, 1)} == {1}  # not evaluated again
