"""The operator bandit in ``revtree show`` and ``show --json``: a real offline greedy run
with ``[search] operators = "bandit"`` (its candidates sometimes crash, so it has failed
leaves to debug), read back as people and programs read it; a run whose policy picks
its own operators has no ``operators``. The bandit's choices on simulated landscapes are
in ``tests/orchestrator/policies/test_operator_bandit.py``."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from revtree.memory import Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.orchestrator.policies import make_policy
from revtree.orchestrator.policies.operators import summary
from revtree.orchestrator.tree import Tree
from revtree.tasks import load_task

from .conftest import make_task, revtree_here


def run_with(store: Store, home: Path, root: Path, operators: str, budget: int) -> str:
    """A finished greedy run of ``budget`` nodes whose operators ``operators`` picks."""
    task = make_task(root, budget=budget, modes=("ok", "crash"))
    toml = task / "task.toml"
    search = f'seed = 7\nnum_drafts = 1\noperators = "{operators}"\n'
    toml.write_text(toml.read_text().replace("seed = 7\n", search))
    run = create_run(store, load_task(task), home)
    Orchestrator(store, run.id, home=home).drive()
    return run.id


@pytest.mark.slow  # a run of 15 nodes and one of 3
def test_show_reports_the_operator_bandit(tmp_path: Path, home: Path, store: Store) -> None:
    run_id = run_with(store, home, tmp_path / "bandit", "bandit", budget=15)
    shown = json.loads(revtree_here(home, "show", run_id, "--json", "--nodes").stdout)
    arms: dict[str, Any] = shown["operators"]["arms"]
    assert list(arms) == ["draft", "improve", "debug"]  # greedy's arms, in its order
    nodes = shown["nodes"]
    assert shown["n_nodes"] == 15 and all(n["status"] != "pending" for n in nodes)
    made = Counter(n["operator"] for n in nodes if n["id"] != 0)
    # every finished candidate rewards its operator's arm, the baseline none
    assert {op: a["pulls"] for op, a in arms.items()} == {op: made[op] for op in arms}
    assert sum(a["pulls"] for a in arms.values()) == 14
    assert made["debug"] > 0, made  # the crashes gave the bandit something to debug
    for a in arms.values():
        assert (a["mean_reward"] is None) == (a["pulls"] == 0)
        assert a["mean_reward"] is None or 0.0 <= a["mean_reward"] <= 1.0
    # what the policy itself rebuilds from the stored tree when the run resumes
    run = store.get_run(run_id)
    policy: Any = make_policy(load_task(tmp_path / "bandit").search)
    policy.sync(Tree.of(store.nodes(run_id), run.maximize))
    assert summary(policy.ops) == shown["operators"]

    text = revtree_here(home, "show", run_id, COLUMNS="80").stdout
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    at = next(i for i, line in enumerate(lines) if "operators (bandit)" in line)
    for k, (op, a) in enumerate(arms.items()):
        mean = "-" if a["mean_reward"] is None else f"{a['mean_reward']:.2f}"
        want = f"{op}: {a['pulls']} candidates, mean reward {mean}"
        assert re.search(rf"│ {re.escape(want)} +│$", lines[at + k]), (want, text)

    plain = run_with(store, home, tmp_path / "policy", "policy", budget=3)
    shown = json.loads(revtree_here(home, "show", plain, "--json").stdout)
    assert "operators" not in shown and shown["n_nodes"] == 3
    assert "operators" not in revtree_here(home, "show", plain, COLUMNS="80").stdout
