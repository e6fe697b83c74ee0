"""Forks: a new run from any finished node, sharing git objects, with a changed config."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from revtree.errors import RevtreeError, TaskSpecError
from revtree.memory import NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, RunPaths, create_run
from revtree.orchestrator.fork import apply_sets, fork_run, lineage
from revtree.tasks import load_task

from .conftest import make_task, revtree


def _finished_run(store: Store, home: Path, task: Path) -> str:
    run = create_run(store, load_task(task), home)
    Orchestrator(store, run.id, home=home).drive()
    return run.id


def test_fork_inherits_the_lineage_and_continues_with_a_new_policy(
    tmp_path: Path, home: Path, store: Store
) -> None:
    parent_id = _finished_run(store, home, make_task(tmp_path / "t", budget=8))
    parent_nodes = {n.id: n for n in store.nodes(parent_id)}
    leaf = max(n.id for n in parent_nodes.values() if n.depth >= 2)
    spec = apply_sets(
        load_task(tmp_path / "t"), ["search.policy=random", "budget.max_nodes=20", "search.seed=3"]
    )
    child = fork_run(store, parent_id, leaf, spec, home)
    assert (child.parent_run, child.parent_node, child.policy) == (parent_id, leaf, "random")
    history = store.nodes(child.id)
    assert [n.id for n in history] == [n.id for n in lineage(parent_nodes, leaf)]
    assert all(n.commit == parent_nodes[n.id].commit for n in history)
    before = store.evaluation_counts(child.id)
    Orchestrator(store, child.id, home=home).drive()
    nodes = store.nodes(child.id)
    assert store.get_run(child.id).status is RunStatus.COMPLETED
    assert len(nodes) == 20
    assert all(store.evaluation_counts(child.id)[k] == 1 for k in before)  # not re-run
    # git objects are borrowed, not copied: the parent's commits resolve in the fork
    repo, parent_repo = RunPaths(home, child.id).repo, RunPaths(home, parent_id).repo
    sha = parent_nodes[leaf].commit or ""
    assert not (repo / "objects" / sha[:2] / sha[2:]).exists()
    assert (parent_repo / "objects" / sha[:2] / sha[2:]).exists()
    fsck = subprocess.run(["git", "-C", str(repo), "fsck"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    for n in nodes:
        if n.parent_id is not None:
            out = subprocess.run(
                ["git", "-C", str(repo), "rev-parse", f"{n.commit}^"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            assert out == {m.id: m for m in nodes}[n.parent_id].commit
    # a fork of a fork, with the whole tree as history
    grandchild = fork_run(store, child.id, nodes[-1].id, None, home, with_tree=True)
    assert len(store.nodes(grandchild.id)) == sum(n.status.is_finished() for n in nodes)


def test_fork_refuses_bad_input(tmp_path: Path, home: Path, store: Store) -> None:
    parent_id = _finished_run(store, home, make_task(tmp_path / "t", budget=3))
    with pytest.raises(RevtreeError, match="not a finished node"):
        fork_run(store, parent_id, 42, None, home)
    with pytest.raises(TaskSpecError, match=r"nonsense.*expected tags"):
        apply_sets(load_task(tmp_path / "t"), ["search.policy=nonsense"])
    with pytest.raises(TaskSpecError, match="key=value"):
        apply_sets(load_task(tmp_path / "t"), ["budget.max_nodes"])


@pytest.mark.slow
def test_fork_ls_tree_and_rm_on_the_cli(tmp_path: Path, home: Path, store: Store) -> None:
    task = make_task(tmp_path / "t", budget=4)
    revtree(home, "run", str(task), "--quiet")
    parent = store.list_runs()[0].id
    out = revtree(
        home, "fork", parent, "--node", "1", "--set", "budget.max_nodes=6", "--quiet"
    ).stdout
    assert f"forked from {parent} at node 1" in out
    child = next(r for r in store.list_runs() if r.parent_run == parent)
    assert len(store.nodes(child.id)) == 6
    assert all(n.status is NodeStatus.SUCCEEDED for n in store.nodes(child.id))
    tree = revtree(home, "ls", "--tree").stdout
    assert tree.index(parent) < tree.index(child.id) and "from node 1" in tree
    revtree(home, "rm", parent, "--yes")
    assert [r.id for r in store.list_runs()] == [child.id]
    fsck = subprocess.run(
        ["git", "-C", str(RunPaths(home, child.id).repo), "fsck"], capture_output=True, text=True
    )
    assert fsck.returncode == 0  # the fork's borrowed objects survived the parent's rm
