"""Approval decisions: one per waiting node and attempt, taken atomically in SQL.

A decision is an event of kind ``decision`` (the live log shows it). Two processes
deciding on one node at once (``revtree approve`` and ``revtree reject``) are serialised
on the run's row: each write first updates that row (a row lock on PostgreSQL; SQLite's
writes already begin IMMEDIATE), then looks for a decision on the node, and writes its
own only where there is none. The loser gets the winner's decision back and writes
nothing, so what the run evaluates is always what the one recorded decision says.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select, update
from sqlalchemy.engine import Connection

from revtree.memory.db import transaction
from revtree.memory.models import EVENTS, RUNS
from revtree.memory.records import Decision, Event
from revtree.memory.rows import first_decisions


class Decisions:
    """The decision methods of the Store (which supplies ``engine``, ``_write`` and
    ``_event``)."""

    engine: Engine

    def _write(self) -> Any:
        raise NotImplementedError

    def _event(
        self,
        conn: Connection,
        run_id: str,
        spec: tuple[str, str, dict[str, Any] | None],
        node_id: int | None,
    ) -> Event:
        raise NotImplementedError

    def decide(
        self, run_id: str, node_id: int, attempt: int, accepted: bool, why: str = ""
    ) -> Event | Decision:
        """Record the decision on ``node_id`` (its ``attempt``): the event, or, where a
        decision came first, that one (and nothing is written)."""
        verb = "approved" if accepted else "rejected"
        message = f"node {node_id} {verb} by the user" + (f": {why}" if why else "")
        data = {"attempt": attempt, "accepted": accepted, "why": why}
        with self._write() as conn:
            # lock the run's row before looking: a concurrent decider waits here, then
            # sees this one's decision
            conn.execute(
                update(RUNS).where(RUNS.c.id == run_id).values(last_event=RUNS.c.last_event)
            )
            earlier = _decisions(conn, run_id, {node_id: attempt}).get(node_id)
            if earlier is not None:
                return earlier
            return self._event(conn, run_id, ("decision", message, data), node_id)

    def decisions(self, run_id: str, nodes: dict[int, int]) -> dict[int, Decision]:
        """The decision on each of ``nodes`` (node -> attempt), for that attempt: the
        first recorded (a store written before decisions were atomic may hold two)."""
        if not nodes:
            return {}
        with transaction(self.engine) as conn:
            return _decisions(conn, run_id, nodes)

    def decision(self, run_id: str, node_id: int, attempt: int) -> Decision | None:
        return self.decisions(run_id, {node_id: attempt}).get(node_id)


def _decisions(conn: Connection, run_id: str, nodes: dict[int, int]) -> dict[int, Decision]:
    rows = conn.execute(
        select(EVENTS.c.node_id, EVENTS.c.data)
        .where(
            EVENTS.c.run_id == run_id,
            EVENTS.c.kind == "decision",
            EVENTS.c.node_id.in_(list(nodes)),
        )
        .order_by(EVENTS.c.seq)
    ).all()
    return first_decisions(rows, nodes)
