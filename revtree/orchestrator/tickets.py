"""The scheduler's ticket bookkeeping. A ticket is one candidate's thread: started by
the scheduler, it is ``pending`` (counted ahead by the node budget) until ``select``
says what became of it: a node, a verification, or nothing (``idle``). When every
ticket that ends was idle, the search is starved and the scheduler starts no more. A
candidate parked at approval is announced in the live log once per attempt
(``announce``).

The sets are this object's own: the scheduler starts and ends tickets, ``select``
reports its choice through ``selected``. Both hold the tree lock (the mirror's, which
is re-entrant): a node's creation and its ticket's leaving ``pending`` are one step
for the budget check.
"""

from __future__ import annotations

import threading
from collections.abc import Collection


class Tickets:
    """The tickets in flight with no node yet, and those the policy left idle."""

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock
        self._pending: set[str] = set()  # started, not selected yet
        self._idle: set[str] = set()  # the policy chose nothing for them
        self._announced: set[tuple[int, int]] = set()  # (node, attempt) shown as waiting

    def start(self, ticket: str) -> None:
        with self._lock:
            self._pending.add(ticket)

    def selected(self, ticket: str, idle: bool = False) -> None:
        """``select`` chose for ``ticket`` (nothing, where ``idle``)."""
        with self._lock:
            self._pending.discard(ticket)
            if idle:
                self._idle.add(ticket)

    def pending(self) -> int:
        """The tickets started that have no node yet (and may make one)."""
        with self._lock:
            return len(self._pending)

    def ended(self, tickets: Collection[str]) -> bool:
        """Forget the tickets that ended; whether all were idle (none ended: True, as
        no slot was freed)."""
        with self._lock:
            starved = all(t in self._idle for t in tickets)
            self._pending.difference_update(tickets)
            self._idle.difference_update(tickets)
            return starved

    def announce(self, node_id: int, attempt: int) -> bool:
        """Whether a node's attempt waiting for approval is to be shown (the first time)."""
        with self._lock:
            first = (node_id, attempt) not in self._announced
            self._announced.add((node_id, attempt))
            return first
