"""The proposer's memory (``agents.lessons.render_memory``): the candidates in flight are
listed with their hypotheses, apart from the lessons of finished nodes."""

from __future__ import annotations

from revtree.agents.lessons import render_memory
from revtree.memory.records import Node, NodeStatus


def node(i: int, status: NodeStatus, hypothesis: str, score: float | None = None) -> Node:
    return Node(
        "r",
        i,
        None if i == 0 else 0,
        "improve",
        status,
        score=score,
        proposal={"hypothesis": hypothesis},
    )


def test_candidates_in_flight_are_listed_once_and_never_as_lessons() -> None:
    nodes = {0: node(0, NodeStatus.SUCCEEDED, "baseline", 1.0)}
    nodes[1] = node(1, NodeStatus.SUCCEEDED, "unroll the sorting loop", 2.0)
    for i in range(2, 8):  # six in flight, all about the sorting loop
        nodes[i] = node(i, NodeStatus.EVALUATING, f"vectorise the sorting loop, try {i}")
    text = render_memory(nodes, 0, True, 4000, "sorting loop", own=7)
    flying, _, rest = text.partition("In flight")[2].partition("\n\n")
    assert [i for i in range(2, 8) if f"node {i} " in flying] == [4, 5, 6]  # the last 3
    assert "no score yet" not in rest and "node 2 " not in text  # not as a lesson
    assert "Related lessons" not in text or "in flight" not in text.split("Related")[1]


def test_the_best_are_ranked_as_the_search_ranks_them() -> None:
    """The "Best so far" section orders by the float a node's ``Score`` orders by: an
    alarmed, infinite or NaN score ranks worst, a minimised metric by its negation; the
    order of equals is the nodes' own (a stable sort)."""
    import dataclasses
    import itertools
    import math

    scores = [3.0, -2.0, 0.5, math.inf, -math.inf, math.nan, 3.0, 1e300]
    for maximize, alarmed in itertools.product((True, False), (None, 2, 4)):
        nodes = {0: node(0, NodeStatus.SUCCEEDED, "baseline", 1.0)}
        for i, s in enumerate(scores, 1):
            n = node(i, NodeStatus.SUCCEEDED, f"idea {i}", s)
            nodes[i] = dataclasses.replace(n, alarm={"kind": "rank"} if i == alarmed else None)
        for n in nodes.values():
            assert n.rank(maximize) == n.score_of(maximize)._key() or (
                math.isinf(n.rank(maximize)) and not n.score_of(maximize).is_valid
            ), n
        ranked = sorted(nodes.values(), key=lambda n: n.score_of(maximize), reverse=True)
        want = [n.id for n in ranked[:3]]
        text = render_memory(nodes, 0, maximize, 4000, "")
        best = text.partition("Best so far:\n")[2].partition("\n\n")[0].splitlines()
        assert [int(line.split()[2]) for line in best] == want, (maximize, alarmed, best)


# -- the index a run keeps (``Memory``) against a prompt built from every node -----------
def rebuilt(
    nodes: dict[int, Node], parent_id: int, maximize: bool, budget: int, query: str, own: int
) -> str:
    """The memory section as it was made before ``Memory``: one pass over every node per
    prompt (the oracle the kept index must agree with)."""
    import heapq

    from revtree.agents.lessons import _words, lesson_for
    from revtree.agents.llm.base import estimate_tokens
    from revtree.memory.records import TWIN

    if budget <= 0:
        return "(memory disabled)"
    parent = nodes.get(parent_id)
    near = {parent_id, parent.parent_id if parent is not None else None}
    lesson: dict[int, str] = {}
    good, flying, twins, fails = [], [], [], []
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
    best = heapq.nlargest(3, good, key=lambda n: n.rank(maximize))
    sections = [("Best so far", [n.id for n in best])]
    said_flying = {
        n.id: lesson_for(n, None, maximize, "in flight, no score yet") for n in flying[-3:]
    }
    sections.append(("In flight (proposed beside this one, not scored yet)", [*said_flying]))
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
    sections.append(("Related lessons", heapq.nlargest(5, overlap, key=lambda i: (overlap[i], i))))
    out, left, said = [], budget, lesson | said_flying
    for title, ids in sections:
        lines = [f"- {said[i]}" for i in ids if i in said]
        if not lines:
            continue
        block = "\n".join([f"{title}:", *lines])
        if estimate_tokens(block) > left:
            block = block[: max(0, left * 4 - len(title) - 2)]
            if not block:
                break
        out.append(block)
        left -= estimate_tokens(block)
    return "\n\n".join(out) or "(nothing yet: this is one of the first rounds)"


def test_the_kept_index_says_what_every_node_read_again_says() -> None:
    """A run's ``Memory``, fed each node as it changes (added, finished, scored again by
    a verification, alarmed, retried, an older record with no stored lesson whose parent's
    score moves), renders what a prompt built from all the nodes renders, after each
    change, for parents and queries across the tree."""
    import dataclasses
    import math
    import random

    from revtree.agents.lessons import Memory
    from revtree.memory.records import TWIN

    words = ["unroll", "loop", "cache", "vectorise", "sort", "merge", "tile", "prefetch"]
    statuses = list(NodeStatus)
    for seed in range(12):
        rng = random.Random(seed)
        maximize = seed % 2 == 0
        nodes = {0: node(0, NodeStatus.SUCCEEDED, "baseline", 1.0)}
        memory = Memory(nodes, maximize)
        for _ in range(160):
            if rng.random() < 0.45 or len(nodes) < 3:
                i = max(nodes) + 1
                parent = rng.choice(list(nodes))
                hyp = " ".join(rng.sample(words, rng.randint(1, 3)))
                new = dataclasses.replace(
                    node(i, NodeStatus.PENDING, hyp), parent_id=parent, operator="improve"
                )
                if rng.random() < 0.3:
                    new = dataclasses.replace(new, proposal=None)
            else:
                old = nodes[rng.choice(list(nodes))]
                status = rng.choice(statuses)
                score = rng.choice([None, rng.uniform(-5, 5), math.inf, math.nan, 2.0])
                new = dataclasses.replace(
                    old,
                    status=status,
                    score=score,
                    alarm={"kind": "drift"} if rng.random() < 0.1 else None,
                    error_kind=TWIN if rng.random() < 0.15 else None,
                    error=rng.choice([None, "timed out", "crashed in sort"]),
                    lesson=None if rng.random() < 0.4 else f"node {old.id}: {rng.choice(words)}",
                )
            nodes[new.id] = new
            memory.update(new)
            for _ in range(3):
                parent_id = rng.choice(list(nodes))
                own = rng.choice(list(nodes))
                query = rng.choice(["", "improve", "loop cache", "sort merge tile"])
                budget = rng.choice([0, 60, 4000])
                want = rebuilt(nodes, parent_id, maximize, budget, query, own)
                got = memory.render(parent_id, budget, query, own)
                assert got == want, (seed, parent_id, own, query)
                assert render_memory(nodes, parent_id, maximize, budget, query, own) == want
