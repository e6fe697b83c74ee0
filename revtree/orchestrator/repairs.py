"""A coder's refused answer and its repair rounds, as the graph state holds them and as
SQL keeps them.

An answer whose edits cannot be applied goes back to the coder for a repair round while
it has rounds left (the pipeline's ``code -> code`` edge, ``due``). Each refusal is also
an event of the live log (kind ``refused``: the error, the round, the answer's tail),
so that a person sees a repair happen, and so that a code step replayed after a kill
(LangGraph's checkpoints are written as a thread exits, so the state a replay starts
from may be older than the rounds spent) resumes the rounds where they stood
(``latest``) instead of asking the coder afresh with all its rounds again. The answer
and the errors are redacted and capped in the event as in a transcript (``meter.clean``:
the live log reaches the dashboard).
"""

from __future__ import annotations

from typing import Any

from revtree.agents.base import Refusal
from revtree.agents.llm.meter import cap, redact, run_secrets
from revtree.errors import EditError, EditRefused, EditUnreadable
from revtree.memory import Node, Store
from revtree.tasks import TaskSpec

ANSWER_KEPT = 6000  # characters of a refused answer handed back to the coder
FIELDS = ("error", "answer", "round", "first")  # a ``Refusal``'s, of the state's dict


def due(refusal: dict[str, Any], repairs: int) -> bool:
    """Whether a refusal goes back to the coder for a repair round."""
    return bool(refusal["repairable"]) and refusal["round"] < repairs


def of_state(refusal: dict[str, Any] | None) -> Refusal | None:
    """The coder's view of a refusal the graph state holds."""
    return Refusal(**{k: refusal[k] for k in FIELDS}) if refusal else None


def refused(e: EditError, last: Refusal | None, detail: str) -> dict[str, Any]:
    """The state's refusal for ``e``, the coder's error after ``last`` (None: its first
    answer); only an answer that came back refused can be repaired."""
    answer = e.answer[-ANSWER_KEPT:] if isinstance(e, EditRefused) else ""
    return {
        "error": str(e),
        "answer": answer,
        "round": last.round + 1 if last else 0,
        "first": last.first if last else str(e),
        "detail": detail,
        "repairable": isinstance(e, EditRefused),
        "unreadable": isinstance(e, EditUnreadable),
    }


def say(
    store: Store, spec: TaskSpec, run_id: str, node: Node, refusal: dict[str, Any], repairs: int
) -> None:
    """The refusal in the live log, with what a replay needs to resume the rounds."""
    secrets = run_secrets(spec)
    kept = {k: cap(redact(v, secrets)) if isinstance(v, str) else v for k, v in refusal.items()}
    then = "a repair round follows" if due(refusal, repairs) else "no repair round left"
    if not refusal["repairable"]:
        then = "it cannot be repaired"
    store.add_event(
        run_id,
        "refused",
        f"node {node.id}: the coder's answer could not be applied "
        f"(round {refusal['round']}): {kept['error'][:300]}; {then}",
        node.id,
        {**kept, "attempt": node.attempt},
    )


def latest(
    store: Store, run_id: str, node: Node, state: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Of the state's refusal and the node's last one in the live log (this attempt's),
    the later round: a replay may start from a checkpoint older than the rounds spent."""
    said = [
        e.data
        for e in store.node_events(run_id, node.id, "refused")
        if e.data and e.data.get("attempt") == node.attempt
    ]
    kept = {k: v for k, v in said[-1].items() if k != "attempt"} if said else None
    if kept is None or (state is not None and state["round"] >= kept["round"]):
        return state
    return kept
