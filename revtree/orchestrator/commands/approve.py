"""Human approval: ``revtree approve`` / ``revtree reject`` store a decision on a
candidate that waits before its evaluation (``[search] approve = "evaluate"``).

The decision is an event in SQL, written from any process (the run's own may be
running, stopped or on another machine); the candidate's ``approve`` step reads it
when the scheduler re-invokes its thread, or when the run is resumed. There is one per
waiting node, taken atomically (``memory/decisions.py``): of two deciding at once, the
second is told which decision won and exits non-zero.
"""

from __future__ import annotations

from revtree.errors import RevtreeError
from revtree.memory import Event, NodeStatus, Store
from revtree.memory.records import Decision
from revtree.tasks import TaskSpec


def decide(store: Store, run_id: str, node_id: int, accepted: bool, why: str = "") -> Event:
    """Approve (or reject, saying ``why``) node ``node_id`` of run ``run_id``; a clear
    error where the node does not wait for a decision."""
    run = store.get_run(run_id)
    where = f"node {node_id} of run {run.id}"
    if TaskSpec.stored(run.spec).search.approve != "evaluate":
        raise RevtreeError(
            f"run {run.id} does not hold candidates for approval ([search] approve is off; "
            "start a run with `--approve` for that)"
        )
    nodes = {n.id: n for n in store.nodes(run.id)}
    node = nodes.get(node_id)
    if node is None:
        raise RevtreeError(f"run {run.id} has no node {node_id}")
    if node.status is not NodeStatus.CODED and (
        earlier := store.decision(run.id, node.id, node.attempt)
    ):
        raise _lost(where, earlier)  # decided, and the run already went on with it
    if node.status is not NodeStatus.CODED or node.id == 0:
        raise RevtreeError(
            f"{where} is not waiting for approval (it is {node.status.value}); the waiting "
            "ones are in the live log (`revtree watch`)"
        )
    got = store.decide(run.id, node.id, node.attempt, accepted, why)
    if isinstance(got, Event):
        return got
    # another decision came first (it may have been taken a moment ago, at the same time
    # as this one): it stands, and this one is not recorded
    raise _lost(where, got)


def _lost(where: str, winner: Decision) -> RevtreeError:
    said = f" ({winner.why})" if winner.why else ""
    verb = "approved" if winner.accepted else "rejected"
    return RevtreeError(f"{where} was already {verb}{said}; that decision stands, not this one")
