"""The graph shows where sandbox time goes (issue 25): a new best's repeats run in the
``verify`` step, reached from ``record`` by the "new best?" edge, and a node a policy
asks to verify goes from ``select`` to ``verify`` in a thread with no node; ``record``
and ``select`` run no evaluation. Read from the run's own checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from revtree.memory import NodeStatus, Store
from revtree.memory.stages import FULL
from revtree.orchestrator import Orchestrator, create_run
from revtree.orchestrator.budget import Budget
from revtree.tasks import load_task

from .conftest import make_task

Config = dict[str, dict[str, str]]


def histories(store: Store, run_id: str, home: Path) -> dict[str, list[tuple[str, ...]]]:
    """Each thread's checkpoints, oldest first, as the steps due next."""
    orch = Orchestrator(store, run_id, home=home)
    try:
        threads = {c.config["configurable"]["thread_id"] for c in orch.checkpointer.list(None)}
        out = {}
        for thread in threads:
            config: Config = {"configurable": {"thread_id": thread}}
            out[thread] = [tuple(s.next) for s in orch.graph.get_state_history(config)][::-1]
        return out
    finally:
        orch.close()


def test_the_graph_has_verify_after_record_and_select(
    tmp_path: Path, home: Path, store: Store
) -> None:
    run = create_run(store, load_task(make_task(tmp_path / "t", budget=2)), home)
    orch = Orchestrator(store, run.id, home=home)
    try:
        edges = {(e.source, e.target) for e in orch.graph.get_graph().edges}
    finally:
        orch.close()
    assert {("record", "verify"), ("record", "__end__"), ("verify", "__end__")} <= edges
    assert ("select", "verify") in edges
    assert not any(src == "verify" and dst != "__end__" for src, dst in edges)


def test_a_new_best_is_verified_in_its_own_step(
    tmp_path: Path, home: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVTREE_PRUNE_EVERY", "0")  # keep the checkpoints to read them
    monkeypatch.setenv("REVTREE_DURABILITY", "async")  # one per step, to read the path
    spec = load_task(make_task(tmp_path / "t", budget=6)).with_overrides(
        trust={"verify_repeats": 3, "verify_share": 1.0}
    )
    run = create_run(store, spec, home)
    orch = Orchestrator(store, run.id, home=home)
    orch.drive()
    steps = histories(store, run.id, home)
    nodes = {n.thread_id: n for n in store.nodes(run.id)}
    repeated = {e.node_id for e in store.evaluations(run.id, stage=FULL) if e.repeat >= 1}
    went = [nodes[t.split(":")[1]] for t, h in steps.items() if ("verify",) in h]
    assert went, "no new best went to verify"
    assert all(n.status is NodeStatus.SUCCEEDED for n in went)
    # the repeats of any node but the baseline and the final best (the run's end
    # verifies those, outside the graph) were run by a verify step
    assert repeated - {0, orch.mirror.best_id} <= {n.id for n in went}
    for thread, history in steps.items():  # record -> verify -> end, or record -> end
        if ("record",) in history:
            after = history[history.index(("record",)) + 1 :]
            assert after in ([()], [("verify",), ()]), (thread, history)


def test_a_node_the_policy_asks_to_verify_goes_from_select_to_verify(
    tmp_path: Path, home: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVTREE_PRUNE_EVERY", "0")
    monkeypatch.setenv("REVTREE_DURABILITY", "async")  # a checkpoint per step: the path
    task = make_task(tmp_path / "t", budget=10, policy="exts")
    spec = load_task(task).with_overrides(search={"verify_top_k": 1, "verify_repeats": 3})
    run = create_run(store, spec, home)
    Orchestrator(store, run.id, home=home).drive()
    tickets = {n.thread_id for n in store.nodes(run.id)}
    steps = histories(store, run.id, home)
    nodeless = [h for t, h in steps.items() if t.split(":")[1] not in tickets]
    asked = [h for h in nodeless if ("verify",) in h]
    assert asked, "no thread verified a node for the policy"
    for history in asked:
        assert history[history.index(("select",)) + 1 :] == [("verify",), ()]


def test_every_evaluation_is_recorded_and_spent_once(
    tmp_path: Path, home: Path, store: Store
) -> None:
    """One recorder: what the session spent (sandbox seconds, evaluations, the verify
    share) is what SQL holds, the guard and final holdouts included, so a resumed run
    starts from the same figures. (The guard share is left out: a session leaves the
    baseline's guard out of it, a resumed ``Budget`` counts every guard row.)"""
    holdout = '[holdout]\ncommand = "python ev.py"\n'
    run = create_run(store, load_task(make_task(tmp_path / "t", budget=5, extra=holdout)), home)
    orch = Orchestrator(store, run.id, home=home)
    orch.drive()
    stages = {e.stage for e in store.evaluations(run.id)}
    assert {"guard", "holdout"} <= stages
    spent, again = orch.parts.budget, Budget(store, run.id, orch.spec, 0.0, lambda: 0)
    assert spent.n_evals == again.n_evals == len(store.evaluations(run.id))
    assert spent.sandbox_seconds == pytest.approx(again.sandbox_seconds)
    assert spent.trust["verify"] == again.trust["verify"] > 0
