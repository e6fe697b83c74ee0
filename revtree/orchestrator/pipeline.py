"""The candidate pipeline as a LangGraph ``StateGraph``: the graph is the controller.

    select ─► propose ─► code ─► review ─► approve ─► evaluate ─► record ─► verify
      │                  ▲  │       │          │          │          ▲ new best? ▲
      │                  └──┘       └──────────┴──► record└► analyse ┘           │
      │                 repair     rejected (by a reviewer     failed            │
      │                (bounded)    or the user)                                 │
      └─────────────── a node the policy asks to verify ─────────────────────────┘

The edges carry what is decided between steps: an answer whose edits cannot be applied
goes back to the coder for a repair round while it has rounds left, then to ``record``;
a rejection by a reviewer, or by the user at ``approve``, goes to ``record``; a failed
evaluation goes to the analyst, then to ``record``. ``approve`` parks the thread with
LangGraph's ``interrupt`` until a decision is stored (human approval); it is in the
graph only where the run asks for approval, as ``analyse`` is only where there is an
analyst. Where the sandbox contains the candidate, ``review`` runs only the pure checks
and starts the model review in a thread; ``evaluate`` waits for its verdict after the
evaluation, and a rejection goes to ``record`` as from ``review`` (orchestrator/reviews.py).

The sandbox time a candidate costs beyond its own evaluation is a step of its own,
``verify``: ``record`` only records, and its "new best?" edge goes to ``verify`` (the
best's repeats and guard holdout: ``Trust.best``) or ends the thread; ``select`` only
selects, and a node the policy asks to re-run goes to ``verify`` in a thread with no
node of its own (``Trust.for_policy``). The final checks of the best, when the run
ends, are the orchestrator's (``Trust.finalize``), outside the graph.

What travels in the graph state is what a step hands the next: the ticket and node id,
the node the policy asks to verify (``verify``), the refused answer (``refusal``), a
rejection (``verdict``), the evaluation's ``outcome`` and the ``analysis``. What a
candidate *is* (its proposal, commit, scores) lives in SQL, the single source: every
step is idempotent against it, and the checkpoints stay small (they say where a thread
stands, not what it holds). A node that is finished ends its thread at the next edge,
but for the "new best?" edge after ``record``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypedDict

# from the modules, not langgraph.graph, whose __init__ is put off (revtree.deferred)
from langgraph.constants import END, START
from langgraph.graph.state import StateGraph
from langgraph.types import Command

from revtree.memory import NodeStatus
from revtree.orchestrator import repairs
from revtree.orchestrator.steps import Steps

STEPS = (
    "select",
    "propose",
    "code",
    "review",
    "approve",
    "evaluate",
    "analyse",
    "record",
    "verify",
)


# what a step hands the next, cleared as a thread starts over (LangGraph keeps a thread's
# channels from one run to the next: a node replayed or retried from its start must not
# route on its last attempt's refused answer, rejection, outcome or analysis)
HANDED_ON = {"verify": None, "refusal": None, "verdict": None, "outcome": None, "analysis": None}


class CandidateState(TypedDict, total=False):
    ticket: str
    node_id: int | None
    verify: int | None  # the node the policy asks to verify (the thread has no node)
    refusal: dict[str, Any] | None  # {error, answer, round, detail, repairable, unreadable}
    verdict: dict[str, Any] | None  # {accepted: False, reasons, by?}: a rejection
    outcome: dict[str, Any] | None  # the evaluation's ``Outcome``
    analysis: str | None  # the analyst's reading of a failed evaluation


def build_pipeline(steps: Steps, checkpointer: Any) -> Any:
    """Compile the pipeline graph over ``steps``. ``approve`` is a node only where the
    run asks for approval, ``analyse`` only where there is an analyst: a step that would
    pass through still costs LangGraph's work per candidate. Each step routes itself: it
    returns a ``Command`` whose ``goto`` is its edge's choice, over the state it leaves
    (its ``destinations`` draw the graph); a conditional edge cost a runnable of its own
    per step."""
    graph: StateGraph[CandidateState] = StateGraph(CandidateState)
    approval = steps.spec.search.approve == "evaluate"
    analyst = steps.agents.analyst is not None
    names = [n for n in STEPS if (n != "approve" or approval) and (n != "analyse" or analyst)]
    done = _finished(steps)

    def after_code(state: CandidateState) -> str:
        refusal = state.get("refusal")
        if refusal is None:
            return "review"
        return "code" if repairs.due(refusal, steps.agents.coder.repairs) else "record"

    after_review = reviewed(names)

    def rejected_or(nxt: str) -> Callable[[CandidateState], str]:
        return lambda state: "record" if state.get("verdict") else nxt

    def after_evaluate(state: CandidateState) -> str:
        if state.get("verdict"):  # rejected by the review that ran beside the evaluation
            return "record"
        outcome = state.get("outcome") or {}
        failed = not outcome.get("ok") and outcome.get("error_kind") != "gated"
        return "analyse" if failed and analyst else "record"

    def after_select(state: CandidateState) -> str:
        return "verify" if state.get("verify") is not None else done(lambda s: "propose")(state)

    def after_record(state: CandidateState) -> str:  # new best?
        node_id, m = state.get("node_id"), steps.mirror
        best = node_id is not None and m.best_id == node_id
        return "verify" if best and m.get(node_id).status is NodeStatus.SUCCEEDED else END

    routes: dict[str, tuple[Callable[[CandidateState], str], tuple[str, ...]]] = {
        "select": (after_select, ("propose", "verify", END)),
        "propose": (done(lambda s: "code"), ("code", END)),
        "code": (done(after_code), ("code", "review", "record", END)),
        "review": (done(rejected_or(after_review)), (after_review, "record", END)),
        "approve": (done(rejected_or("evaluate")), ("evaluate", "record", END)),
        "evaluate": (done(after_evaluate), ("analyse", "record", END)),
        "analyse": (done(lambda s: "record"), ("record", END)),
        "record": (after_record, ("verify", END)),
        "verify": (lambda s: END, (END,)),
    }
    for name in names:
        route, targets = routes[name]
        present = tuple(t for t in targets if t in names or t == END)
        step = _routed(steps.guarded(name, getattr(steps, name)), route, present)
        graph.add_node(name, step, destinations=present)  # type: ignore[call-overload]
    graph.add_edge(START, "select")
    return graph.compile(checkpointer=checkpointer)


def reviewed(steps: Iterable[str]) -> str:
    """Where a reviewed candidate with no verdict goes: to ``approve`` in a graph that
    has it (the run asks for approval), else to ``evaluate``. Also where ``retry``
    sends a thread it forks to evaluate again: a new attempt waits for approval too."""
    return "approve" if "approve" in steps else "evaluate"


def _routed(
    run: Callable[[Any], dict[str, Any]],
    route: Callable[[CandidateState], str],
    targets: tuple[str, ...],
) -> Callable[[CandidateState], Command[str]]:
    """A step that routes itself: what ``run`` hands on, and where its edge goes over the
    state that leaves (LangGraph's channels hold last values: the state, updated). A
    ``goto`` outside ``targets`` is refused here: LangGraph would only log it and end
    the thread with its node unfinished."""

    @functools.wraps(run)
    def step(state: CandidateState) -> Command[str]:
        update = run(state)
        goto = route({**state, **update})  # type: ignore[typeddict-item]
        if goto not in targets:
            raise RuntimeError(f"the pipeline routed {run.__name__} to {goto!r}: not in {targets}")
        return Command(update=update, goto=goto)

    return step


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
