"""The scheduler's ticket bookkeeping. A ticket is one candidate's thread: started by
the scheduler, it is ``pending`` (counted ahead by the node budget) until ``select``
says what became of it: a node, a verification, or nothing (``idle``). When every
ticket that ends was idle, the search is starved and the scheduler starts no more. A
candidate parked at approval is announced in the live log once per attempt
(``announce``). ``Chain``, at parallel 1, prepares the next candidate while one is
evaluated, and holds each outcome until the next is prepared.

The sets are this object's own: the scheduler starts and ends tickets, ``select``
reports its choice through ``selected``. Both hold the tree lock (the mirror's, which
is re-entrant): a node's creation and its ticket's leaving ``pending`` are one step
for the budget check.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TypeVar

from revtree.errors import Cancelled

R = TypeVar("R")  # what a record takes (``Chain.in_turn``)


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


class Chain:
    """At parallel 1 with the default lookahead: the next candidate is prepared (selected,
    proposed, coded, reviewed) while the one before it is evaluated, and a seeded run
    stays as reproducible as one made one candidate at a time:

    - the next ticket starts once the one in flight is at its evaluation (``ready``): its
      commit and checks are in, so the next one's near-twin check sees them (a resume
      that replays a ticket from its record makes it ready again);
    - a ticket's outcome (or a failure after its evaluation started) is recorded only
      once a ticket started after it is ``prepared`` (it chose nothing or a
      verification, or its node is reviewed and at its evaluation, or its prompt waits
      for that outcome to show it: ``ContextSource.tell_waits``) or ended
      (``wait_next``): every choice, proposal, edit and review is made with the
      candidate before it unscored, however fast its evaluation (the policy, and the
      learners that proposers and prompts read, learn an outcome as it is recorded);
      where none will start (``release``: the budget or the search ends), it is
      recorded at once;
    - a ticket's first run starts once a slot is free, but each run is recorded (and
      the budget checked, before the first) only once every ticket started before it
      ended, verification included, or was recorded as a success that is not a new
      best (``through``: the rest of its thread is LangGraph's end; a failure waits for
      its end, where the same-failures count may stop the run), so the trust sees what
      a run one at a time sees (``in_turn``); its later stages and repeats follow.

    Off, nothing waits and no ticket starts ahead."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self._cond = threading.Condition()
        self._seq: dict[str, int] = {}  # the tickets in flight, by start order
        self._count = 0
        self._ready: set[str] = set()
        self._followed: set[str] = set()  # in flight when a later ticket started
        self._beside: set[str] = set()  # started while another was in flight
        self._settled = -1  # the latest start (seq) whose ticket is prepared or ended
        self._released = False
        self._through: set[str] = set()  # recorded, with nothing left for the trust
        self._wake: Future[None] = Future()

    def wake(self) -> Future[None]:
        """Done once a ticket is ready: the scheduler waits on it beside its candidates
        (taken before it looks, so a ticket ready meanwhile is not missed)."""
        with self._cond:
            return self._wake

    def started(self, ticket: str) -> None:
        if not self.on:
            return
        with self._cond:
            self._followed.update(self._seq)
            if self._seq:
                self._beside.add(ticket)
            self._seq[ticket], self._count = self._count, self._count + 1
            self._released = False

    def may_start(self) -> bool:
        """Whether a ticket may start beside the one in flight: it is ready, and no
        other started beside it (after a verification or an idle choice beside it, the
        next waits for its end)."""
        with self._cond:
            if not self.on or len(self._seq) != 1:
                return False
            (ticket,) = self._seq
            return ticket in self._ready and ticket not in self._followed

    def prepared(self, ticket: str) -> None:
        """``ticket`` chose nothing or a verification, or its node is reviewed."""
        with self._cond:
            self._settle(ticket)

    def ready(self, ticket: str) -> None:
        """``ticket``'s candidate is at its evaluation: the next may start."""
        with self._cond:
            if ticket not in self._seq:  # off, or a thread driven outside the scheduler
                return
            self._ready.add(ticket)
            woke, self._wake = self._wake, Future()
        woke.set_result(None)

    @contextmanager
    def readied(self, ticket: str) -> Iterator[None]:
        """``ready`` as the block ends where it did not say so (its first run started no
        process: cancelled, or its launch or spawn failed)."""
        try:
            yield
        finally:
            with self._cond:
                due = ticket not in self._ready
            if due:
                self.ready(ticket)

    def ended(self, ticket: str) -> bool:
        """Forget ``ticket``; whether it started beside another (an idle choice made
        beside an evaluation does not starve the search: the next sees the outcome)."""
        with self._cond:
            beside = ticket in self._beside
            self._settle(ticket)
            self._seq.pop(ticket, None)
            self._ready.discard(ticket)
            self._followed.discard(ticket)
            self._beside.discard(ticket)
            self._through.discard(ticket)
            return beside

    def through(self, ticket: str) -> None:
        """``ticket``'s outcome is recorded and it verifies nothing: what is left of it
        (its thread's end) no longer holds back the records of the next."""
        with self._cond:
            if ticket in self._seq:
                self._through.add(ticket)
                self._cond.notify_all()

    def release(self) -> None:
        """No ticket starts now: outcomes held for one are recorded."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def _settle(self, ticket: str) -> None:
        if ticket in self._seq:
            self._settled = max(self._settled, self._seq[ticket])
            self._cond.notify_all()

    def wait_turn(self, ticket: str, cancel: threading.Event) -> None:
        """Until every ticket started before ``ticket`` ended or is ``through``."""
        seq = self._seq.get(ticket)
        self._wait(
            lambda: (
                seq is None or all(s >= seq or t in self._through for t, s in self._seq.items())
            ),
            cancel,
        )

    def in_turn(
        self,
        ticket: str,
        cancel: threading.Event,
        record: Callable[[R], object],
        first: Callable[[], None],
    ) -> Callable[[R], object]:
        """``record`` called once ``wait_turn`` lets ``ticket`` go: its first run may start
        as soon as a slot is free, its records wait for the tickets before it; ``first``
        (the budget's check) before its first record where it waited in the chain, as a
        slot taken after them would have checked it."""
        with self._cond:
            check = self.on and ticket in self._seq

        def recorded(result: R) -> object:
            nonlocal check
            self.wait_turn(ticket, cancel)
            if check:
                check = False
                first()
            return record(result)

        return recorded

    def wait_next(self, ticket: str | None, cancel: threading.Event) -> None:
        """Until a ticket started after ``ticket`` (ready) is prepared or ended, or none
        will start."""
        if ticket in self._ready:
            seq = self._seq[ticket]  # (a ready ticket is in flight)
            self._wait(lambda: self._released or self._settled > seq, cancel)

    def _wait(self, done: Callable[[], bool], cancel: threading.Event) -> None:
        with self._cond:
            while True:  # a stop first: a ticket that ended cancelled prepared nothing
                if cancel.is_set():
                    raise Cancelled("the run is stopping")
                if done():
                    return
                self._cond.wait(0.1)
