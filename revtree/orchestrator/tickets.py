"""The scheduler's ticket bookkeeping. A ticket is one candidate's thread: started by
the scheduler, it is ``pending`` (counted ahead by the node budget) until ``select``
says what became of it: a node, a verification, or nothing (``idle``). When every
ticket that ends was idle, the search is starved and the scheduler starts no more. A
candidate parked at approval is announced in the live log once per attempt
(``announce``). ``Ahead`` holds the baseline's score until the candidate started
beside it at parallel 1 has chosen.

The sets are this object's own: the scheduler starts and ends tickets, ``select``
reports its choice through ``selected``. Both hold the tree lock (the mirror's, which
is re-entrant): a node's creation and its ticket's leaving ``pending`` are one step
for the budget check.
"""

from __future__ import annotations

import threading
from collections.abc import Collection

from revtree.errors import Cancelled


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


class Ahead:
    """The candidate that selects while the baseline is evaluated (at parallel 1). The
    baseline's score is recorded only once that ticket has chosen, so that its choice
    is the one the policy makes for an unscored baseline however fast the evaluation (a
    seeded run stays reproducible); and its own evaluation waits for the baseline's
    thread to end (its repeats included), so the run's verifications see what a run
    one candidate at a time sees. Without a ticket held, nothing waits."""

    def __init__(self) -> None:
        self.ticket: str | None = None
        self.node: int | None = None  # the node it chose, once it has
        self._chose, self._baseline = threading.Event(), threading.Event()
        self._chose.set()
        self._baseline.set()

    def hold(self, ticket: str) -> None:
        """``ticket`` selects before the baseline's score is recorded."""
        self.ticket = ticket
        self._chose.clear()
        self._baseline.clear()

    def chose(self, ticket: str, node_id: int | None) -> None:
        """``ticket`` has chosen (``node_id``: its node, None for none)."""
        if ticket == self.ticket:
            self.node = node_id
            self._chose.set()

    def ended(self, ticket: str, baseline: str | None) -> None:
        """A ticket ended: the one held (chosen or not), or the baseline's."""
        if ticket == self.ticket:
            self._chose.set()
        if ticket == baseline:
            self._baseline.set()

    def wait_chosen(self, cancel: threading.Event) -> None:
        """Until the ticket held has chosen; ``Cancelled`` if ``cancel`` is set first."""
        _wait(self._chose, cancel)

    def wait_baseline(self, node_id: int, cancel: threading.Event) -> None:
        """Before ``node_id`` is evaluated: if it is the node chosen ahead, until the
        baseline's thread ended; ``Cancelled`` if ``cancel`` is set first."""
        if node_id == self.node:
            _wait(self._baseline, cancel)


def _wait(event: threading.Event, cancel: threading.Event) -> None:
    while not event.wait(0.1):
        if cancel.is_set():
            raise Cancelled("the run is stopping")
