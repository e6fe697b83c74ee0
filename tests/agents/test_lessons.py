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
