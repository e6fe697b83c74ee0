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
    done = [n for n in nodes.values() if n.status.is_finished()]
    lesson = {  # stored when the node finished; derived only for older records
        n.id: n.lesson or lesson_for(n, nodes.get(n.parent_id or -1), maximize) for n in done
    }
    sections: list[tuple[str, list[int]]] = []
    good = [n for n in done if n.status is NodeStatus.SUCCEEDED and n.score is not None]
    best = heapq.nlargest(3, good, key=lambda n: n.score_of(maximize))  # stable, as a sort
    sections.append(("Best so far", [n.id for n in best]))
    flying = {  # what the candidates in flight try (never a lesson: no outcome yet)
        n.id: lesson_for(n, None, maximize, "in flight, no score yet")
        for n in nodes.values()
        if not n.status.is_finished() and n.proposal and n.id not in (own, parent_id)
    }
    sections.append(("In flight (proposed beside this one, not scored yet)", [*flying][-3:]))
    twins = [n.id for n in done if n.error_kind == TWIN]
    sections.append(("Refused as repeats of code already evaluated", twins[-3:][::-1]))
    chain, cur = [], nodes.get(parent_id)
    while cur is not None and cur.parent_id is not None:
        chain.append(cur.id)
        cur = nodes.get(cur.parent_id)
    sections.append(("Ancestry of the parent (nearest first)", [i for i in chain if i in lesson]))
    near = {parent_id, nodes[parent_id].parent_id if parent_id in nodes else None}
    fails = [n.id for n in done if n.status is not NodeStatus.SUCCEEDED and n.parent_id in near]
    sections.append(("Recent failures near the parent", fails[-3:][::-1]))
    q = _words(
        query + " " + ((nodes[parent_id].proposal or {}).get("hypothesis") or "")
        if parent_id in nodes
        else query
    )
    shown = {i for _, ids in sections for i in ids}
    overlap = {i: len(q & _words(text)) for i, text in lesson.items() if i not in shown}
    related = heapq.nlargest(5, (i for i in overlap if overlap[i]), key=lambda i: (overlap[i], i))
    sections.append(("Related lessons", related))
    out, left, said = [], budget_tokens, lesson | flying
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
