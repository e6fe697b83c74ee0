"""What a succeeded node measures besides its score (:attr:`Node.features`), for the
evolution policy's MAP-Elites features: its code size, its diff sizes and the
evaluator's numeric metrics. Other policies do not read them, so only evolution runs
pay for the git reads. And a node's gain over the baseline, as the live log says it."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from revtree.memory import GitStore, Node
from revtree.memory.textdiff import binary, git_lines, opcodes
from revtree.tasks import TaskSpec, matches


def gain(root: Node, node_id: int, score: float) -> str:
    """A node's score against the baseline's (``root``), as the live log says it."""
    if node_id == 0 or root.score is None:
        return " (baseline)" if node_id == 0 else ""
    delta = score - root.score
    pct = f" ({delta / abs(root.score):+.1%})" if root.score else ""
    return f", {delta:+.6g} vs baseline{pct}"


def changed_lines(git: GitStore, base: str, head: str) -> int:
    """Lines added plus lines removed from ``base`` to ``head``, as ``git diff
    --numstat`` counts them, mostly without a subprocess: a binary file (a NUL in its
    first 8,000 bytes, git's test) counts none, a file moved unchanged counts none (git's
    exact renames; a moved and edited file counts as removed and added), lines end at
    ``\n`` only, and lines are matched by difflib, which on a large rewrite can pair
    them a little differently from git's Myers diff. A file whose changed middle would
    cost difflib more than ``textdiff.MATCH_MAX`` comparisons (its worst case grows as
    the cube: a candidate could make it minutes) sends the whole count to ``git diff
    --numstat``."""
    a, b = git.list_files(base), git.list_files(head)
    moved: dict[bytes, list[str]] = {}
    for path in sorted(b.keys() - a.keys()):
        moved.setdefault(b[path][0], []).append(path)
    skip = set()
    for path in sorted(a.keys() - b.keys()):
        if moved.get(a[path][0]):
            skip |= {path, moved[a[path][0]].pop(0)}
    total = 0
    for path in (a.keys() | b.keys()) - skip:
        old, new = a.get(path), b.get(path)
        if old is not None and new is not None and old[0] == new[0]:
            continue  # the same content (a mode change counts no lines)
        x = git.blob(old[0]) if old is not None else b""
        y = git.blob(new[0]) if new is not None else b""
        if binary(x) or binary(y):
            continue
        count = _line_changes(git_lines(x), git_lines(y))
        if count is None:
            return _numstat(git, base, head)
        total += count
    return total


def _line_changes(x: list[bytes], y: list[bytes]) -> int | None:
    """Lines removed from ``x`` plus lines added in ``y`` (None where difflib would
    weigh more than ``MATCH_MAX`` line pairs: ``textdiff.opcodes``)."""
    codes = opcodes(x, y)
    if codes is None:
        return None
    return sum(i2 - i1 + j2 - j1 for tag, i1, i2, j1, j2 in codes if tag != "equal")


def _numstat(git: GitStore, base: str, head: str) -> int:
    """The count as ``git diff --numstat`` gives it (binary files: none)."""
    out = str(git.repo.git.diff("--numstat", base, head))
    rows = (line.split("\t") for line in out.splitlines())
    return sum(int(r[0]) + int(r[1]) for r in rows if len(r) >= 3 and r[0] != "-")


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
        float(changed_lines(git, parent.commit, node.commit))
        if parent is not None and parent.commit
        else 0.0
    )
    out["drift"] = float(changed_lines(git, root, node.commit)) if root else 0.0
    return out
