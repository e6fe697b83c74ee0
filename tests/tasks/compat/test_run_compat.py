"""OpenEvolve and ShinkaEvolve folders driven through a whole run, in process.

The folders are knob-free, and a candidate identical to its parent is refused (it would
only measure the evaluator's noise); so the test hands the offline knob proposer one knob
over a number of the program (the folder itself stays as it is). Every candidate then
changes the program, and every node must succeed through the generated runner and the
support files that the orchestrator copies into each workspace, scoring what its own
code scores.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from revtree.memory import GitStore, NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, RunPaths, create_run
from revtree.tasks import load_task
from revtree.tasks.spec import TaskSpec

from .conftest import EXAMPLES


@pytest.mark.parametrize(
    ("example", "stages", "knob"),
    [
        (
            "openevolve-function-minimization",
            {"stage1", "full"},
            # the upper search bound, inside the EVOLVE-BLOCK
            {
                "file": "initial_program.py",
                "pattern": r"bounds=\(-5\.0, ([0-9.]+)\)",
                "low": 3.0,
                "high": 7.0,
            },
        ),
        (
            "shinka-circle-packing-lite",
            {"full"},
            # where the centres sit in their grid cells: any value here packs validly
            {
                "file": "initial.py",
                "pattern": r"\(c \+ ([0-9.]+)\) / cols",
                "low": 0.3,
                "high": 0.7,
            },
        ),
    ],
)
def test_a_compat_folder_runs_end_to_end(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    example: str,
    stages: set[str],
    knob: dict[str, object],
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
    spec = TaskSpec.model_validate(
        {**spec.model_dump(mode="python"), "knobs": [{"name": "k", "type": "float", **knob}]}
    )
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    try:
        run = create_run(store, spec, home)
        Orchestrator(store, run.id, home=home).drive()
        assert store.get_run(run.id).status is RunStatus.COMPLETED
        nodes = store.nodes(run.id)
        assert len(nodes) == 4
        assert all(n.status is NodeStatus.SUCCEEDED for n in nodes), [n.error for n in nodes]
        git = GitStore(RunPaths(home, run.id).repo)
        program = str(knob["file"])
        for n in nodes[1:]:  # each candidate really changed its parent's program
            parent = store.node(run.id, n.parent_id or 0)
            assert git.changed_paths(parent.commit or "", n.commit or "") == [program]
            assert store.evaluations(run.id, n.id), n.error  # evaluated, not refused
        scores = [n.score for n in nodes]
        assert all(s is not None and 0 < s < 2 for s in scores), scores
        assert len(set(scores)) > 1, scores  # the changed code is what got scored
        evals = store.evaluations(run.id)
        assert {e.stage for e in evals} == stages
        assert all(e.ok and "combined_score" in e.metrics for e in evals)
        full = {e.node_id: e.metrics["combined_score"] for e in evals if e.stage == "full"}
        # each node scored what the folder's own evaluator said of its code
        assert full == {n.id: pytest.approx(n.score) for n in nodes}
    finally:
        store.close()
