"""The scheduler's ticket bookkeeping (issue 25: the scheduler's, not the steps')."""

from __future__ import annotations

import threading

from revtree.orchestrator.tickets import Tickets


def test_a_ticket_is_pending_until_select_reports_and_starves_only_when_idle() -> None:
    tickets = Tickets(threading.RLock())
    for t in ("a", "b", "c"):
        tickets.start(t)
    assert tickets.pending() == 3
    tickets.selected("a")  # a node
    tickets.selected("b", idle=True)  # nothing
    assert tickets.pending() == 1
    assert tickets.ended(["b"]) is True  # every ticket that ended was idle
    assert tickets.ended(["a", "c"]) is False
    assert tickets.pending() == 0
    assert tickets.ended([]) is True  # none ended: no slot was freed


def test_a_waiting_attempt_is_announced_once() -> None:
    tickets = Tickets(threading.RLock())
    assert tickets.announce(4, 1) is True
    assert tickets.announce(4, 1) is False
    assert tickets.announce(4, 2) is True
