"""End-to-end runs with real git, real SQLite and real subprocesses."""

from __future__ import annotations

import dataclasses
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from revtree.agents import Proposal
from revtree.agents.base import Job, Refusal
from revtree.errors import Cancelled
from revtree.memory import NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, RunPaths, create_run
from revtree.orchestrator.commands.report import summarize
from revtree.tasks import load_task

from .conftest import make_task


def _run(store: Store, home: Path, task: Path, **kw: object) -> Orchestrator:
    run = create_run(store, load_task(task), home)
    orch = Orchestrator(store, run.id, home=home, **kw)  # type: ignore[arg-type]
    orch.drive()
    return orch


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_run_completes_and_every_node_is_a_commit_on_its_parent(
    tmp_path: Path, home: Path, store: Store
) -> None:
    orch = _run(store, home, make_task(tmp_path / "t", budget=10, parallel=2))
    run = store.get_run(orch.run_id)
    assert run.status is RunStatus.COMPLETED
    assert "max_nodes=10" in (run.reason or "")
    nodes = {n.id: n for n in store.nodes(run.id)}
    assert len(nodes) == 10
    assert all(n.status is NodeStatus.SUCCEEDED for n in nodes.values())
    repo = RunPaths(home, run.id).repo
    refs = _git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/revtree/nodes/")
    assert len(refs.splitlines()) == 10
    for n in nodes.values():
        assert f"refs/revtree/nodes/{n.id} {n.commit}" in refs
        if n.parent_id is not None:
            assert _git(repo, "rev-parse", f"{n.commit}^") == nodes[n.parent_id].commit
    summary = summarize(store, run)
    assert summary["best_score"] < summary["baseline_score"]
    assert summary["holdout"] == []  # the task has no holdout


def test_events_are_a_gapless_log_shown_only_after_commit(
    tmp_path: Path, home: Path, store: Store
) -> None:
    seen: list[int] = []

    def listener(ev: object) -> None:
        seq = ev.seq  # type: ignore[attr-defined]
        # invariant 4: what is shown is already in the database
        assert [e.seq for e in store.events_since(ev.run_id, seq - 1, 1)] == [seq]  # type: ignore[attr-defined]
        seen.append(seq)

    orch = _run(store, home, make_task(tmp_path / "t", budget=6, parallel=2), on_event=listener)
    events = store.events_since(orch.run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert seen == [e.seq for e in events if e.seq >= seen[0]]
    kinds = {e.kind for e in events}
    assert {"run", "select", "propose", "commit", "evaluate", "eval", "node", "best"} <= kinds


@pytest.mark.slow  # 5 s of --quick under -n 2 (issue 24)
def test_failures_are_recorded_and_the_run_goes_on(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(
        tmp_path / "t",
        budget=24,
        parallel=2,
        timeout=1.5,
        modes=("ok", "crash", "hang", "garbage", "nan", "children"),
    )
    orch = _run(store, home, task)
    run = store.get_run(orch.run_id)
    assert run.status is RunStatus.COMPLETED
    nodes = store.nodes(run.id)
    assert len(nodes) == 24
    by_mode: dict[str, list] = {}
    for n in nodes:
        by_mode.setdefault((n.proposal or {}).get("knobs", {}).get("MODE"), []).append(n)
    kinds = {n.error_kind for n in nodes if n.status is NodeStatus.FAILED}
    assert {"crash", "timeout", "metrics"} <= kinds, kinds
    for n in by_mode.get("crash", []):
        assert n.status is NodeStatus.FAILED and "exit code 3" in (n.error or "")
        assert "about to fail" in (n.error or "")
    for n in by_mode.get("hang", []):
        assert n.status is NodeStatus.FAILED and n.error_kind == "timeout"
    for n in by_mode.get("nan", []):
        assert n.status is NodeStatus.FAILED and "not finite" in (n.error or "")
    for n in by_mode.get("garbage", []):
        assert n.status is NodeStatus.FAILED and "not JSON" in (n.error or "")
    assert any(n.status is NodeStatus.SUCCEEDED for n in nodes)
    # every evaluation's whole output is in its row's tails, or in a log file
    evals = store.evaluations(run.id)
    assert evals and all(e.log_path is None or Path(e.log_path).is_file() for e in evals)


def test_children_left_behind_are_killed(tmp_path: Path, home: Path, store: Store) -> None:
    task = make_task(tmp_path / "t", budget=2, modes=("children",))
    before = _sleepers()
    orch = _run(store, home, task)
    assert all(n.status is NodeStatus.SUCCEEDED for n in store.nodes(orch.run_id))
    assert _sleepers() <= before


def _sleepers() -> set[int]:
    out = subprocess.run(["pgrep", "-f", "^sleep 307$"], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


class TouchesEvaluator:
    """A hostile coder: besides the knob, it rewrites the protected evaluator."""

    repairs = 0

    def code(
        self, job: Job, proposal: Proposal, refusal: Refusal | None = None
    ) -> dict[str, bytes | None]:
        return {"sol.py": b"X = 1.2\nN = 7\n", "ev.py": b"print('{\"f\": -1000}')\n"}


def test_a_diff_touching_the_evaluator_is_rejected_before_evaluation(
    tmp_path: Path, home: Path, store: Store
) -> None:
    run = create_run(store, load_task(make_task(tmp_path / "t", budget=3)), home)
    orch = Orchestrator(store, run.id, home=home)
    orch.agents.coder = TouchesEvaluator()  # type: ignore[assignment]
    orch.drive()
    nodes = store.nodes(run.id)
    rejected = [n for n in nodes if n.id > 0]
    assert rejected and all(n.status is NodeStatus.REJECTED for n in rejected)
    assert all("ev.py" in (n.error or "") for n in rejected)
    assert {e.node_id for e in store.evaluations(run.id)} == {0}  # never evaluated


@pytest.mark.slow  # 7 s of --quick under -n 2 (issue 24)
def test_secrets_in_the_parent_environment_do_not_reach_the_sandbox(
    tmp_path: Path, home: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    monkeypatch.setenv("REVTREE_DB", f"sqlite:///{home / 'revtree.db'}")
    orch = _run(store, home, make_task(tmp_path / "t", budget=2))
    evals = store.evaluations(orch.run_id)
    assert evals and all(e.ok for e in evals)
    assert all(e.metrics["leak"] == [] for e in evals)


@pytest.mark.slow  # two whole runs: 3 s or more on 2 loaded cores
def test_same_seed_same_tree(tmp_path: Path, home: Path, store: Store) -> None:
    def tree(task: Path) -> list[tuple]:
        orch = _run(store, home, task)
        return [
            (n.id, n.parent_id, n.operator, (n.proposal or {}).get("knobs"), n.score)
            for n in store.nodes(orch.run_id)
        ]

    first = tree(make_task(tmp_path / "a", budget=8))
    assert first == tree(make_task(tmp_path / "b", budget=8))


class StopsAt:
    """The run's proposer, setting ``stop`` as it proposes node ``at``: a user's stop
    while one candidate is evaluated and the next is being prepared beside it. With
    ``slow``, the model call takes 1.5 s (the candidate before is evaluated meanwhile)
    and is cut off by the stop, as a real one would be: nothing of it is stored."""

    def __init__(self, inner: Any, at: int, stop: threading.Event, slow: bool = False) -> None:
        self.inner, self.at, self.stop, self.slow = inner, at, stop, slow

    def propose(self, job: Job) -> Proposal:
        if job.node.id == self.at:
            if self.slow:
                time.sleep(1.5)
            self.stop.set()
            if self.slow:
                time.sleep(1.5)  # the scheduler sees the stop before the call ends
                raise Cancelled("the run is stopping")
        return self.inner.propose(job)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.slow  # three runs: 3 s or more on 2 loaded cores
@pytest.mark.parametrize(("at", "budget", "slow"), [(2, 9, False), (5, 9, False), (11, 14, True)])
def test_resume_after_a_stop_chooses_as_the_uninterrupted_run(
    tmp_path: Path, home: Path, store: Store, at: int, budget: int, slow: bool
) -> None:
    # (at 14 nodes the proposer's Optuna study has left its random start-up: proposals
    # depend on the scores it was told, so one told too early shows)
    straight = _run(store, home, make_task(tmp_path / "a", budget=budget))
    expected = [
        (n.id, n.parent_id, n.operator, (n.proposal or {}).get("knobs"))
        for n in store.nodes(straight.run_id)
    ]

    run = create_run(store, load_task(make_task(tmp_path / "b", budget=budget)), home)
    orch, stop = Orchestrator(store, run.id, home=home), threading.Event()
    orch.agents.proposer = StopsAt(orch.agents.proposer, at, stop, slow)  # type: ignore[assignment]
    orch.drive(stop)  # stopped mid-run: the candidates in flight stay unfinished
    first = store.nodes(run.id)
    assert len(first) < budget and not all(n.status.is_finished() for n in first)
    store.update_run(run.id, status=RunStatus.STOPPED)
    Orchestrator(store, run.id, home=home).drive()
    got = [
        (n.id, n.parent_id, n.operator, (n.proposal or {}).get("knobs"))
        for n in store.nodes(run.id)
    ]
    assert got == expected


@pytest.mark.slow  # two runs, one with 0.3 s evaluations
def test_at_parallel_1_the_tree_does_not_depend_on_how_long_evaluations_take(
    tmp_path: Path, home: Path, store: Store
) -> None:
    # the next candidate is prepared while one is evaluated (tickets.Chain); its choice
    # and proposal are made with that one unscored however fast it is scored, so a
    # seeded run makes the same tree with instant and with slow evaluations
    def tree(sleep: float) -> list[tuple]:
        orch = _run(store, home, make_task(tmp_path / f"s{sleep}", budget=8, sleep=sleep))
        events = [e.message for e in store.events_since(orch.run_id)]
        assert any("+1 prepared beside each evaluation" in m for m in events), events[:3]
        return [
            (n.id, n.parent_id, n.operator, (n.proposal or {}).get("knobs"), n.score)
            for n in store.nodes(orch.run_id)
        ]

    fast = tree(0.0)
    assert fast == tree(0.3)
    assert len(fast) == 8 and len({n[1] for n in fast[1:]}) > 1  # parents other than the root


@pytest.mark.slow  # two runs: 3 s or more on 2 loaded cores
def test_a_finished_run_given_more_budget_goes_on_from_every_score(
    tmp_path: Path, home: Path, store: Store
) -> None:
    # a run that ended records its last candidate at once (no next one was coming); a
    # resume with a larger budget chooses with that score known
    run = create_run(store, load_task(make_task(tmp_path / "b", budget=9)), home)
    orch = Orchestrator(store, run.id, home=home)
    orch.parts.budget.limits = orch.spec.with_overrides(budget={"max_nodes": 4}).budget
    assert orch.drive().status is RunStatus.COMPLETED
    assert all(n.status.is_finished() for n in store.nodes(run.id))
    store.update_run(run.id, status=RunStatus.STOPPED)
    Orchestrator(store, run.id, home=home).drive()
    nodes = store.nodes(run.id)
    assert len(nodes) == 9 and all(n.status.is_finished() for n in nodes)


@pytest.mark.slow  # two whole runs: 3 s or more on 2 loaded cores
def test_policies_optuna_and_random_run(tmp_path: Path, home: Path, store: Store) -> None:
    for policy in ("optuna", "random"):
        orch = _run(store, home, make_task(tmp_path / policy, budget=6, policy=policy))
        nodes = store.nodes(orch.run_id)
        assert len(nodes) == 6 and store.get_run(orch.run_id).policy == policy
        if policy == "optuna":
            assert all(n.parent_id == 0 for n in nodes[1:])


@pytest.mark.slow  # 6 s of --quick under -n 2 (issue 24)
def test_wall_and_sandbox_budgets_stop_the_run(tmp_path: Path, home: Path, store: Store) -> None:
    task = make_task(tmp_path / "t", budget=1000, sleep=0.2, extra="")
    spec = load_task(task).with_overrides(budget={"max_sandbox_seconds": 1.0})
    run = create_run(store, spec, home)
    Orchestrator(store, run.id, home=home).drive()
    info = store.get_run(run.id)
    assert info.status is RunStatus.COMPLETED and "max_sandbox_seconds" in (info.reason or "")
    assert 2 <= len(store.nodes(run.id)) < 20
    assert store.sandbox_seconds(run.id) >= 1.0
    spec = load_task(task).with_overrides(budget={"max_wall": 1.5})
    run = create_run(store, spec, home)
    Orchestrator(store, run.id, home=home).drive()
    info = store.get_run(run.id)
    assert "max_wall" in (info.reason or "") and len(store.nodes(run.id)) < 20


def test_holdout_runs_on_the_best_node(tmp_path: Path, home: Path, store: Store) -> None:
    task = make_task(tmp_path / "t", budget=4)
    (task / "hold.py").write_text(
        "import json, os, sol\nos.write(3, json.dumps({'f': sol.X}).encode())\n"
    )
    with (task / "task.toml").open("a") as f:
        f.write('\n[holdout]\ncommand = "python hold.py"\nfiles = ["hold.py"]\n')
    orch = _run(store, home, task)
    run = store.get_run(orch.run_id)
    s = summarize(store, run)
    # the best node's final holdout, and the baseline's to compare it with
    assert sorted(h["node"] for h in s["holdout"]) == sorted({0, s["best_node"]})
    assert all(h["ok"] for h in s["holdout"])
    # the holdout file never entered the candidates' code
    root = store.node(run.id, 0)
    assert "hold.py" not in orch.git.list_files(root.commit or "")


def test_unfinished_nodes_resume_without_repeating_recorded_evaluations(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "t", budget=3)
    spec = load_task(task).with_overrides(evaluate={"repeats": 3})
    run = create_run(store, spec, home)
    orch = Orchestrator(store, run.id, home=home)
    # Simulate a crash mid-evaluation: one repeat of the root is already stored.
    archive = orch.git.archive(orch.nodes[0].commit or "", orch.parts.overlay)
    first = orch.parts.evaluator.run_one(
        0, archive, "full", 0, spec.evaluate.command, "f", 10, None
    )
    store.record_evaluation(run.id, dataclasses.replace(first, stdout_tail="FIRST"))
    orch.close()
    Orchestrator(store, run.id, home=home).drive()
    counts = store.evaluation_counts(run.id)
    assert set(counts.values()) == {1}
    assert {(0, "full", r) for r in range(3)} <= counts.keys()
    kept = [e for e in store.evaluations(run.id, 0) if e.repeat == 0]
    assert kept[0].stdout_tail == "FIRST"


def test_policies_can_verify_promising_nodes_with_repeats(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "t", budget=10, policy="exts")
    spec = load_task(task).with_overrides(search={"verify_top_k": 1, "verify_repeats": 3})
    run = create_run(store, spec, home)
    Orchestrator(store, run.id, home=home).drive()
    counts = store.evaluation_counts(run.id)
    assert set(counts.values()) == {1}
    verified = [n for n in store.nodes(run.id) if n.n_evals >= 3]
    assert verified, "no node was verified"
    for n in verified:
        assert {(n.id, "full", r) for r in range(3)} <= counts.keys()
        scores = [e.score for e in store.evaluations(run.id, n.id) if e.stage == "full"]
        assert n.score == pytest.approx(sum(scores) / len(scores))
    assert any(e.kind == "verify" for e in store.events_since(run.id))
    assert store.get_run(run.id).status is RunStatus.COMPLETED
