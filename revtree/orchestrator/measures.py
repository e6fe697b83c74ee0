"""What a succeeded node measures besides its score (:attr:`Node.features`), for the
evolution policy's MAP-Elites features: its code size, its diff sizes and the
evaluator's numeric metrics. Other policies do not read them, so only evolution runs
pay for the git reads. And a node's gain over the baseline, as the live log says it."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from revtree.memory import GitStore, Node
from revtree.tasks import TaskSpec, matches


def gain(root: Node, node_id: int, score: float) -> str:
    """A node's score against the baseline's (``root``), as the live log says it."""
    if node_id == 0 or root.score is None:
        return " (baseline)" if node_id == 0 else ""
    delta = score - root.score
    pct = f" ({delta / abs(root.score):+.1%})" if root.score else ""
    return f", {delta:+.6g} vs baseline{pct}"


def changed_lines(diff: str) -> int:
    """Lines added plus lines removed in a unified diff."""
    return sum(
        1
        for line in diff.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++ ", "--- "))
    )


def node_features(
    git: GitStore,
    spec: TaskSpec,
    node: Node,
    get: Callable[[int], Node],
    metrics: Mapping[str, float],
) -> dict[str, float] | None:
    """``code_size``: characters of the editable files (OpenEvolve's complexity, the
    length of the program's code); ``diff_size``: lines changed from the parent;
    ``drift``: lines changed from the baseline; ``metric:NAME``: the evaluator's numeric
    metrics. None unless the run's policy is evolution."""
    if spec.search.policy != "evolution" or node.commit is None:
        return None
    files = [p for p in git.list_files(node.commit) if matches(p, spec.editable)]
    code = git.read_files(node.commit, files)
    out = {f"metric:{k}": float(v) for k, v in metrics.items()}
    out["code_size"] = float(sum(len(d.decode("utf-8", "replace")) for d in code.values()))
    parent = get(node.parent_id) if node.parent_id is not None else None
    root = get(0).commit if node.id != 0 else None
    out["diff_size"] = (
        float(changed_lines(git.diff(parent.commit, node.commit)))
        if parent is not None and parent.commit
        else 0.0
    )
    out["drift"] = float(changed_lines(git.diff(root, node.commit))) if root else 0.0
    return out
