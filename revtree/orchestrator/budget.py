"""What a run has spent, and whether it may start more: nodes, wall time, sandbox
seconds, the model budget, and the evaluations spent on trust (verify, guard).

A near twin (refused before any sandbox, ``records.TWIN``) is not a node of
``max_nodes``: it cost no evaluation. The twins have a bound of their own,
``max_twins`` (default: ``max_nodes``), so a proposer that keeps repeating itself ends
the run instead of looping; the model budget (``max_usd``, ``max_tokens``) and the wall
time count them as any candidate.

Budgets are checked before a candidate starts and again when its evaluation gets a
slot. Trust shares are counted in evaluations, not seconds, so a resumed run decides
exactly as an uninterrupted one would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from revtree.memory import Store
from revtree.memory.stages import GUARD
from revtree.tasks import TaskSpec


class Budget:
    """The spending of one run (this session's, on top of what earlier ones stored)."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        spec: TaskSpec,
        wall_before: float,
        n_nodes: Callable[[], int],
        spent: Callable[[], str | None] = lambda: None,
        n_twins: Callable[[], int] = lambda: 0,
    ) -> None:
        """``n_nodes``: the nodes that count toward ``max_nodes`` (twins left out);
        ``n_twins``: the near twins."""
        self.limits, self.wall_before = spec.budget, wall_before
        self.n_nodes, self.model_spent, self.n_twins = n_nodes, spent, n_twins
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.sandbox_seconds = store.sandbox_seconds(run_id)
        counts = store.evaluations_by_kind(run_id, spec.evaluate.repeats)
        self.trust = {"verify": counts.get("verify", 0), GUARD: counts.get(GUARD, 0)}
        self.n_evals = sum(counts.values())

    def restart_clock(self) -> None:
        self.started = time.monotonic()

    def wall_used(self) -> float:
        return self.wall_before + time.monotonic() - self.started

    def spend(self, seconds: float, kind: str | None = None, counted: bool = True) -> None:
        """One evaluation done: its sandbox time, and (``kind``) its trust share."""
        with self.lock:
            self.sandbox_seconds += seconds
            self.n_evals += 1
            if kind is not None and counted:
                self.trust[kind] += 1

    def share_ok(self, kind: str, share: float, n_new: int) -> bool:
        """Whether ``n_new`` more ``kind`` evaluations stay within ``share`` of all."""
        with self.lock:
            return self.trust[kind] + n_new <= share * (self.n_evals + n_new)

    def reason(self, starting: bool = True, pending: int = 0) -> str | None:
        """Why no new work may start, if a budget is spent. ``starting=False`` checks an
        evaluation of a node that already exists (the node count does not apply);
        ``pending`` candidates are started but have no node yet."""
        if (spent := self.model_spent()) is not None:
            return spent
        b = self.limits
        if starting and b.max_nodes is not None and self.n_nodes() + pending >= b.max_nodes:
            return f"budget: max_nodes={b.max_nodes} reached"
        twins = b.max_twins if b.max_twins is not None else b.max_nodes
        if starting and twins is not None and self.n_twins() >= twins:
            return f"budget: max_twins={twins} reached (near twins refused unevaluated)"
        if b.max_wall is not None and self.wall_used() >= b.max_wall:
            return f"budget: max_wall={b.max_wall:g}s reached"
        if b.max_sandbox_seconds is not None and self.sandbox_seconds >= b.max_sandbox_seconds:
            return f"budget: max_sandbox_seconds={b.max_sandbox_seconds:g} reached"
        return None

    def fraction(self) -> float:
        """The share of the tightest budget spent, 0..1 (what policies schedule by)."""
        b, used = self.limits, [0.0]
        if b.max_nodes:
            used.append(self.n_nodes() / b.max_nodes)
        if b.max_wall:
            used.append(self.wall_used() / b.max_wall)
        if b.max_sandbox_seconds:
            used.append(self.sandbox_seconds / b.max_sandbox_seconds)
        return min(1.0, max(used))
