"""The scheduler: ``parallel`` candidates in flight in steady state (plus ``lookahead``
prepared ahead of a free slot), a new one started as soon as one ends, with no
generation barrier.

Each candidate is one LangGraph thread (``run:ticket``), invoked from its checkpoint
when it has one (a resumed or interrupted thread continues where it stood). A thread
parked at ``approve`` waits without a thread of its own and still counts against the
width, so a run never proposes more than it can review; it is re-invoked once a
decision is in SQL. Budgets are checked before a candidate starts; one that is spent
stops new work while the candidates in flight finish. Infrastructure failures leave
their node unfinished and are counted: ``trust.infra_failures`` in a row stop the run
as failed, resumable once the cause is fixed. Candidates that finish failed for a reason
that is not their code's are watched too (``trust.SameFailures``): ``trust.same_failures``
in a row at the same step with the same error class stop the run as failed, resumable.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import traceback
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from revtree.agents.llm import BudgetExhausted
from revtree.errors import BaselineFailed, Cancelled, InfraFailure
from revtree.memory import NodeStatus
from revtree.memory.checkpoints import checkpoint_tables, prune_run
from revtree.orchestrator.pipeline import HANDED_ON
from revtree.orchestrator.steps import Steps
from revtree.orchestrator.tickets import Tickets
from revtree.orchestrator.trust import SameFailures
from revtree.orchestrator.wiring import AUTO_MAX, Parts

HEARTBEAT = 2.0
PRUNE_EVERY = 16  # finished candidates between prunes of their checkpoints
PRUNE_ENV = "REVTREE_PRUNE_EVERY"  # another number; 0 keeps them all (for revtree gc)
POLL = 0.5  # seconds between looks at the work in flight and at stored decisions


class Scheduler:
    """Keeps the run's candidates in flight until a budget or the search ends."""

    def __init__(
        self, parts: Parts, steps: Steps, graph: Any, durability: str, tickets: Tickets
    ) -> None:
        """``tickets``: this scheduler's bookkeeping of the tickets it starts (``select``
        reports to it what became of each)."""
        self.p, self.steps, self.graph, self.durability = parts, steps, graph, durability
        self.tickets = tickets
        self.store, self.run_id, self.mirror = parts.store, parts.run_id, parts.mirror
        self.fatal: str | None = None  # why the run must stop as failed
        self.infra_streak = 0
        self.same = SameFailures(parts.spec.trust.same_failures)
        self.waiting: dict[str, int] = {}  # ticket -> node, parked at approval
        self.unpruned: list[str] = []  # tickets ended since their checkpoints were pruned
        every = os.environ.get(PRUNE_ENV, "")
        self.prune_every = int(every) if every.strip().lstrip("-").isdigit() else PRUNE_EVERY

    def candidate(self, ticket: str, new: bool = False) -> str:
        """Drive one candidate's thread as far as it goes; how it ended, in a word.
        ``new``: a ticket just made, with no checkpoint to continue from."""
        config = {"configurable": {"thread_id": f"{self.run_id}:{ticket}"}}
        try:
            fresh = new or not self.graph.get_state(config).next
            start = {"ticket": ticket, **HANDED_ON} if fresh else None
            result = self.graph.invoke(start, config, durability=self.durability)
            with self.mirror.lock:
                self.infra_streak = 0
            if "__interrupt__" in result:
                return "waiting"
            self._finished(ticket)
            return "done"
        except Cancelled:
            return "cancelled"
        except BudgetExhausted:
            return "budget"  # the node stays unfinished: a resume with more budget goes on
        except BaselineFailed as e:
            self.stop_failed(f"the baseline (node 0) cannot be scored: {e}")
            return "fatal"
        except InfraFailure as e:
            if self.mirror.by_ticket.get(ticket) == 0:  # no baseline, nothing to compare
                self.stop_failed(f"the baseline (node 0) could not be evaluated: {e}")
                return "fatal"
            self._infra_failure(ticket, str(e))
            return "infra"
        except Exception as e:
            try:
                self._candidate_failed(ticket, e)
            except Exception:  # the store itself is failing: stop the run, loudly
                self.p.cancel.set()
                raise
            self._finished(ticket)
            return "error"

    def _infra_failure(self, ticket: str, cause: str) -> None:
        """Count a failure outside the candidate (its node stays unfinished, for resume);
        too many in a row stop the run."""
        node_id = self.mirror.by_ticket.get(ticket)
        with self.mirror.lock:
            self.infra_streak += 1
            streak = self.infra_streak
        with contextlib.suppress(Exception):  # the store may be what failed
            self.store.add_event(
                self.run_id,
                "infra",
                f"infrastructure failure (node {node_id} stays unfinished, not counted "
                f"against it): {cause}",
                node_id,
                {"cause": cause, "streak": streak},
            )
        if streak >= self.p.spec.trust.infra_failures:
            self.stop_failed(f"{streak} infrastructure failures in a row; the last: {cause}")

    def _finished(self, ticket: str) -> None:
        """Count a candidate whose node finished: failed for a reason not its own, or
        not; too many alike in a row stop the run (the live log says so)."""
        node_id = self.mirror.by_ticket.get(ticket)
        if node_id in (None, 0) or not self.mirror.get(node_id).status.is_finished():
            return  # no node (the policy chose none, a verification), the baseline (no
            # candidate: it may end after the one beside it), or not finished
        failure = self.steps.failure_of(node_id)
        with self.mirror.lock:
            reason = self.same.add(node_id, failure)
            nodes = [n for n, _ in self.same.streak]
        if reason is None or failure is None:
            return
        data: dict[str, Any] = {"step": failure.step, "class": failure.cls, "nodes": nodes}
        data |= {"whose": failure.whose, "example": failure.example}
        self.store.add_event(self.run_id, "failing", f"stopping: {reason}", node_id, data)
        self.stop_failed(reason)

    def stop_failed(self, reason: str) -> None:
        """Stop the run as failed (the first reason wins): no new work, and the work in
        flight is cancelled unrecorded, so ``resume`` redoes it once the cause is fixed."""
        with self.mirror.lock:
            if self.fatal is None:
                self.fatal = reason
        self.p.cancel.set()

    def _candidate_failed(self, ticket: str, e: Exception) -> None:
        node_id = self.mirror.by_ticket.get(ticket)
        detail = "".join(traceback.format_exception_only(e)).strip()
        self.store.add_event(
            self.run_id,
            "error",
            f"candidate {ticket[:8]} (node {node_id}): {detail}",
            node_id,
            {"traceback": traceback.format_exc()[-4000:]},
        )
        if node_id is not None and not self.mirror.get(node_id).status.is_finished():
            self.mirror.finish(
                node_id,
                NodeStatus.FAILED,
                f"node {node_id} failed: {detail}",
                error=detail,
                error_kind="internal",
            )

    def _decided(self) -> list[str]:
        """The parked tickets whose decision is now stored (or whose node finished)."""
        if not self.waiting:
            return []
        attempts = {n: self.mirror.get(n).attempt for n in self.waiting.values()}
        decided = self.store.decisions(self.run_id, attempts)
        out = []
        for ticket, node_id in list(self.waiting.items()):
            if node_id in decided or self.mirror.get(node_id).status.is_finished():
                del self.waiting[ticket]
                out.append(ticket)
        return out

    def run(self, resume: list[str], stop: threading.Event) -> str | None:
        """Schedule until a budget or the search ends, or ``stop``; why it ended."""
        p = self.p
        resume = self.parked_last(resume)
        in_flight: dict[Future[str], str] = {}
        starved, reason, last_beat = False, None, time.monotonic()
        chain = self.steps.chain  # at parallel 1: one more candidate beside an evaluation
        if chain.on:  # resumed in the order they started
            resume.sort(key=lambda t: self.mirror.by_ticket.get(t, len(self.mirror.nodes)))
        size = p.width() + chain.on if p.auto is None else 2 * AUTO_MAX  # auto: width moves
        early: dict[int, Future[None]] = {}  # node -> its final check begun (``_early``)
        # the first wave: until every slot is held once (``filled``) or a ticket ends, no
        # candidate starts ahead of a free slot (at parallel 1 ``Chain`` has its own), so
        # the first ones get the processor to themselves rather than share it with those
        # prepared ahead, whose slots free only as an evaluation ends (issue 24: at K = 4
        # their proposals took 2-3x as long, the slots idle meanwhile); parked tickets
        # hold no slot and do not count
        filled: Future[None] | None = None
        first_wave = not chain.on
        with ThreadPoolExecutor(size, thread_name_prefix="candidate") as pool:
            while not stop.is_set() and self.fatal is None:
                resume += self._decided()
                woke = chain.wake()  # before looking: a ticket ready meanwhile wakes
                while len(in_flight) + len(self.waiting) < p.width() + chain.may_start():
                    if first_wave and len(in_flight) >= p.slots.limit:
                        filled = filled or p.slots.filled()
                        first_wave = not filled.done()
                        if first_wave:
                            break
                    new = not resume
                    if resume:
                        ticket = resume.pop(0)
                        self._driving(ticket, True)
                    elif starved or (reason := self._budget()) is not None:
                        chain.release()
                        break
                    else:
                        ticket = uuid.uuid4().hex
                        self.tickets.start(ticket)
                    chain.started(ticket)
                    in_flight[pool.submit(self.candidate, ticket, new)] = ticket
                if reason is not None:
                    self._early(pool, in_flight, early)
                if not in_flight and not self.waiting:
                    reason = reason or "search exhausted: the policy proposes nothing more"
                    break
                if not in_flight and (spent := p.budget.reason(starting=False)) is not None:
                    reason = self._abandon_waiting(spent)  # no evaluation may start: end
                    break
                if not in_flight:  # every candidate waits for a decision
                    stop.wait(POLL)
                # an early check that ends frees a slot for the next (``_early``)
                checks = [f for f in early.values() if not f.done()]
                pending = [filled] if first_wave and filled and not filled.done() else []
                looked: list[Future[Any]] = [*in_flight, woke, *checks, *pending]
                done, _ = wait(looked, timeout=POLL, return_when=FIRST_COMPLETED)
                finished = [fut for fut in done if fut in in_flight]
                tickets = [in_flight.pop(fut) for fut in finished]
                beside = [chain.ended(ticket) for ticket in tickets]
                for ticket in tickets:
                    self._driving(ticket, False)
                for fut, ticket in zip(finished, tickets, strict=True):
                    if fut.result() == "waiting":
                        self.waiting[ticket] = self.mirror.by_ticket[ticket]
                ended = zip(finished, tickets, strict=True)
                self._prune([t for f, t in ended if f.result() in ("done", "error")])
                first_wave = first_wave and not tickets  # a ticket ended: the run is on
                if tickets:  # else woken by a ticket ready (``chain``): no slot freed
                    starved = self.tickets.ended(tickets) and not any(beside)
                if time.monotonic() - last_beat > HEARTBEAT:
                    last_beat = time.monotonic()
                    self.store.update_run(
                        self.run_id, heartbeat_at=time.time(), wall_used=p.budget.wall_used()
                    )
            if stop.is_set() or self.fatal is not None:
                p.cancel.set()
                wait(in_flight)
            while early and wait(early.values(), timeout=POLL).not_done:  # a stop cancels them
                if stop.is_set():
                    p.cancel.set()
        self._prune([], at_end=True)
        return reason

    def _early(
        self,
        pool: ThreadPoolExecutor,
        in_flight: dict[Future[str], str],
        began: dict[int, Future[None]],
    ) -> None:
        """Once a budget lets no candidate start, at ``parallel`` > 1: the baseline's
        final verification begins in a slot that no candidate in flight will take
        (``Trust.early``), beside the last candidates rather than after them, with one
        slot busy and the others idle; the best's too, in a slot still free (one of the
        last candidates may displace it: a check spent for nothing, but in a slot that
        was idle, where waiting for the last one to end made the run's last seconds one
        evaluation alone), beside the baseline's if that still runs. ``finalize`` then
        waits for them and reuses their repeats. Where the task bounds the sandbox
        seconds, ``finalize`` does it all (the seconds spent here could leave a candidate
        in flight none). ``began``: node -> its check's future, added to here (the loop
        wakes when one ends: the slot it frees may take the next)."""
        slots, spec = self.p.slots.limit, self.p.spec
        if slots < 2 or self.fatal is not None or self.waiting or not (in_flight or began):
            return
        if spec.budget.max_sandbox_seconds is not None or spec.trust.verify_repeats < 2:
            return
        driven = {self.mirror.by_ticket.get(t) for t in in_flight.values()}
        for node in (0, self.mirror.best_id):
            busy = len(in_flight) + sum(not f.done() for f in began.values())
            if node is None or node in began or node in driven or busy >= slots:
                continue  # (a best whose own ticket runs verifies itself: ``Trust.best``)
            if self.mirror.get(node).status is not NodeStatus.SUCCEEDED:
                continue  # (the baseline still at its first run: a later look)
            began[node] = pool.submit(self.steps.trust.early, node)

    def _prune(self, ended: list[str], at_end: bool = False) -> None:
        """Every ``PRUNE_EVERY`` candidates whose thread ended, delete the checkpoints of
        those finished (``checkpoints.prune_run``), and when scheduling ends, of every
        finished candidate of the run (a resumed run's older ones too): a finished
        candidate's state is in the SQL rows, and its checkpoints would otherwise stay
        until ``revtree gc``. A prune that fails leaves its tickets to the next."""
        self.unpruned += ended
        if self.prune_every <= 0 or len(self.unpruned) < (1 if at_end else self.prune_every):
            return
        tickets = None if at_end else self.unpruned
        with contextlib.suppress(Exception):  # disk reclaimed later by gc, never a failure
            prune_run(self.store, self.run_id, checkpoint_tables(self.store), tickets)
            self.unpruned = []

    def _abandon_waiting(self, spent: str) -> str:
        """The budget is spent while candidates wait: none could be evaluated in this
        session. They stay unfinished (their decision, if any comes, is kept) for a
        ``resume`` with more budget."""
        nodes = sorted(self.waiting.values())
        self.waiting.clear()
        self.store.add_event(
            self.run_id,
            "warning",
            f"{spent} while node(s) {nodes} wait for approval: they stay unfinished; "
            "raise the budget (`revtree retry --set` or a fork) and `revtree resume`",
            None,
            {"waiting": nodes},
        )
        return spent

    def parked_last(self, tickets: list[str]) -> list[str]:
        """Resumed tickets, those parked at approval last (so that they do not take the
        width from candidates that were mid-way)."""

        def parked(ticket: str) -> bool:
            config = {"configurable": {"thread_id": f"{self.run_id}:{ticket}"}}
            return tuple(self.graph.get_state(config).next) == ("approve",)

        return sorted(tickets, key=parked)

    def _driving(self, ticket: str, on: bool) -> None:
        """Tell the mirror that a resumed candidate's node is driven (or no longer): a
        child's prompt waits for its score only while it is."""
        if (node_id := self.mirror.by_ticket.get(ticket)) is not None:
            (self.mirror.driven.add if on else self.mirror.driven.discard)(node_id)

    def _budget(self) -> str | None:
        return self.p.budget.reason(starting=True, pending=self.tickets.pending())
