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
