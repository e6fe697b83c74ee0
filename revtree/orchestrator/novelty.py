"""Novelty before evaluation: a candidate whose code is a near twin of code already
evaluated in the run is refused before it reaches a sandbox.

The measure (``similarity``): the editable files of each commit, as lines with their
trailing spaces cut and blank lines left out (leading spaces kept: they are Python's
syntax), are compared with ``difflib``; ``distance`` counts the characters that differ
(the lines one side has and the other lacks, and within a replaced block of lines the
characters a character-level match leaves over). A candidate C made from parent P is
``1 - distance(C, E) / distance(C, P)`` alike to an evaluated node E: the share of its
change that E has already. Relative to the change, so a one-line edit of a long file
is not a twin of its parent (whole-text ratios would call it 99.9% alike), and a
small deliberate tweak (a constant) is never a twin of another tweak: their difference
is the whole of each change. A candidate alike to its parent once normalised (it only
changed blank lines or trailing spaces) is its parent's twin.

Refused when the similarity is above ``[search] novelty_threshold`` (1.0: off): the
candidate is ``rejected`` with the error kind ``records.TWIN`` and the twin named; the proposer
sees it in its next prompt (``agents.lessons``). Compared: the baseline and every node
that was or is being evaluated (not failed before its evaluation). Not covered: code
that differs in text but not in behaviour (renamed variables, reordered functions).
"""

from __future__ import annotations

import difflib
import threading
from dataclasses import dataclass

from revtree.memory import GitStore, Node, NodeStatus
from revtree.orchestrator.mirror import Mirror
from revtree.tasks import TaskSpec, matches

CHAR_MATCH_LIMIT = 4_000_000  # a replaced block larger (product of lengths): all differ
CACHE = 4096  # normalised files kept, by blob, and commits' texts, by commit


@dataclass(frozen=True)
class Twin:
    """The evaluated node a candidate is too alike to, and how alike."""

    node_id: int
    similarity: float
    threshold: float

    def reason(self) -> str:
        return (
            f"not evaluated: a near twin of node {self.node_id} (similarity "
            f"{self.similarity:.3f} > novelty_threshold {self.threshold:g}), whose code "
            "is evaluated already; propose something different"
        )


def normalise(text: str) -> list[str]:
    """A file's lines as compared: trailing spaces cut, blank lines left out."""
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def distance(a: list[str], b: list[str]) -> int:
    """Characters that differ between two texts given as lines (see the module)."""
    out = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        x, y = "\n".join(a[i1:i2]), "\n".join(b[j1:j2])
        if tag == "replace" and len(x) * len(y) <= CHAR_MATCH_LIMIT:
            chars = difflib.SequenceMatcher(None, x, y, autojunk=False)
            out += len(x) + len(y) - 2 * sum(m.size for m in chars.get_matching_blocks())
        else:
            out += len(x) + len(y)
    return out


def similarity(candidate: list[str], parent: list[str], other: list[str]) -> float:
    """How much of the candidate's change from its parent ``other`` has already, in
    [0, 1]; 1 for a candidate that is its parent once normalised."""
    change = distance(candidate, parent)
    if change == 0:
        return 1.0
    return max(0.0, 1.0 - distance(candidate, other) / change)


class Novelty:
    """The near-twin check of one run (thread-safe; files cached by blob)."""

    def __init__(self, spec: TaskSpec, git: GitStore, mirror: Mirror) -> None:
        self.threshold, self.editable = spec.search.novelty_threshold, spec.editable
        self.git, self.mirror = git, mirror
        self._lines: dict[bytes, list[str]] = {}
        self._texts: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def twin(self, node: Node) -> Twin | None:
        """The evaluated node ``node`` is a near twin of (the most alike, then the
        lowest id), or None; None always when the check is off."""
        parent = self.mirror.parent(node)
        if self.threshold >= 1.0 or node.commit is None or parent.commit is None:
            return None
        mine, theirs = self.text(node.commit), self.text(parent.commit)
        change = distance(mine, theirs)
        if change == 0:
            return Twin(parent.id, 1.0, self.threshold)
        slack = (1.0 - self.threshold) * change
        best: Twin | None = None
        for other in self._evaluated(node):
            text = self.text(other.commit or "")
            if abs(_size(text) - _size(mine)) > 2 * slack + abs(len(text) - len(mine)) + 1:
                continue  # too far apart in size to be alike enough
            alike = max(0.0, 1.0 - distance(mine, text) / change)
            if alike > self.threshold and (best is None or alike > best.similarity):
                best = Twin(other.id, alike, self.threshold)
        return best

    def _evaluated(self, node: Node) -> list[Node]:
        nodes = self.mirror.copy().values()
        return sorted(
            (
                n
                for n in nodes
                if n.id not in (node.id, node.parent_id)
                and n.commit is not None
                and (n.id == 0 or n.n_evals > 0 or n.status in _EVALUATED)
            ),
            key=lambda n: n.id,
        )

    def text(self, commit: str) -> list[str]:
        """The editable files of ``commit``, normalised, each under its path (cached:
        commits are immutable; the lines are the blobs' own, shared)."""
        with self._lock:
            cached = self._texts.get(commit)
        if cached is None:
            cached = []
            for path, (blob, _) in sorted(self.git.list_files(commit).items()):
                if matches(path, self.editable):
                    cached += [f"--- {path}", *self._normalised(blob)]
            with self._lock:
                if len(self._texts) >= CACHE:
                    self._texts.clear()
                self._texts[commit] = cached
        return cached

    def _normalised(self, blob: bytes) -> list[str]:
        with self._lock:
            cached = self._lines.get(blob)
        if cached is None:
            cached = normalise(self.git.blob(blob).decode("utf-8", "replace"))
            with self._lock:
                if len(self._lines) >= CACHE:
                    self._lines.clear()
                self._lines[blob] = cached
        return cached


_EVALUATED = (NodeStatus.SUCCEEDED, NodeStatus.EVALUATING)


def _size(lines: list[str]) -> int:
    return sum(len(s) for s in lines)
