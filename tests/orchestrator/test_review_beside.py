"""The model review beside the evaluation (issue 24): where the sandbox contains the
candidate (here the namespace sandbox, bwrap), the reviewer's call and the evaluation
run at once, and a rejection still keeps the candidate out of the scores; in the local
sandbox the review comes first. Real runs: the openai SDK against the fake server on
127.0.0.1, real git, SQLite and sandboxes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer, FakeReply, FakeRequest
from revtree.memory import NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.orchestrator.commands.report import summarize
from revtree.tasks import load_task
from tests.orchestrator.test_llm_run import Scientist, make_task, role


class Watching:
    """The Scientist's answers; each reviewer call first waits (up to ``wait`` s) for the
    candidate to be evaluating, and notes whether it was."""

    def __init__(self, store: Store, wait: float) -> None:
        self.store, self.wait, self.model = store, wait, Scientist(tamper_at=2)
        self.seen: list[bool] = []

    def __call__(self, req: FakeRequest) -> FakeReply | str:
        if role(req) == "reviewer":
            self.seen.append(self._evaluating())
        return self.model(req)

    def _evaluating(self) -> bool:
        end = time.monotonic() + self.wait
        while time.monotonic() < end:
            (run,) = self.store.list_runs()
            if any(
                n.status is NodeStatus.EVALUATING and n.id > 0 for n in self.store.nodes(run.id)
            ):
                return True
            time.sleep(0.02)
        return False


def drive(store: Store, home: Path, task: Path, url: str, backend: str) -> str:
    spec = load_task(task).with_overrides(
        agents={"base_url": url}, sandbox={"backend": backend}, search={"parallel": 1}
    )
    run = create_run(store, spec, home)
    Orchestrator(store, run.id, home=home).drive()
    return run.id


@pytest.mark.bwrap
@pytest.mark.slow  # a 5-candidate run in the namespace sandbox
def test_the_review_runs_beside_the_evaluation_and_a_rejection_still_holds(
    tmp_path: Path, home: Path, store: Store
) -> None:
    from revtree.sandboxes.bwrap import usable

    if (why := usable()) is not None:
        pytest.skip(why)
    task = make_task(tmp_path / "t", budget=6, reviewer=True)
    watching = Watching(store, wait=30.0)
    with FakeLLMServer(watching) as srv:
        run_id = drive(store, home, task, srv.openai_url, "bwrap")
    assert store.get_run(run_id).status is RunStatus.COMPLETED
    assert watching.seen and all(watching.seen), watching.seen  # each review saw its
    # candidate evaluating: the review did not come first
    tampered = store.node(run_id, 2)  # hard-codes the hidden target: err 0, the best score
    assert tampered.status is NodeStatus.REJECTED and tampered.error_kind == "rejected"
    assert "hard-codes the target" in (tampered.error or "")
    assert tampered.score is None
    ran = store.evaluations(run_id, 2)
    assert ran and ran[0].score == 0.0  # it was evaluated beside its review...
    s = summarize(store, store.get_run(run_id))
    assert s["best_node"] != 2 and s["best_score"] > 0.0  # ...and its score is not used
    said = [e.message for e in store.events_since(run_id) if e.node_id == 3]
    assert any("evaluating while the reviewer reads it" in m for m in said), said


@pytest.mark.slow  # a 5-candidate run
def test_in_the_local_sandbox_the_review_comes_first(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "t", budget=6, reviewer=True)
    watching = Watching(store, wait=0.0)
    with FakeLLMServer(watching) as srv:
        run_id = drive(store, home, task, srv.openai_url, "local")
    assert len(watching.seen) >= 4  # the model reviewed each candidate
    # each candidate's evaluation started after its own review (at parallel 1 the next
    # candidate's review may run while the one before is evaluated: tickets.Chain)
    said = [
        e.message
        for e in store.events_since(run_id)
        if e.node_id and e.message.endswith("evaluating")
    ]
    assert len(said) >= 4 and all("review passed, evaluating" in m for m in said), said
    tampered = store.node(run_id, 2)
    assert tampered.status is NodeStatus.REJECTED and not store.evaluations(run_id, 2)


def test_a_review_beside_an_evaluation_that_raises_is_forgotten() -> None:
    from revtree.orchestrator.reviews import BESIDE, Beside

    rejected = {"accepted": False, "reasons": ["hard-coded"], "by": BESIDE}
    beside = Beside(True)
    assert beside.start((1, 1), lambda: rejected)
    with pytest.raises(RuntimeError), beside.dropped_on_error((1, 1)):
        raise RuntimeError("the sandbox broke")
    assert not beside.started((1, 1))  # nothing left waiting for a step
    assert beside.start((2, 1), lambda: rejected)
    assert beside.verdict((2, 1)) == {
        "accepted": False,
        "reasons": ["hard-coded"],
        "by": "reviewer beside",
    }
    assert beside.start((3, 1), lambda: None) and beside.verdict((3, 1)) is None
    assert not Beside(False).start((4, 1), lambda: None)  # off: the caller reviews first
