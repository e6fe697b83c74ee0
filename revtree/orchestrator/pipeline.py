"""The candidate pipeline as a LangGraph ``StateGraph``: the graph is the controller.

    select ─► propose ─► code ─► review ─► approve ─► evaluate ─► record
                         ▲  │       │          │          │          ▲
                         └──┘       └──────────┴──► record└► analyse ┘
                        repair     rejected (by a reviewer     failed
                        (bounded)   or the user)

The edges carry what is decided between steps: an answer whose edits cannot be applied
goes back to the coder for a repair round while it has rounds left, then to ``record``;
a rejection by a reviewer, or by the user at ``approve``, goes to ``record``; a failed
evaluation goes to the analyst, then to ``record``. ``approve`` parks the thread with
LangGraph's ``interrupt`` until a decision is stored (human approval); it is in the
graph only where the run asks for approval, as ``analyse`` is only where there is an
analyst. Where the sandbox contains the candidate, ``review`` runs only the pure checks
and starts the model review in a thread; ``evaluate`` waits for its verdict after the
evaluation, and a rejection goes to ``record`` as from ``review`` (orchestrator/reviews.py).

What travels in the graph state is what a step hands the next: the ticket and node id,
the refused answer (``refusal``), a rejection (``verdict``), the evaluation's
``outcome`` and the ``analysis``. What a candidate *is* (its proposal, commit, scores)
lives in SQL, the single source: every step is idempotent against it, and the
checkpoints stay small (they say where a thread stands, not what it holds). A node
that is finished ends its thread at the next edge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph

from revtree.orchestrator.steps import Steps

STEPS = ("select", "propose", "code", "review", "approve", "evaluate", "analyse", "record")


class CandidateState(TypedDict, total=False):
    ticket: str
    node_id: int | None
    refusal: dict[str, Any] | None  # {error, answer, round, detail, repairable, unreadable}
    verdict: dict[str, Any] | None  # {accepted: False, reasons, by?}: a rejection
    outcome: dict[str, Any] | None  # the evaluation's ``Outcome``
    analysis: str | None  # the analyst's reading of a failed evaluation


def build_pipeline(steps: Steps, checkpointer: Any) -> Any:
    """Compile the pipeline graph over ``steps``. ``approve`` is a node only where the
    run asks for approval, ``analyse`` only where there is an analyst: a step that would
    pass through still costs a checkpoint per candidate."""
    graph: StateGraph[CandidateState] = StateGraph(CandidateState)
    approval = steps.spec.search.approve == "evaluate"
    analyst = steps.agents.analyst is not None
    names = [n for n in STEPS if (n != "approve" or approval) and (n != "analyse" or analyst)]
    for name in names:
        graph.add_node(name, steps.guarded(name, getattr(steps, name)))  # type: ignore[call-overload]
    graph.add_edge(START, "select")
    done = _finished(steps)

    def after_code(state: CandidateState) -> str:
        refusal = state.get("refusal")
        if refusal is None:
            return "review"
        repair = refusal["repairable"] and refusal["round"] < steps.agents.coder.repairs
        return "code" if repair else "record"

    after_review = "approve" if approval else "evaluate"

    def rejected_or(nxt: str) -> Callable[[CandidateState], str]:
        return lambda state: "record" if state.get("verdict") else nxt

    def after_evaluate(state: CandidateState) -> str:
        if state.get("verdict"):  # rejected by the review that ran beside the evaluation
            return "record"
        outcome = state.get("outcome") or {}
        failed = not outcome.get("ok") and outcome.get("error_kind") != "gated"
        return "analyse" if failed and analyst else "record"

    routes: dict[str, tuple[Callable[[CandidateState], str], tuple[str, ...]]] = {
        "select": (lambda s: "propose", ("propose",)),
        "propose": (lambda s: "code", ("code",)),
        "code": (after_code, ("code", "review", "record")),
        "review": (rejected_or(after_review), (after_review, "record")),
        "approve": (rejected_or("evaluate"), ("evaluate", "record")),
        "evaluate": (after_evaluate, ("analyse", "record")),
        "analyse": (lambda s: "record", ("record",)),
    }
    for here, (route, targets) in routes.items():
        if here in names:
            present = [t for t in targets if t in names]
            graph.add_conditional_edges(here, done(route), [*present, END])
    graph.add_edge("record", END)
    return graph.compile(checkpointer=checkpointer)


def _finished(steps: Steps) -> Callable[[Callable[[CandidateState], str]], Callable[..., str]]:
    """Wrap a route: a candidate with no node, or whose node is finished, ends."""

    def wrap(route: Callable[[CandidateState], str]) -> Callable[[CandidateState], str]:
        def decide(state: CandidateState) -> str:
            node_id = state.get("node_id")
            if node_id is None or steps.mirror.get(node_id).status.is_finished():
                return END
            return route(state)

        return decide

    return wrap
