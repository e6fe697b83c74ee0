"""Memory for prompts: a lesson per finished node, and the selection a proposer sees.

A lesson is one line: what was tried, from where, and what came of it (score delta
or failure reason). The proposer gets, within a token budget and in this order: the
best nodes, the candidates in flight with their hypotheses (proposed, not scored yet:
so the proposer does not propose the same again beside them), the latest candidates
refused as near twins of evaluated code (so the proposer knows not to repeat them), the
ancestry of the parent, recent failures near
the parent, and the lessons most related to the parent's line of work (lexical
overlap; no embeddings).
"""

from __future__ import annotations

import functools
import heapq
import re
from array import array
from collections.abc import Mapping

from revtree import deferred
from revtree.agents.llm.base import estimate_tokens
from revtree.memory.records import TWIN, Node, NodeStatus, directed

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_STOP = frozenset(
    ["the", "and", "for", "with", "from", "that", "this", "into", "than", "then", "when", "node"]
)


def lesson_for(node: Node, parent: Node | None, maximize: bool, outcome: str = "") -> str:
    """One line of memory for a finished node (``outcome``: said instead of its own)."""
    idea = ((node.proposal or {}).get("hypothesis") or node.operator).strip().splitlines()
    what = idea[0][:200] if idea else node.operator
    where = f"node {node.id} ({node.operator} of node {node.parent_id})"
    if outcome:
        return f"{where}: {what} -> {outcome}"
    if node.status is NodeStatus.SUCCEEDED and node.score is not None:
        outcome = f"scored {node.score:.6g}"
        if (
            parent is not None
            and parent.status is NodeStatus.SUCCEEDED
            and parent.score is not None
        ):
            delta = node.score - parent.score
            better = directed(delta, maximize) > 0
            verdict = "better" if better else "worse" if delta else "no change"
            outcome += f" ({delta:+.4g} vs parent: {verdict})"
    else:
        outcome = f"{node.status.value}: {(node.error or 'no reason recorded')[:200]}"
    return f"{where}: {what} -> {outcome}"


@functools.lru_cache(maxsize=1 << 15)
def _words(text: str) -> frozenset[str]:
    """The words of a lesson, as related lessons are matched (kept: every prompt reads
    every lesson of the run)."""
    return frozenset(w.lower() for w in _WORD.findall(text)) - _STOP


def render_memory(
    nodes: Mapping[int, Node],
    parent_id: int,
    maximize: bool,
    budget_tokens: int,
    query: str = "",
    own: int | None = None,
) -> str:
    """The memory section of a proposer prompt from the run's nodes, at most
    ``budget_tokens`` long (``own``: the candidate's node, not shown among those in
    flight, nor is its parent). A run keeps a :class:`Memory` instead, fed as its nodes
    change: this builds one for a single prompt."""
    return Memory(nodes, maximize).render(parent_id, budget_tokens, query, own)


class Memory:
    """What the proposer's memory shows, kept as the run's nodes change (``update``):
    reading every node per prompt made a run of thousands of candidates slower with
    each. What a prompt still does over the whole run is array work (counting the
    related lessons' shared words in numpy). ``nodes`` is the run's live map, read and
    updated under its owner's lock."""

    def __init__(self, nodes: Mapping[int, Node], maximize: bool) -> None:
        self.nodes, self.maximize = nodes, maximize
        self._seen: dict[int, Node] = {}  # each node as last indexed
        self._lesson: dict[int, str] = {}  # finished nodes: stored, or derived (older records)
        self._derived: dict[int, set[int]] = {}  # parent -> children whose lesson reads it
        self._words: dict[str, array[int]] = {}  # word -> the nodes whose lesson has it
        self._good: dict[int, tuple[float, int]] = {}  # succeeded with a score: its order
        self._top: list[int] | None = []  # the best three of ``_good`` (None: to find)
        self._open: set[int] = set()  # not finished
        self._twins: set[int] = set()
        self._failed: dict[int | None, set[int]] = {}  # parent -> failed children
        for node in nodes.values():
            self.update(node)

    def update(self, node: Node) -> None:
        """Index ``node`` as it stands now in ``nodes`` (added or changed)."""
        self._index(node)
        for child in list(self._derived.get(node.id, ())):  # their lessons say its score
            self._index(self.nodes[child])

    def _index(self, node: Node) -> None:
        self._forget(node.id)
        self._seen[node.id] = node
        i = node.id
        if not node.status.is_finished():
            self._open.add(i)
        else:
            if node.lesson:
                self._learn(i, node.lesson)
            else:
                self._derived.setdefault(node.parent_id or -1, set()).add(i)
                self._learn(
                    i, lesson_for(node, self.nodes.get(node.parent_id or -1), self.maximize)
                )
            if node.status is NodeStatus.SUCCEEDED:
                if node.score is not None:
                    self._good[i] = key = (node.rank(self.maximize), -i)
                    top = self._top
                    if top is not None and (len(top) < 3 or key > self._good[top[-1]]):
                        self._top = heapq.nlargest(3, [*top, i], key=self._good.__getitem__)
            else:
                self._failed.setdefault(node.parent_id, set()).add(i)
            if node.error_kind == TWIN:
                self._twins.add(i)

    def _forget(self, i: int) -> None:
        old = self._seen.pop(i, None)
        if old is None:
            return
        self._open.discard(i)
        self._twins.discard(i)
        self._failed.get(old.parent_id, set()).discard(i)
        self._derived.get(old.parent_id or -1, set()).discard(i)
        if self._good.pop(i, None) is not None and self._top is not None and i in self._top:
            self._top = None
        text = self._lesson.pop(i, None)
        if text is not None:
            for word in _words(text):
                self._words[word].remove(i)

    def _learn(self, i: int, text: str) -> None:
        self._lesson[i] = text
        for word in _words(text):
            self._words.setdefault(word, array("q")).append(i)

    def render(
        self, parent_id: int, budget_tokens: int, query: str = "", own: int | None = None
    ) -> str:
        """The memory section of a proposer prompt (``render_memory``)."""
        if budget_tokens <= 0:
            return "(memory disabled)"
        nodes, lesson = self.nodes, self._lesson
        parent = nodes.get(parent_id)
        if self._top is None:
            self._top = heapq.nlargest(3, self._good, key=self._good.__getitem__)
        sections: list[tuple[str, list[int]]] = [("Best so far", list(self._top))]
        flying = [i for i in sorted(self._open) if nodes[i].proposal and i not in (own, parent_id)]
        shown_flying = {
            i: lesson_for(nodes[i], None, self.maximize, "in flight, no score yet")
            for i in flying[-3:]
        }
        sections.append(("In flight (proposed beside this one, not scored yet)", [*shown_flying]))
        sections.append(
            ("Refused as repeats of code already evaluated", heapq.nlargest(3, self._twins))
        )
        chain, cur = [], parent
        while cur is not None and cur.parent_id is not None:
            chain.append(cur.id)
            cur = nodes.get(cur.parent_id)
        sections.append(
            ("Ancestry of the parent (nearest first)", [i for i in chain if i in lesson])
        )
        near = {parent_id, parent.parent_id if parent is not None else None}
        fails = set().union(*(self._failed.get(p, ()) for p in near))
        sections.append(("Recent failures near the parent", heapq.nlargest(3, fails)))
        hypothesis = ((parent.proposal or {}).get("hypothesis") or "") if parent is not None else ""
        q = _words(query + " " + hypothesis if parent is not None else query)
        shown = {i for _, ids in sections for i in ids}
        sections.append(("Related lessons", self._related(q, shown)))
        out, left = [], budget_tokens
        for title, ids in sections:
            said = (shown_flying.get(i) or lesson.get(i) for i in ids)
            lines = [f"- {text}" for text in said if text is not None]
            if not lines:
                continue
            block = "\n".join([f"{title}:", *lines])
            if estimate_tokens(block) > left:
                keep = max(0, left * 4 - len(title) - 2)
                block = block[:keep]
                if not block:
                    break
            out.append(block)
            left -= estimate_tokens(block)
        return "\n\n".join(out) or "(nothing yet: this is one of the first rounds)"

    def _related(self, q: frozenset[str], shown: set[int]) -> list[int]:
        """The five lessons not ``shown`` that share the most words with ``q`` (ties: the
        later first), counted over the lessons that have each word (in numpy: a common
        word is in every lesson). numpy is imported only once there is something to
        count: not at start, nor while no node has a lesson (the run's first candidates,
        whose prompts are made beside each other: a 50-100 ms import on their path)."""
        postings = [self._words[w] for w in q if self._words.get(w)]
        if not postings:
            return []
        np = deferred.numpy()

        # copies: a view of an array would keep it from growing while it lives
        found = [np.array(p, dtype=np.int64) for p in postings]
        ids = np.concatenate(found)
        counts = np.bincount(ids)
        if shown:
            gone = np.fromiter((i for i in shown if i < len(counts)), dtype=np.int64)
            counts[gone] = 0
        have = np.flatnonzero(counts)
        if len(have) > 5:  # by count, then id: both in one integer
            order = counts[have].astype(np.int64) * len(counts) + have
            have = have[np.argpartition(order, -5)[-5:]]
        return sorted(have.tolist(), key=lambda i: (counts[i], i), reverse=True)
