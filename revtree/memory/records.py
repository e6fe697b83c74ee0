"""Immutable records that cross package boundaries.

Only the orchestrator changes state, and it does so through the Store; everything
else receives frozen snapshots. :class:`Score` makes the metric direction a type: it
orders by *better*, with a worst sentinel for failed candidates, so ``max(scores)`` is
always the best.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import total_ordering
from typing import Any


class NodeStatus(enum.StrEnum):
    PENDING = "pending"  # selected, not yet proposed
    PROPOSED = "proposed"
    CODED = "coded"  # committed to git
    REVIEWED = "reviewed"  # accepted by the reviewer
    EVALUATING = "evaluating"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"

    def is_finished(self) -> bool:
        return self in (NodeStatus.SUCCEEDED, NodeStatus.FAILED, NodeStatus.REJECTED)


class RunStatus(enum.StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"  # budget spent or search exhausted
    STOPPED = "stopped"  # by the user; resumable
    FAILED = "failed"  # the orchestrator itself failed; resumable

    def is_finished(self) -> bool:
        return self is not RunStatus.RUNNING


# The largest magnitude a score may have: a candidate's metric beyond it is refused (its
# node fails, naming the limit), so sums of scores, their differences and the gain's
# statistics stay finite. Readers still go through finite_mean, since a store written
# before the limit may hold any finite double.
SCORE_LIMIT = 1e300


def score_problem(name: str, value: float) -> str | None:
    """Why ``value`` cannot be the score ``name``: not finite, or beyond SCORE_LIMIT."""
    if not math.isfinite(value):
        return f"metric {name!r} is {value} (not finite)"
    if abs(value) > SCORE_LIMIT:
        return f"metric {name!r} is {value:.6g}, beyond the limit of +/-{SCORE_LIMIT:g} on scores"
    return None


def finite_mean(values: Sequence[float]) -> float | None:
    """The mean of ``values`` computed without overflow (each divided by the count before
    the exact sum); None when there are none or one is not finite. Values all equal are
    their own mean: dividing first rounds (a third of -3.3694191710748904, three times,
    sums to 4e-16 off), and a deterministic evaluator's repeats then read as noise."""
    if not values or not all(math.isfinite(v) for v in values):
        return None
    if all(v == values[0] for v in values):
        return float(values[0])
    n = len(values)
    try:
        mean = math.fsum(v / n for v in values)
    except OverflowError:  # rounding of values next to the largest double
        return None
    return mean if math.isfinite(mean) else None


def directed(value: float, maximize: bool) -> float:
    """``value`` turned so that larger is better: itself when maximising, negated when
    minimising. What :class:`Score` orders by, for plain numbers (gains, differences,
    sort keys); the one place the direction's sign is written."""
    return value if maximize else -value


def ordered(value: float | None, maximize: bool) -> float:
    """The float a ``Score`` of ``value`` orders by: the directed value, or minus infinity
    for none or a value that is not finite."""
    if value is None or not math.isfinite(value):
        return -math.inf
    return directed(value, maximize)


@total_ordering
@dataclass(frozen=True)
class Score:
    """A metric value that orders by *better*. ``Score.worst(maximize)`` is below all."""

    value: float | None
    maximize: bool

    @classmethod
    def worst(cls, maximize: bool) -> Score:
        return cls(None, maximize)

    @property
    def is_valid(self) -> bool:
        return self.value is not None and math.isfinite(self.value)

    def _key(self) -> float:
        return ordered(self.value, self.maximize)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Score):
            return NotImplemented
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Score):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def gain_over(self, other: Score) -> float | None:
        """How much better this score is than ``other`` (negative: worse), in the metric's
        units; None when either is not a valid score."""
        if not (self.is_valid and other.is_valid):
            return None
        return self._key() - other._key()

    def __str__(self) -> str:
        return "-" if self.value is None else f"{self.value:.6g}"


@dataclass(frozen=True)
class Node:
    """One candidate revision in a run's tree."""

    run_id: str
    id: int
    parent_id: int | None
    operator: str
    status: NodeStatus
    depth: int = 0
    commit: str | None = None
    proposal: dict[str, Any] | None = None
    score: float | None = None
    score_std: float | None = None
    n_evals: int = 0
    error: str | None = None
    error_kind: str | None = None
    thread_id: str | None = None
    created_at: float = 0.0
    finished_at: float | None = None
    extra_parents: tuple[int, ...] = ()
    review: dict[str, Any] | None = None
    lesson: str | None = None
    attempt: int = 1  # raised by each `revtree retry` of the node
    # a drift alarm ({"kind", "message", "dev", "holdout"}): never recommended, not exploited
    alarm: dict[str, Any] | None = None
    # what a succeeded node measures besides its score, for the evolution policy's
    # MAP-Elites features: "code_size" (characters of the editable files), "diff_size"
    # (lines changed from the parent), "drift" (lines changed from the baseline) and
    # "metric:NAME" (the evaluator's numeric metrics, averaged over repeats)
    features: dict[str, float] | None = None

    def score_of(self, maximize: bool) -> Score:
        """The node's score as the search ranks it: the worst for a node that did not
        succeed or that carries a drift alarm (so no policy exploits it)."""
        if self.status is not NodeStatus.SUCCEEDED or self.alarm is not None:
            return Score.worst(maximize)
        return Score(self.score, maximize)

    def rank(self, maximize: bool) -> float:
        """What ``score_of(maximize)`` orders by, without a ``Score`` (sorting thousands
        of nodes compares floats, not Python objects)."""
        if self.status is not NodeStatus.SUCCEEDED or self.alarm is not None:
            return -math.inf
        return ordered(self.score, maximize)


# (The stage names readers look for are in revtree.memory.stages.)
TWIN = "duplicate"  # the error kind of a candidate refused as a near twin, unevaluated


@dataclass(frozen=True)
class EvalResult:
    """One run of one stage of the evaluator on one node. Unique by (node, stage, repeat,
    attempt): a retried node's earlier attempts keep their rows."""

    node_id: int
    stage: str
    repeat: int
    ok: bool
    score: float | None
    metrics: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    duration: float = 0.0
    stdout_tail: str = ""
    stderr_tail: str = ""
    error: str | None = None
    error_kind: str | None = None
    log_path: str | None = None
    attempt: int = 1
    host: str | None = None  # where it ran, where known (a Ray worker: host/node)
    gpus: tuple[str, ...] = ()  # the GPU ids it was given


@dataclass(frozen=True)
class Decision:
    """A user's decision on a candidate waiting for approval (``revtree approve``)."""

    accepted: bool
    why: str = ""


@dataclass(frozen=True)
class Event:
    """One line of the live log. ``seq`` increases by one per event within a run."""

    run_id: str
    seq: int
    ts: float
    kind: str
    message: str
    node_id: int | None = None
    data: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunInfo:
    """A run as stored."""

    id: str
    task_name: str
    status: RunStatus
    policy: str
    direction: str
    spec: dict[str, Any]
    seed: int
    created_at: float
    updated_at: float
    reason: str | None = None
    pid: int | None = None
    host: str | None = None
    wall_used: float = 0.0
    policy_state: dict[str, Any] | None = None
    parent_run: str | None = None
    parent_node: int | None = None

    @property
    def maximize(self) -> bool:
        return self.direction == "maximize"


@dataclass(frozen=True)
class LLMCall:
    """One model call, with what it cost."""

    role: str
    model: str
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    cost_usd: float
    latency: float
    ok: bool
    node_id: int | None = None
    error: str | None = None
    prompt: str | None = None  # what the model was asked (redacted, capped)
    response: str | None = None  # what it answered (capped)
