"""The ``Orchestrator``: one run driven to its end, from the parts ``wiring`` builds.

It composes, and holds no logic of its own beyond the run's life cycle: claim the run,
say how it starts, let the scheduler run the candidates' graphs, then close. A run
that reaches a budget stops starting work, lets the candidates in flight finish, runs
the final checks of its best (``verify.Trust.finalize``) and ends ``completed`` with
the reason recorded. A stop request (Ctrl-C, SIGTERM) cancels the evaluations in flight
without recording them, so ``resume`` re-runs exactly what was not stored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

from revtree import collector
from revtree.agents.driver import driver
from revtree.errors import Cancelled
from revtree.memory import Event, Node, RunInfo, RunStatus, Store
from revtree.memory.checkpoints import close as close_saver
from revtree.memory.checkpoints import make_checkpointer
from revtree.orchestrator.pipeline import build_pipeline
from revtree.orchestrator.run import resume_hint
from revtree.orchestrator.scheduler import Scheduler
from revtree.orchestrator.steps import Steps
from revtree.orchestrator.tickets import Tickets
from revtree.orchestrator.tree import Tree
from revtree.orchestrator.trust import infra_cause
from revtree.orchestrator.verify import Trust
from revtree.orchestrator.wiring import wire
from revtree.sandboxes import Sandbox

EventSink = Callable[[Event], None]  # called after commit, in seq order

# LangGraph writes a thread's checkpoint when the thread exits (done, stopped, parked
# for approval, or failed), not after every step: the per-step writes were 5-6 ms of
# CPU per candidate; a thread killed mid-way replays from its last exit or its start,
# each step skipping what SQL holds (docs/architecture.md). REVTREE_DURABILITY=async or
# sync: every step.
DURABILITY = "exit"


class Orchestrator:
    """Drives one run until its budget is spent or a stop is requested."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        home: Path | None = None,
        sandbox: Sandbox | None = None,
        on_event: EventSink | None = None,
        parallel: int | str | None = None,
    ) -> None:
        if on_event is not None:
            store.listeners.append(on_event)
        self.parts = p = wire(store, run_id, home, sandbox, parallel)
        self.store, self.run_id, self.spec, self.git = store, p.run_id, p.spec, p.git
        self.mirror, self.agents, self.policy = p.mirror, p.agents, p.policy
        self.trust = Trust(p)
        tickets = Tickets(p.mirror.lock)  # the scheduler's; ``select`` reports to it
        self.steps = Steps(p, self.trust, tickets)
        self.checkpointer = make_checkpointer(store.url)
        self.graph = build_pipeline(self.steps, self.checkpointer)
        durability = os.environ.get("REVTREE_DURABILITY", DURABILITY)
        self.scheduler = Scheduler(p, self.steps, self.graph, durability, tickets)

    @property
    def nodes(self) -> dict[int, Node]:
        return self.mirror.nodes

    def snapshot(self) -> Tree:
        return self.mirror.snapshot()

    def candidate(self, ticket: str) -> str:
        """Drive one candidate's pipeline thread (``revtree retry`` re-runs one)."""
        collector.settle()  # the imports are done (revtree.collector)
        return self.scheduler.candidate(ticket)

    def drive(self, stop: threading.Event | None = None) -> RunInfo:
        """Run until the budget is spent, the search is exhausted or ``stop`` is set."""
        stop, p = stop or threading.Event(), self.parts
        collector.settle()  # the imports are done (revtree.collector)
        p.claim()
        p.sandbox.reap()  # leftovers of a killed session of this run
        p.budget.restart_clock()
        resume = sorted(
            (n for n in self.nodes.values() if not n.status.is_finished()), key=lambda n: n.id
        )
        fresh = len(self.nodes) == 1 and (not resume or resume[0].id == 0)
        ahead = (
            "+1 prepared beside each evaluation"
            if p.chained()
            else f"+{p.lookahead} prepared ahead"
        )
        self.store.add_event(
            self.run_id,
            "run",
            f"run {'started' if fresh else 'resumed'}: policy {self.policy.name}, "
            f"agents {self.agents.label}, parallel {p.parallel_text()} "
            f"({ahead}), "
            f"sandbox {p.sandbox.name} ({p.choice.reason})"
            + ("" if fresh else f", {len(resume)} candidate(s) to resume"),
            None,
        )
        if fresh:
            self._start_warnings()
        if p.auto is not None:
            p.auto.start()
        try:
            reason = self.scheduler.run([n.thread_id or "" for n in resume], stop)
        except BaseException as e:  # the orchestrator itself failed: say so, resumable
            p.cancel.set()
            detail = "".join(traceback.format_exception_only(e)).strip()
            with contextlib.suppress(Exception):
                self.store.update_run(
                    self.run_id,
                    ("run", f"run failed: {detail}", None),
                    status=RunStatus.FAILED,
                    reason=detail,
                    pid=None,
                    wall_used=p.budget.wall_used(),
                )
            self.close()
            raise
        return self._close(reason, stop.is_set(), stop)

    def _start_warnings(self) -> None:
        """Said once, when a run starts: what its sandbox and its scoring channel do not
        protect against."""
        spec, warn = self.spec, []
        if self.parts.choice.warning:
            warn.append(self.parts.choice.warning)
        chosen = driver(spec)
        if chosen.knobs and not spec.knobs:  # only where the task's mode says knobs
            warn.append(
                "agents: mode 'knobs' but the task declares no [[knobs]]: every candidate "
                "would be the unchanged code, refused unevaluated; declare knobs, or use "
                "mode 'mutate' or a model"
            )
        if (why := chosen.offline_reason) is not None:
            warn.append(
                f"agents: {why}; the offline agents drive this run (set the key, or "
                '`--model`/`[agents] mode = "llm"` to insist)'
            )
        h = spec.holdout
        if h is not None and h.grade is None and not spec.evaluate.forgeable:
            warn.append(
                "the holdout has no [holdout.grade]: it reads its score from the candidate's "
                "own run, so a candidate can forge its guard and final holdout (and so dodge "
                "the drift alarm); declare [holdout.grade] as for [evaluate.grade]"
            )
        if spec.evaluate.forgeable:
            warn.append(
                "single-step evaluator: the evaluator runs in the same sandbox as the "
                "candidate's code, so a candidate can forge its score (an atexit hook, a write "
                "to the metrics channel, patching the evaluator in memory, an early exit); "
                "declare [evaluate.grade] to score its outputs in a fresh sandbox that never "
                "holds its code (README: the grade step)"
            )
        for message in warn:
            self.store.add_event(self.run_id, "warning", message, None)

    def _finalize_unless(self, stop: threading.Event | None) -> None:
        """The final checks, cancelled (``Cancelled``) if ``stop`` is set meanwhile."""
        done, cancel = threading.Event(), self.parts.cancel

        def watch() -> None:  # wakes at once when the checks end (the run's last step)
            while not done.wait(0.1):
                if stop is not None and stop.is_set():
                    cancel.set()
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            self.trust.finalize()
        finally:
            done.set()
            watcher.join()

    def _close(
        self, reason: str | None, stopped: bool, stop: threading.Event | None = None
    ) -> RunInfo:
        fatal = self.scheduler.fatal
        if fatal is not None:
            status = RunStatus.FAILED  # and the command that continues after the fix
            reason = f"{fatal}; {resume_hint(self.run_id, self.mirror.get(0).score is None)}"
        elif stopped:
            status, reason = RunStatus.STOPPED, "stopped by the user; `revtree resume` continues"
        else:
            status = RunStatus.COMPLETED
            try:
                self._finalize_unless(stop)
            except Cancelled:
                status, reason = (
                    RunStatus.STOPPED,
                    "stopped by the user during the final checks; `revtree resume` runs them",
                )
            except Exception as e:  # the best is unchecked: never report it as done
                detail = infra_cause(e) or "".join(traceback.format_exception_only(e)).strip()
                status = RunStatus.FAILED
                reason = f"the final checks of the best failed: {detail}; `revtree resume` "
                reason += "runs them again"
        best = self.mirror.best_id
        msg = f"run {status.value}: {reason}" + (f"; best node {best}" if best is not None else "")
        try:
            self.store.update_run(
                self.run_id,
                ("run", msg, {"status": status.value}),
                status=status,
                reason=reason,
                wall_used=self.parts.budget.wall_used(),
                pid=None,
            )
        except Exception:  # the store itself failed (a full disk): say so all the same
            if fatal is None:
                raise
            self.close()
            return dataclasses.replace(
                self.store.get_run(self.run_id), status=status, reason=reason
            )
        self.close()
        return self.store.get_run(self.run_id)

    def close(self) -> None:
        if self.parts.auto is not None:
            self.parts.auto.stop()
        self.git.close()
        self.parts.sandbox.close()
        close_saver(self.checkpointer)
