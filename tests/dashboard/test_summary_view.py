"""``queries.SummaryView``: the dashboard's read model for ``report.summarize``. It is no
Store (it has the summary's reads and no write method) and the summary it gives is the
Store's, on a run with waiting, decided and evaluated candidates, a holdout, a guard and
model calls. In-process, over a real SQLite store."""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import pytest

from revtree.memory import NodeStatus, RunStatus, Store
from revtree.memory.reads import RunReads
from revtree.memory.records import EvalResult, LLMCall, Node
from revtree.memory.stages import FULL, GUARD, HOLDOUT
from revtree.orchestrator.commands.report import compare, summarize
from revtree.web.queries import SummaryView
from revtree.web.views import Views


def public(cls: type) -> set[str]:
    return {n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'revtree.db'}")
    yield s  # type: ignore[misc]
    s.close()


def a_run(store: Store) -> str:
    """A minimised run held for approval: root 0 (5.0), 1 and 2 coded (2 approved),
    3 succeeded (4.0, with a proposal), 4 failed; evaluations of every stage; two calls."""
    now = time.time()
    spec = {"search": {"approve": "evaluate"}}
    root = Node("r1", 0, None, "baseline", NodeStatus.SUCCEEDED, score=5.0, n_evals=1)
    store.create_run("r1", "quad", "greedy", "minimize", 0, spec, root=(root, ("n", "root", None)))
    for i, status, score in [
        (1, NodeStatus.CODED, None),
        (2, NodeStatus.CODED, None),
        (3, NodeStatus.SUCCEEDED, 4.0),
        (4, NodeStatus.FAILED, None),
    ]:
        node = Node(
            "r1", i, 0, "improve", status, depth=1, score=score, n_evals=int(score is not None),
            proposal={"hypothesis": f"h{i}"}, created_at=now, finished_at=now,
        )  # fmt: skip
        store.add_node(node, ("node", f"node {i}", None))
    store.decide("r1", 2, 1, True)
    for node_id, stage, score in [(0, FULL, 5.0), (3, FULL, 4.0), (4, FULL, None)]:
        ok = score is not None
        store.record_evaluation("r1", EvalResult(node_id, stage, 0, ok, score, duration=1.5))
    store.record_evaluation("r1", EvalResult(3, HOLDOUT, 0, True, 4.2, duration=2.0))
    store.record_evaluation("r1", EvalResult(3, GUARD, 0, True, 4.1, duration=0.5))
    for node_id in (None, 3):
        call = LLMCall("coder", "m", 100, 20, 40, 0, 0.01, 1.0, True, node_id, prompt="p")
        store.record_llm_call("r1", call)
    return "r1"


def test_summary_view_is_no_store_and_has_only_the_reads() -> None:
    assert not issubclass(SummaryView, Store)
    assert public(SummaryView) == public(RunReads)  # no write method, no other read


def test_the_view_gives_the_stores_summary(store: Store) -> None:
    run = store.get_run(a_run(store))
    view = SummaryView(store)
    lean, full = summarize(view, run), summarize(store, run)
    assert lean == full
    assert full["waiting"] == [1] and full["best_node"] == 3 and full["sandbox_seconds"] == 7.0
    assert full["holdout"][0]["score"] == 4.2 and full["guard"]["runs"] == 1
    assert full["llm"]["calls"] == 2
    assert compare(view, [run]) == compare(store, [run])
    # the reads it passes on are the Store's; the lean ones drop the texts
    assert view.events_since(run.id, 0, 100) == store.events_since(run.id, 0, 100)
    assert all(n.proposal is None for n in view.nodes(run.id))
    assert all(c.prompt is None for c in view.llm_calls(run.id))
    assert view.evaluations(run.id, 3, HOLDOUT) == store.evaluations(run.id, 3, HOLDOUT)


def test_a_run_stopped_after_it_was_read_is_not_cached_as_running(store: Store) -> None:
    """The dashboard reads a run, then its mark; a stop between the two reads was cached
    as "running" under the stop's mark, so the page said running for good (a CI failure
    of test_stop_and_resume_a_running_run, 1 run in 12 under load)."""
    views = Views(store)
    run_id = a_run(store)
    before = store.get_run(run_id)  # the request's read of the run, as it was
    assert views.run_detail(run_id)["status"] == "running"
    store.update_run(run_id, ("run", "run stopped", None), status=RunStatus.STOPPED)
    assert views.summary(before)["status"] == "stopped"  # its mark moved: read again
    assert views.run_detail(run_id)["status"] == "stopped"
    assert views.runs()["runs"][0]["status"] == "stopped"
