"""``tickets.Chain``: at parallel 1 the next candidate is prepared while one is evaluated,
and what each waits for keeps a seeded run reproducible (issue 24). Real threads; the
whole-run behaviour is in test_run (the tree does not depend on how long evaluations
take; a stop and resume chooses as the uninterrupted run) and test_llm_run."""

from __future__ import annotations

import threading
import time

import pytest

from revtree.errors import Cancelled
from revtree.orchestrator.tickets import Chain


def waiter(fn: object, *args: object) -> tuple[threading.Thread, threading.Event]:
    """``fn(*args)`` in a thread; the event is set once it returned."""
    done = threading.Event()

    def run() -> None:
        fn(*args)  # type: ignore[operator]
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


def test_the_next_starts_once_the_one_in_flight_is_at_its_evaluation() -> None:
    chain, cancel = Chain(True), threading.Event()
    chain.started("a")
    assert not chain.may_start()  # a is being prepared: nothing beside it
    woke = chain.wake()
    chain.ready("a")
    assert woke.done() and not chain.wake().done()  # the scheduler is woken once
    assert chain.may_start()
    chain.started("b")
    assert not chain.may_start()  # one beside it at most
    # a's outcome waits for b to be prepared; b's evaluation waits for a to end
    _, recorded = waiter(chain.wait_next, "a", cancel)
    _, evaluating = waiter(chain.wait_turn, "b", cancel)
    time.sleep(0.2)
    assert not recorded.is_set() and not evaluating.is_set()
    chain.prepared("b")
    assert recorded.wait(5) and not evaluating.is_set()
    chain.ended("a")
    assert evaluating.wait(5)
    chain.ready("b")
    assert chain.may_start()  # b is alone and at its evaluation: c may start


def test_the_next_evaluates_once_the_one_before_is_recorded_with_nothing_to_verify() -> None:
    chain, cancel = Chain(True), threading.Event()
    for ticket in ("a", "b", "c"):
        chain.started(ticket)
    _, c_turn = waiter(chain.wait_turn, "c", cancel)
    chain.through("b")  # b is recorded, a is not: c still waits for a
    time.sleep(0.2)
    assert not c_turn.is_set()
    chain.through("a")  # a recorded and not a new best: its thread's end is not waited for
    assert c_turn.wait(5)
    chain.ended("a")
    chain.ended("b")
    chain.started("d")  # a ticket that verifies (a new best) is never through: d waits
    _, d_turn = waiter(chain.wait_turn, "d", cancel)
    time.sleep(0.2)
    assert not d_turn.is_set()
    chain.through("gone")  # a ticket no longer in flight changes nothing
    chain.ended("c")
    assert d_turn.wait(5)


def test_after_an_idle_or_a_verification_beside_it_the_next_waits_for_its_end() -> None:
    chain = Chain(True)
    chain.started("a")
    chain.ready("a")
    chain.started("v")  # chose a verification (or nothing): prepared at once
    chain.prepared("v")
    chain.ended("v")
    assert not chain.may_start()  # a had one beside it: the next sees a's outcome
    chain.ended("a")
    assert chain.may_start() is False  # nothing in flight: the scheduler's own width


def test_a_release_records_at_once_and_a_cancel_stops_the_wait() -> None:
    chain, cancel = Chain(True), threading.Event()
    chain.started("a")
    chain.ready("a")
    _, recorded = waiter(chain.wait_next, "a", cancel)
    time.sleep(0.2)
    assert not recorded.is_set()
    chain.release()  # the budget is spent: no ticket will follow
    assert recorded.wait(5)
    chain.started("b")  # a later start ends the release
    chain.ready("b")
    cancel.set()
    with pytest.raises(Cancelled):
        chain.wait_next("b", cancel)


def test_off_nothing_waits_and_nothing_starts_beside() -> None:
    chain, cancel = Chain(False), threading.Event()
    chain.started("a")
    chain.ready("a")
    chain.started("b")
    assert not chain.may_start() and not chain.wake().done()
    chain.wait_next("a", cancel)  # return at once
    chain.wait_turn("b", cancel)


def test_a_ticket_driven_outside_the_scheduler_never_waits() -> None:
    # `revtree retry` drives one thread itself: it is not in the chain
    chain, cancel = Chain(True), threading.Event()
    chain.ready("retried")
    chain.wait_next("retried", cancel)
    chain.wait_turn("retried", cancel)
    assert not chain.may_start()


def test_an_idle_choice_beside_an_evaluation_does_not_starve_the_search() -> None:
    # the scheduler stops starting tickets once every ticket that ended was idle; one
    # that chose nothing while the one before it was unscored may choose again after
    chain = Chain(True)
    chain.started("a")
    chain.ready("a")
    chain.started("idle")
    assert chain.ended("a") is False  # a started alone
    assert chain.ended("idle") is True  # started beside a, whatever ended first


def test_a_stop_wins_over_a_ticket_that_ended_cancelled() -> None:
    # a ticket cut off by the stop prepared nothing: the outcome before it stays held
    chain, cancel = Chain(True), threading.Event()
    chain.started("a")
    chain.ready("a")
    chain.started("b")
    cancel.set()
    chain.ended("b")
    with pytest.raises(Cancelled):
        chain.wait_next("a", cancel)


def test_an_evaluation_that_started_no_process_still_lets_the_next_start() -> None:
    """``Chain.readied``: where the sandbox never said the first run started (a cancel, a
    launch that failed), the next ticket may start once the evaluation ends; where it
    did, the block's end wakes no one again."""
    chain = Chain(True)
    chain.started("a")
    with pytest.raises(RuntimeError), chain.readied("a"):
        assert not chain.may_start()
        raise RuntimeError("the launch failed")
    assert chain.may_start()
    chain.ended("a")
    chain.started("b")
    with chain.readied("b"):
        chain.ready("b")  # as the sandbox says it, once b's process runs
        woke = chain.wake()
    assert chain.may_start() and not woke.done()
