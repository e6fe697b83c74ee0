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
from collections.abc import Mapping

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
    """The memory section of a proposer prompt, at most ``budget_tokens`` long (``own``:
    the candidate's node, not shown among those in flight, nor is its parent)."""
    if budget_tokens <= 0:
        return "(memory disabled)"
    parent = nodes.get(parent_id)
    near = {parent_id, parent.parent_id if parent is not None else None}
    # one pass over the run's nodes (a prompt is made per candidate: several passes made
    # a run of thousands of candidates slower with each)
    lesson: dict[int, str] = {}  # stored when a node finished; derived for older records
    good: list[Node] = []
    flying: list[Node] = []  # what the candidates in flight try (no outcome yet)
    twins: list[int] = []
    fails: list[int] = []
    for n in nodes.values():
        if not n.status.is_finished():
            if n.proposal and n.id not in (own, parent_id):
                flying.append(n)
            continue
        lesson[n.id] = n.lesson or lesson_for(n, nodes.get(n.parent_id or -1), maximize)
        if n.status is NodeStatus.SUCCEEDED:
            if n.score is not None:
                good.append(n)
        elif n.parent_id in near:
            fails.append(n.id)
        if n.error_kind == TWIN:
            twins.append(n.id)
    sections: list[tuple[str, list[int]]] = []
    # stable, as a sort; by floats (a Score per node, compared in Python, was a third of
    # a prompt's memory in a run of thousands)
    best = heapq.nlargest(3, good, key=lambda n: n.rank(maximize))
    sections.append(("Best so far", [n.id for n in best]))
    shown_flying = {
        n.id: lesson_for(n, None, maximize, "in flight, no score yet") for n in flying[-3:]
    }
    sections.append(("In flight (proposed beside this one, not scored yet)", [*shown_flying]))
    sections.append(("Refused as repeats of code already evaluated", twins[-3:][::-1]))
    chain, cur = [], parent
    while cur is not None and cur.parent_id is not None:
        chain.append(cur.id)
        cur = nodes.get(cur.parent_id)
    sections.append(("Ancestry of the parent (nearest first)", [i for i in chain if i in lesson]))
    sections.append(("Recent failures near the parent", fails[-3:][::-1]))
    hypothesis = ((parent.proposal or {}).get("hypothesis") or "") if parent is not None else ""
    q = _words(query + " " + hypothesis if parent is not None else query)
    shown = {i for _, ids in sections for i in ids}
    overlap = {
        i: len(q & words)
        for i, text in lesson.items()
        if i not in shown and not q.isdisjoint(words := _words(text))
    }
    related = heapq.nlargest(5, overlap, key=lambda i: (overlap[i], i))
    sections.append(("Related lessons", related))
    flying_said = shown_flying
    out, left, said = [], budget_tokens, lesson | flying_said
    for title, ids in sections:
        lines = [f"- {said[i]}" for i in ids if i in said]
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
