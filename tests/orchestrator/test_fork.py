"""Forks: a new run from any finished node, sharing git objects, with a changed config."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from revtree.errors import RevtreeError, TaskSpecError
from revtree.memory import Node, NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, RunPaths, create_run
from revtree.orchestrator.commands.fork import apply_sets, fork_run, lineage
from revtree.orchestrator.commands.report import COMPARE_KEYS, compare, summarize
from revtree.tasks import load_task

from .conftest import make_task, revtree, revtree_here, spawn, wait_for


def _finished_run(store: Store, home: Path, task: Path) -> str:
    run = create_run(store, load_task(task), home)
    Orchestrator(store, run.id, home=home).drive()
    return run.id


@pytest.mark.slow  # 6 s of --quick under -n 2 (issue 24)
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
    _check_comparison(store, parent_id, child.id, {n.id for n in history})
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


def _check_comparison(store: Store, parent_id: str, child_id: str, history: set[int]) -> None:
    """``compare`` puts the runs side by side and tells a fork's own work from its history."""
    rows = dict(compare(store, [store.get_run(parent_id), store.get_run(child_id)]))
    assert list(rows) == list(COMPARE_KEYS)
    assert rows["policy"] == ["greedy", "random"]
    assert rows["parent_run"] == [None, parent_id]
    n_parent = len(store.nodes(parent_id))
    assert (rows["n_inherited"], rows["n_new"]) == (
        [0, len(history)],
        [n_parent, 20 - len(history)],
    )
    own = [n for n in store.nodes(child_id) if n.id not in history and n.score is not None]
    best_new = min(own, key=lambda n: (n.score, n.id))  # the task minimises
    assert (rows["best_new_node"][1], rows["best_new_score"][1]) == (best_new.id, best_new.score)
    parent = summarize(store, store.get_run(parent_id))
    # the history's sandbox time is the parent's, said apart from the fork's own
    spent = {e.node_id: 0.0 for e in store.evaluations(parent_id)}
    for e in store.evaluations(parent_id):
        spent[e.node_id] += e.duration
    child = summarize(store, store.get_run(child_id))
    assert child["inherited_sandbox_seconds"] == round(sum(spent[i] for i in history), 3)
    assert 0 < child["inherited_sandbox_seconds"] < child["sandbox_seconds"]
    assert parent["inherited_sandbox_seconds"] == 0
    assert rows["best_new_node"][0] == rows["best_node"][0] == parent["best_node"]
    assert rows["best_score"][1] == min(rows["best_score"][0], best_new.score)


def test_fork_refuses_bad_input(tmp_path: Path, home: Path, store: Store) -> None:
    parent_id = _finished_run(store, home, make_task(tmp_path / "t", budget=3))
    with pytest.raises(RevtreeError, match="not a finished node"):
        fork_run(store, parent_id, 42, None, home)
    with pytest.raises(TaskSpecError, match=r"unknown policy .nonsense.: expected one of"):
        apply_sets(load_task(tmp_path / "t"), ["search.policy=nonsense"])
    with pytest.raises(TaskSpecError, match="key=value"):
        apply_sets(load_task(tmp_path / "t"), ["budget.max_nodes"])


def test_a_set_policy_keeps_what_every_policy_has_as_an_override_does(tmp_path: Path) -> None:
    task = make_task(tmp_path / "t", budget=3)
    spec = load_task(task).with_overrides(search={"novelty_threshold": 0.9, "approve": "evaluate"})
    forked = apply_sets(spec, ["search.policy=mcts", "search.seed=3"])
    overridden = spec.with_overrides(search={"policy": "mcts", "seed": 3})
    assert forked.search == overridden.search  # one rule for --set and an override
    assert (forked.search.novelty_threshold, forked.search.approve) == (0.9, "evaluate")


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
    tree = revtree_here(home, "ls", "--tree").stdout
    assert tree.index(parent) < tree.index(child.id) and "from node 1" in tree
    revtree(home, "rm", parent, "--yes")
    assert [r.id for r in store.list_runs()] == [child.id]
    fsck = subprocess.run(
        ["git", "-C", str(RunPaths(home, child.id).repo), "fsck"], capture_output=True, text=True
    )
    assert fsck.returncode == 0  # the fork's borrowed objects survived the parent's rm


SCALED = "\nimport sys as _sys\nif len(_sys.argv) > 1:\n    value *= float(_sys.argv[1])\n"


def _scaled_task(root: Path, budget: int) -> Path:
    """The test task, with an evaluator that multiplies f by its first argument, if any."""
    task = make_task(root, budget=budget)
    ev = (task / "ev.py").read_text()
    at = ev.index('if mode == "nan"')
    (task / "ev.py").write_text(ev[:at] + SCALED.lstrip("\n") + ev[at:])
    return task


def _changed_task(task: Path, dest: Path) -> Path:
    """A copy of ``task`` whose evaluator is called with the argument 10 and itself
    changed (it also triples the value), whose knob X has a narrower range, with 10
    nodes of budget."""
    shutil.copytree(task, dest)
    ev = (dest / "ev.py").read_text()
    assert "value *= float(_sys.argv[1])" in ev
    (dest / "ev.py").write_text(
        ev.replace("value *= float(_sys.argv[1])", "value *= 3 * float(_sys.argv[1])")
    )
    toml = (dest / "task.toml").read_text()
    for old, new in (
        ('command = "python ev.py"', 'command = "python ev.py 10"'),
        ("low = -5\nhigh = 5", "low = 1.0\nhigh = 1.5"),
        ("max_nodes = 4", "max_nodes = 10"),
    ):
        assert old in toml
        toml = toml.replace(old, new)
    (dest / "task.toml").write_text(toml)
    return dest


def _f(knobs: dict[str, Any]) -> float:
    return float((knobs["X"] - 1.2) ** 2 + (knobs["N"] - 7) ** 2)


@pytest.mark.slow
def test_fork_with_a_changed_task_file(tmp_path: Path, home: Path, store: Store) -> None:
    task = _scaled_task(tmp_path / "t", budget=4)
    revtree(home, "run", str(task), "--quiet")
    parent = store.list_runs()[0].id
    old = {n.id: n for n in store.nodes(parent)}
    for n in old.values():  # unscaled: the parent's command passes no argument
        if n.id:
            assert n.score == pytest.approx(_f((n.proposal or {})["knobs"]))
    leaf = max((n for n in old.values() if n.id), key=lambda n: (n.depth, n.id)).id
    changed = _changed_task(task, tmp_path / "t2")

    revtree(home, "fork", parent, "--node", str(leaf), "--task", str(changed), "--quiet")

    child = next(r for r in store.list_runs() if r.parent_run == parent)
    assert child.spec == load_task(changed).model_dump(mode="json")  # the new file is the spec
    assert child.spec["evaluate"]["command"] == "python ev.py 10"
    nodes = {n.id: n for n in store.nodes(child.id)}
    chain = [n.id for n in lineage(old, leaf)]
    for i in chain:  # history inherited as it was, not evaluated again
        assert (nodes[i].commit, nodes[i].score) == (old[i].commit, old[i].score)
    assert store.get_run(child.id).status is RunStatus.COMPLETED
    new = [n for i, n in nodes.items() if i not in chain]
    assert len(nodes) == 10 and len(new) == 10 - len(chain)
    for n in new:  # new nodes use the new task: its knob range, command and evaluator file
        assert n.status is NodeStatus.SUCCEEDED, n.error
        knobs = (n.proposal or {})["knobs"]
        assert 1.0 <= knobs["X"] <= 1.5
        assert n.score == pytest.approx(30 * _f(knobs))
    assert set(store.evaluation_counts(child.id).values()) == {1}
    assert "no problems found" in revtree_here(home, "doctor").stdout
    side = json.loads(revtree_here(home, "compare", parent, child.id, "--json").stdout)
    assert side[child.id]["parent_run"] == parent and side[parent]["parent_run"] is None
    assert side[child.id]["n_inherited"] == len(chain)
    assert side[child.id]["n_new"] == 10 - len(chain)


GATE = """\
import os as _os, time as _time
_gate, _until = _os.environ.get("GATE"), _time.time() + 120
while _gate and _os.path.exists(_gate) and _time.time() < _until:
    _time.sleep(0.05)
"""


def _succeeded(store: Store, run_id: str) -> list[Node]:
    return [n for n in store.nodes(run_id) if n.status is NodeStatus.SUCCEEDED]


def _row(n: Node) -> tuple[Any, ...]:
    return (n.id, n.parent_id, n.status, n.commit, n.score, n.operator, n.proposal)


@pytest.mark.slow
def test_fork_while_the_parent_is_running(tmp_path: Path, home: Path, db_url: str) -> None:
    """The parent's evaluator holds on a gate file once a few nodes are done, so the
    fork runs to completion while the parent is certainly still running."""
    task = make_task(tmp_path / "t", budget=10, sleep=0.1, timeout=150)
    (task / "ev.py").write_text(GATE + (task / "ev.py").read_text())
    gate = tmp_path / "gate"
    toml = (task / "task.toml").read_text()
    assert 'env = { SLEEP = "0.1" }' in toml
    toml = toml.replace('env = { SLEEP = "0.1" }', f'env = {{ SLEEP = "0.1", GATE = "{gate}" }}')
    (task / "task.toml").write_text(toml)
    parent_proc = spawn(home, "run", str(task), "--quiet", "--sandbox", "local", REVTREE_DB=db_url)
    store = Store(db_url)
    try:
        wait_for(store.list_runs, 60, "the parent run")
        parent = store.list_runs()[0].id
        wait_for(lambda: len(_succeeded(store, parent)) >= 3, 120, "3 finished nodes")
        gate.touch()  # the parent's next evaluations wait until the fork is done
        at_fork = {n.id: n for n in store.nodes(parent)}
        done = {i: n for i, n in at_fork.items() if n.status.is_finished()}
        leaf = max((n for n in done.values() if n.commit), key=lambda n: (n.depth, n.id))
        ungated = ("--set", 'sandbox.env.GATE=""')  # the fork's evaluations do not wait

        fork = ("fork", parent, "--node", str(leaf.id), *ungated, "--quiet")
        out = revtree(home, *fork, REVTREE_DB=db_url).stdout

        assert f"forked from {parent} at node {leaf.id}" in out
        assert parent_proc.poll() is None
        assert store.get_run(parent).status is RunStatus.RUNNING
        child = next(r for r in store.list_runs() if r.parent_run == parent)
        _check_fork(store, child.id, lineage(done, leaf.id), 10)
        gate.unlink()
        out, _ = parent_proc.communicate(timeout=180)
        assert parent_proc.returncode == 0, out
        _check_complete(store, parent, 10)
        after = {n.id: n for n in store.nodes(parent)}
        assert [_row(after[i]) for i in done] == [_row(n) for n in done.values()]
        for run_id in (parent, child.id):
            assert (
                "no problems found"
                in revtree_here(home, "doctor", run_id, REVTREE_DB=db_url).stdout
            )
    finally:
        gate.unlink(missing_ok=True)
        if parent_proc.poll() is None:
            parent_proc.kill()
            parent_proc.communicate(timeout=30)
        store.close()


def _check_fork(store: Store, run_id: str, history: list[Node], n_nodes: int) -> None:
    """The fork completed with ``n_nodes`` nodes and ``history`` as its first nodes."""
    _check_complete(store, run_id, n_nodes)
    nodes = {n.id: n for n in store.nodes(run_id)}
    assert [_row(nodes[n.id]) for n in history] == [_row(n) for n in history]
    assert {i for i in nodes if i <= history[-1].id} == {n.id for n in history}  # no more
    inherited = {n.id for n in history}
    assert all(nodes[i].parent_id in nodes for i in nodes if i not in inherited and i)


def _check_complete(store: Store, run_id: str, n_nodes: int) -> None:
    run = store.get_run(run_id)
    assert run.status is RunStatus.COMPLETED, run.reason
    nodes = store.nodes(run_id)
    assert len(nodes) == n_nodes and all(n.status is NodeStatus.SUCCEEDED for n in nodes)
    assert set(store.evaluation_counts(run_id).values()) == {1}
    seqs = [e.seq for e in store.events_since(run_id, limit=100_000)]
    assert seqs == list(range(1, len(seqs) + 1))
