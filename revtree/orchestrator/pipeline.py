"""The candidate pipeline as a LangGraph ``StateGraph``.

    select -> propose -> code -> review -> evaluate -> record

Each step reads the node from the orchestrator's mirror of the SQL memory and is
idempotent: a step whose work is already stored does nothing. The graph state is
tiny (the ticket, the node id and the outcome), so a LangGraph checkpoint costs
little; after a crash the thread resumes at the step that was running.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, Protocol, TypedDict

from langgraph.graph import END, START, StateGraph

STEPS = ("select", "propose", "code", "review", "evaluate", "record")


class CandidateState(TypedDict, total=False):
    ticket: str
    node_id: int | None
    outcome: dict[str, Any] | None


class Steps(Protocol):
    def run_step(self, step: str, state: CandidateState) -> dict[str, Any]: ...

    def candidate_done(self, state: CandidateState) -> bool: ...


def build_pipeline(steps: Steps, checkpointer: Any) -> Any:
    """Compile the pipeline graph; each step calls ``steps.run_step(name, state)``."""
    graph: StateGraph[CandidateState] = StateGraph(CandidateState)
    for name in STEPS:
        graph.add_node(name, _bind(steps, name))  # type: ignore[call-overload]
    graph.add_edge(START, "select")
    for here, nxt in itertools.pairwise(STEPS):
        graph.add_conditional_edges(here, _router(steps, nxt), {nxt: nxt, END: END})
    graph.add_edge("record", END)
    return graph.compile(checkpointer=checkpointer)


def _bind(steps: Steps, name: str) -> Callable[[CandidateState], dict[str, Any]]:
    def step(state: CandidateState) -> dict[str, Any]:
        return steps.run_step(name, state)

    step.__name__ = name
    return step


def _router(steps: Steps, nxt: str) -> Callable[[CandidateState], str]:
    def route(state: CandidateState) -> str:
        return END if steps.candidate_done(state) else nxt

    return route
