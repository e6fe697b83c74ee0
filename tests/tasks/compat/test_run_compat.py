"""OpenEvolve and ShinkaEvolve folders driven through a whole run, in process.

Knob-free tasks: offline, the proposer re-evaluates the parent unchanged, so every node
must score what the deterministic baseline scores, through the generated runner and the
support files that the orchestrator copies into each workspace.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from revtree.memory import NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task

from .conftest import EXAMPLES


@pytest.mark.parametrize(
    ("example", "stages"),
    [
        ("openevolve-function-minimization", {"stage1", "full"}),
        ("shinka-circle-packing-lite", {"full"}),
    ],
)
def test_a_compat_folder_runs_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, example: str, stages: set[str]
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("REVTREE_HOME", str(home))
    monkeypatch.delenv("REVTREE_DB", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        spec = load_task(EXAMPLES / example)
    spec = spec.with_overrides(
        budget={"max_nodes": 4},
        search={"parallel": 2},
        sandbox={"backend": "local"},
        agents={"mode": "knobs"},  # offline, whatever keys the environment holds
    )
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    try:
        run = create_run(store, spec, home)
        Orchestrator(store, run.id, home=home).drive()
        assert store.get_run(run.id).status is RunStatus.COMPLETED
        nodes = store.nodes(run.id)
        assert len(nodes) == 4
        assert all(n.status is NodeStatus.SUCCEEDED for n in nodes), [n.error for n in nodes]
        (score,) = {n.score for n in nodes}  # the baseline, re-evaluated unchanged
        assert score is not None and 0 < score < 2
        evals = store.evaluations(run.id)
        assert {e.stage for e in evals} == stages
        assert all(e.ok and "combined_score" in e.metrics for e in evals)
    finally:
        store.close()
