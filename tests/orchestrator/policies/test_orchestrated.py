"""Every policy drives the real orchestrator end to end (tiny knob task, offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from revtree.memory import NodeStatus, Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task
from tests.orchestrator.conftest import make_task


@pytest.mark.parametrize(
    "policy", ["greedy", "random", "agentic", "mcts", "evolution", "bgmcts", "exts"]
)
@pytest.mark.slow  # 16 s of --quick under -n 2 (issue 24)
def test_policy_runs_through_the_orchestrator(
    tmp_path: Path, home: Path, store: Store, policy: str
) -> None:
    run = create_run(store, load_task(make_task(tmp_path / policy, budget=5, policy=policy)), home)
    Orchestrator(store, run.id, home=home).drive()
    nodes = store.nodes(run.id)
    assert len(nodes) == 5 and all(n.status.is_finished() for n in nodes)
    for n in nodes[1:]:
        parent = nodes[n.parent_id or 0].status
        debugged = n.operator == "debug" and parent is NodeStatus.FAILED
        assert parent is NodeStatus.SUCCEEDED or debugged
    assert (store.get_run(run.id).policy_state or {}).get("policy") == policy
