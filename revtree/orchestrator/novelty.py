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

Every evaluated node is a possible twin, but ``difflib`` measures only those that the
characters' histograms leave possible (``histogram``: a lower bound of ``distance``,
taken over all nodes in one array operation); measuring each made a run of 5,000
candidates spend most of its time here, more with each candidate.

Refused when the similarity is above ``[search] novelty_threshold`` (1.0: off): the
candidate is ``rejected`` with the error kind ``records.TWIN`` and the twin named; the proposer
sees it in its next prompt (``agents.lessons``). Compared: the baseline and every node
that was or is being evaluated (not failed before its evaluation).

With ``[agents] embeddings_model`` set, a candidate the text check lets through is also
compared by meaning (``ChangeEmbeddings``): each change (the unified diff of the
normalised editable files from the node's parent, cut to ``EMBED_CHARS``) is embedded
once, at the run's ``/embeddings`` endpoint, and a candidate whose change has a cosine
above ``[search] novelty_embeddings_threshold`` with an evaluated node's change is that
node's twin, provided the two codes write the same numbers (by value: ``12.3`` is
``12.30``) and the candidate is nearer that node than its own parent (a text similarity
above 0). The provisos are there because embeddings barely see numbers: two tweaks of
one constant to different values embed almost alike, and must both be tried. So the
embeddings catch a repeat that the text check scores as only partly alike (a number
written otherwise, reformatted, re-spelt, lines reordered), not code that differs
wholly in text but not in behaviour. Changes from different parents differ in the lines
they remove, so they embed less alike: the check errs towards evaluating. An endpoint
that fails turns the embeddings off for the rest of the run, with one warning in the
live log; the text check goes on.
"""

from __future__ import annotations

import difflib
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from revtree import deferred
from revtree.agents.retrieval import Embedder, unit
from revtree.memory import GitStore, Node, NodeStatus
from revtree.orchestrator.mirror import Mirror
from revtree.tasks import TaskSpec, matches

if TYPE_CHECKING:  # numpy is imported on the first comparison, not at start (issue 24:
    # 50-150 ms of every run's start, before its first model request)
    import numpy as np

CHAR_MATCH_LIMIT = 4_000_000  # a replaced block larger (product of lengths): all differ
CACHE = 4096  # normalised files kept, by blob, and commits' texts, by commit
EMBED_CHARS = 8000  # of a change's diff embedded (about 2,000 tokens)
BINS = 128  # of a text's character histogram (``histogram``)


@dataclass(frozen=True)
class Twin:
    """The evaluated node a candidate is too alike to, and how alike."""

    node_id: int
    similarity: float
    threshold: float
    by: str = "text"  # or "embeddings": the cosine of the two changes' embeddings

    def reason(self) -> str:
        how, key = (
            ("embedding similarity of the changes", "novelty_embeddings_threshold")
            if self.by == "embeddings"
            else ("similarity", "novelty_threshold")
        )
        return (
            f"not evaluated: a near twin of node {self.node_id} ({how} "
            f"{self.similarity:.3f} > {key} {self.threshold:g}), whose code "
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


NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")


def numbers(lines: list[str]) -> Counter[float]:
    """The numbers written in a text, by value (``12.3`` and ``12.30`` are one)."""
    return Counter(float(m) for line in lines for m in NUMBER.findall(line))


def histogram(lines: list[str]) -> np.ndarray:
    """How many of each character ``lines`` hold (all past ASCII in one count): the
    histograms' L1 distance is a lower bound of ``distance``, as a match pairs only equal
    characters and equal lines match whole (counting several characters as one keeps it
    one). It rules out, all at once, the nodes too far apart to be twins."""
    np = deferred.numpy()
    data = np.frombuffer("".join(lines).encode("latin-1", "replace"), np.uint8)
    return np.bincount(np.minimum(data, BINS - 1), minlength=BINS).astype(np.int32)


def similarity(candidate: list[str], parent: list[str], other: list[str]) -> float:
    """How much of the candidate's change from its parent ``other`` has already, in
    [0, 1]; 1 for a candidate that is its parent once normalised."""
    change = distance(candidate, parent)
    if change == 0:
        return 1.0
    return max(0.0, 1.0 - distance(candidate, other) / change)


class ChangeEmbeddings:
    """The embeddings of the run's changes, by node (thread-safe); off for good once the
    endpoint fails, after telling ``warn`` why."""

    def __init__(self, embedder: Embedder, threshold: float, warn: Callable[[str], None]) -> None:
        self.embedder, self.threshold, self.warn = embedder, threshold, warn
        self.error: str | None = None
        self._vectors: dict[int, list[float]] = {}
        self._lock = threading.Lock()
        self._calls = threading.Lock()  # one embedding call at a time

    def of(self, changes: dict[int, Callable[[], str]]) -> dict[int, list[float]] | None:
        """The unit vector of each node's change (``changes``: node -> its diff, made
        only where not embedded yet), or None when the embeddings are off. One call at a
        time: candidates reviewed at once do not embed the same nodes twice."""
        with self._calls:
            if self.error is not None:
                return None
            with self._lock:
                missing = [n for n in changes if n not in self._vectors]
            if missing:
                try:
                    found = self.embedder.embed([changes[n]()[:EMBED_CHARS] for n in missing])
                    vectors = [unit(v) for v in found]
                    sizes = {len(v) for v in vectors} | {len(v) for v in self._vectors.values()}
                    if len(vectors) != len(missing) or len(sizes) > 1:
                        raise ValueError(
                            f"vectors of sizes {sorted(sizes)} for {len(missing)} texts"
                        )
                except Exception as e:  # the endpoint's failure is not the candidate's
                    self.error = f"{type(e).__name__}: {e}"[:300]
                    self.warn(
                        "the novelty check's embeddings are off for the rest of the run "
                        f"(the text check goes on): {self.error}"
                    )
                    return None
                with self._lock:
                    self._vectors.update(zip(missing, vectors, strict=True))
            with self._lock:
                return {n: self._vectors[n] for n in changes}


class Novelty:
    """The near-twin check of one run (thread-safe; files cached by blob)."""

    def __init__(
        self,
        spec: TaskSpec,
        git: GitStore,
        mirror: Mirror,
        embeddings: ChangeEmbeddings | None = None,
    ) -> None:
        self.threshold, self.editable = spec.search.novelty_threshold, spec.editable
        self.git, self.mirror, self.embeddings = git, mirror, embeddings
        self._lines: dict[bytes, list[str]] = {}
        self._texts: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._rows: dict[str, int] = {}  # commit -> its row of ``_counts``
        self._commits: list[str] = []  # row -> its commit
        self._unfilled: set[int] = set()  # rows whose histogram is still to make
        self._counts: np.ndarray | None = None  # each compared commit's ``histogram``
        self._compared: dict[int, int] = {}  # node -> its commit's row: those compared
        mirror.watch(self._saw)

    def twin(self, node: Node) -> Twin | None:
        """The evaluated node ``node`` is a near twin of (by text: the most alike, then
        the lowest id; else by embeddings, the same), or None; None always when both
        checks are off."""
        parent = self.mirror.parent(node)
        off = self.threshold >= 1.0 and self.embeddings is None
        if off or node.commit is None or parent.commit is None:
            return None
        mine, theirs = self.text(node.commit), self.text(parent.commit)
        change = distance(mine, theirs)
        if change == 0:  # only blank lines or trailing spaces changed
            return Twin(parent.id, 1.0, self.threshold) if self.threshold < 1.0 else None
        skip = (node.id, node.parent_id)
        found = self._text_twin(mine, change, skip) if self.threshold < 1.0 else None
        if found is None and self.embeddings is not None:
            found = self._embedding_twin(node, mine, change, self._evaluated(skip))
        return found

    def _saw(self, node: Node) -> None:
        """Keep ``_compared`` (under the mirror's lock): the baseline and every node that
        was or is being evaluated, with its commit's row (its histogram made later,
        outside the lock: ``_fill``)."""
        if node.commit is not None and (
            node.n_evals > 0 or node.status in _EVALUATED or node.id == 0
        ):
            with self._lock:
                row = self._rows.get(node.commit)
                if row is None:
                    row = self._rows[node.commit] = len(self._commits)
                    self._commits.append(node.commit)
                    self._unfilled.add(row)
            self._compared[node.id] = row
        else:
            self._compared.pop(node.id, None)

    def _fill(self) -> None:
        """Make the histograms of the rows that have none yet."""
        np = deferred.numpy()

        with self._lock:
            todo = [(row, self._commits[row]) for row in self._unfilled]
        for row, commit in todo:
            counts = histogram(self.text(commit))
            with self._lock:
                if self._counts is None:
                    self._counts = np.zeros((max(64, 2 * len(self._commits)), BINS), np.int32)
                while row >= len(self._counts):
                    self._counts = np.concatenate([self._counts, np.zeros_like(self._counts)])
                self._counts[row] = counts
                self._unfilled.discard(row)

    def _text_twin(self, mine: list[str], change: int, skip: tuple[int, int | None]) -> Twin | None:
        slack = (1.0 - self.threshold) * change
        best: Twin | None = None
        for other in self._near(mine, slack, skip):
            text = self.text(other.commit or "")
            alike = max(0.0, 1.0 - distance(mine, text) / change)
            if alike > self.threshold and (best is None or alike > best.similarity):
                best = Twin(other.id, alike, self.threshold)
        return best

    def _near(self, mine: list[str], slack: float, skip: tuple[int, int | None]) -> list[Node]:
        """The compared nodes (but ``skip``) that may be within ``slack`` of ``mine``, in id
        order: those whose histogram is (``histogram``; one array operation over all,
        from an index the mirror keeps: ``distance`` over each, then a pass over every
        node per candidate, made a run of thousands of candidates slower with each).
        numpy is imported only once there is a node to compare: not for a candidate whose
        only evaluated node is its parent, as the run's first one at ``parallel`` 1 (at
        more, its siblings evaluating are compared, and the first that is imports it)."""
        with self.mirror.lock:  # (by count: no pass over the nodes per candidate)
            if len(self._compared) <= len({i for i in skip if i in self._compared}):
                return []
        np = deferred.numpy()

        with self.mirror.lock:
            ids = np.fromiter(self._compared.keys(), np.int64, len(self._compared))
            rows = np.fromiter(self._compared.values(), np.int64, len(self._compared))
        self._fill()
        if not len(rows):
            return []
        with self._lock:
            assert self._counts is not None  # made by _fill for the first row
            counts = self._counts[rows]
        bound = np.abs(counts - histogram(mine)).sum(axis=1)
        near = ids[bound < slack]
        near = np.sort(near[~np.isin(near, [i for i in skip if i is not None])])
        found = [self.mirror.get(i) for i in near.tolist()]
        return [n for n in found if n.commit is not None]  # (a retry may have reset one)

    def _embedding_twin(
        self, node: Node, mine: list[str], change: int, others: list[Node]
    ) -> Twin | None:
        assert self.embeddings is not None
        changed = [o for o in others if o.parent_id is not None]  # the baseline has none
        vectors = self.embeddings.of({n.id: self._diff_of(n) for n in [node, *changed]})
        if vectors is None:
            return None
        limit, best = self.embeddings.threshold, None
        for other in changed:
            cosine = sum(a * b for a, b in zip(vectors[node.id], vectors[other.id], strict=True))
            if cosine <= limit or (best is not None and cosine <= best.similarity):
                continue
            text = self.text(other.commit or "")
            if distance(mine, text) < change and numbers(mine) == numbers(text):
                best = Twin(other.id, min(cosine, 1.0), limit, "embeddings")
        return best

    def _diff_of(self, node: Node) -> Callable[[], str]:
        """The change of ``node`` from its parent as embedded: a unified diff of the
        normalised editable files (made when called)."""

        def diff() -> str:
            parent = self.mirror.parent(node)
            before, after = self.text(parent.commit or ""), self.text(node.commit or "")
            return "\n".join(difflib.unified_diff(before, after, lineterm="", n=3)) or "="

        return diff

    def _evaluated(self, skip: tuple[int, int | None]) -> list[Node]:
        """The compared nodes but ``skip``, in id order."""
        with self.mirror.lock:
            return [self.mirror.get(i) for i in sorted(self._compared) if i not in skip]

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


def change_embeddings(spec: TaskSpec, warn: Callable[[str], None]) -> ChangeEmbeddings | None:
    """The embeddings of the run's changes where models drive the run, ``[agents]
    embeddings_model`` is set and ``[search] novelty_embeddings_threshold`` is below 1,
    else None (an offline run sends no code to an endpoint: its candidates differ in
    numbers, which the embeddings never call twins anyway)."""
    from revtree.agents.driver import driver
    from revtree.agents.retrieval import make_embedder

    a, limit = spec.agents, spec.search.novelty_embeddings_threshold
    if limit >= 1 or not a.embeddings_model or not driver(spec).llm:
        return None
    embedder = make_embedder(a.embeddings_model, a.base_url, a.api_key_env)
    return None if embedder is None else ChangeEmbeddings(embedder, limit, warn)
