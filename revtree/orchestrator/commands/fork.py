"""Fork: a new run that starts from any finished node of an earlier run.

The new run inherits the node's ancestry (or, with ``with_tree``, every finished
node) as its history: the same node ids, commits, proposals, scores and evaluations,
so nothing is evaluated again and the knob study and policies learn from it. Its git
store borrows the parent run's objects through git alternates instead of copying
them. The configuration may change: ``--set key=value`` on any task key, or a whole
new task file, whose protected (evaluator) and holdout files then replace the parent's
for every new evaluation (inherited nodes keep their scores). The new run records which
run and node it came from.
"""

from __future__ import annotations

import tomllib
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from revtree.errors import RevtreeError, TaskSpecError
from revtree.memory import GitStore, Node, RunInfo, Store
from revtree.memory.gitstore import HOLDOUT_REF, PROTECTED_REF
from revtree.memory.home import revtree_home
from revtree.memory.recover import write_run_file
from revtree.orchestrator.run import RunPaths, read_source
from revtree.tasks import TaskSpec
from revtree.tasks.load import code_files, format_validation_error, holdout_files, matches
from revtree.tasks.spec import retarget


def apply_sets(spec: TaskSpec, sets: Iterable[str]) -> TaskSpec:
    """``spec`` with ``section.key=value`` assignments (TOML values; bare text is a string)."""
    data = spec.model_dump(mode="python")
    for item in sets:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise TaskSpecError(f"--set {item!r}: expected key=value, e.g. search.policy=mcts")
        path = [p for p in key.strip().split(".") if p]
        try:
            value: Any = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = data
        for part in path[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[path[-1]] = value
        if len(path) == 2:  # a new policy or backend keeps what the override would
            data = retarget(data, {path[0]: {path[1]: value}})
    try:
        return TaskSpec.model_validate(data)
    except ValidationError as e:
        raise TaskSpecError(format_validation_error(e, "--set")) from e


def lineage(nodes: dict[int, Node], node_id: int) -> list[Node]:
    """The node and its ancestors, root first."""
    out, cur = [], nodes.get(node_id)
    while cur is not None:
        out.append(cur)
        cur = nodes.get(cur.parent_id) if cur.parent_id is not None else None
    return out[::-1]


def fork_run(
    store: Store,
    run_id: str,
    node_id: int,
    spec: TaskSpec | None = None,
    home: Path | None = None,
    with_tree: bool = False,
    task_files: bool = False,
) -> RunInfo:
    """Record a new run that continues from ``node_id`` of run ``run_id``.

    ``task_files``: ``spec`` comes from a task file, whose protected and holdout files
    the new run evaluates with (else it keeps the parent's)."""
    home = home or revtree_home()
    parent = store.get_run(run_id)
    spec = spec or TaskSpec.stored(parent.spec)
    if spec.evaluate.direction != parent.direction:
        raise RevtreeError("a fork keeps the metric direction of its parent run")
    nodes = {n.id: n for n in store.nodes(parent.id)}
    target = nodes.get(node_id)
    if target is None or target.commit is None or not target.status.is_finished():
        raise RevtreeError(f"node {node_id} of run {parent.id} is not a finished node")
    keep = (
        [n for n in nodes.values() if n.status.is_finished()]
        if with_tree
        else lineage(nodes, node_id)
    )
    keep_ids = {n.id for n in keep}
    new_id = f"{spec.name}-{uuid.uuid4().hex[:6]}"
    _share_git(RunPaths(home, parent.id).repo, RunPaths(home, new_id).repo, keep)
    if task_files:
        _commit_task_files(RunPaths(home, new_id).repo, spec)
    copies = [Node(**{**n.__dict__, "run_id": new_id}) for n in sorted(keep, key=lambda n: n.id)]
    evals = [e for e in store.evaluations(parent.id) if e.node_id in keep_ids]
    what = "its whole tree" if with_tree else f"the {len(keep)} nodes of its lineage"
    event = (
        "run",
        f"forked from run {parent.id} at node {node_id}, with {what}",
        {"parent_run": parent.id, "parent_node": node_id, "nodes": len(copies)},
    )
    stored = spec.model_dump(mode="json")
    write_run_file(RunPaths(home, new_id).dir, new_id, store.url, stored)  # for `doctor`
    run = store.create_run(  # the run and its history in one transaction
        new_id,
        spec.name,
        spec.search.policy,
        spec.evaluate.direction,
        spec.search.seed,
        stored,
        parent_run=parent.id,
        parent_node=node_id,
        history=(copies, evals, event),
    )
    return store.get_run(run.id)


def _share_git(parent_repo: Path, new_repo: Path, keep: list[Node]) -> None:
    git = GitStore(new_repo)
    try:
        alternates = new_repo / "objects" / "info" / "alternates"
        alternates.parent.mkdir(parents=True, exist_ok=True)
        alternates.write_text(str((parent_repo / "objects").resolve()) + "\n")
        for n in keep:
            assert n.commit is not None
            git.set_node_ref(n.id, n.commit)
        parent = GitStore(parent_repo)
        try:
            for ref in (HOLDOUT_REF, PROTECTED_REF):
                if (sha := parent.find(ref)) is not None:
                    git.set_ref(ref, sha)
        finally:
            parent.close()
    finally:
        git.close()


def _commit_task_files(repo: Path, spec: TaskSpec) -> None:
    """The new task's protected files (and holdout files) as the fork's own refs."""
    git = GitStore(repo)
    try:
        protected = [p for p in code_files(spec) if matches(p, spec.protected)]
        files, modes = read_source(spec, protected)
        git.set_ref(PROTECTED_REF, git.commit_files(files, "protected files of the task", modes))
        if held := holdout_files(spec):
            files, modes = read_source(spec, held)
            git.set_ref(HOLDOUT_REF, git.commit_files(files, "holdout files", modes))
    finally:
        git.close()
