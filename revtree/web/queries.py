"""The dashboard's SQL: lean reads of the tables in ``revtree.memory.models`` that the
Store has no method for, sized for runs of 10k nodes.

- :class:`SummaryView` is a read model over a Store (a
  :class:`~revtree.memory.reads.RunReads`, no write methods) whose reads carry only what
  ``report.summarize`` looks at (nodes without their texts, the evaluations it reads,
  model calls without prompts), so that the summary of a 10k-node run is the very
  function ``revtree show --json`` runs, at a fraction of the cost.
- ``node_columns``: a run's nodes as columns (the tree view's data), whole or only
  those changed since an event seq (a live page's poll).
- ``run_marks``: per run, what changes whenever anything in it changes (the cache key).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Text, case, cast, func, or_, select
from sqlalchemy.engine import Connection

from revtree.memory import Store
from revtree.memory.db import transaction
from revtree.memory.models import CALLS, EVALS, EVENTS, NODES, RUNS
from revtree.memory.records import (
    TWIN,
    Decision,
    EvalResult,
    Event,
    LLMCall,
    Node,
    NodeStatus,
    directed,
)
from revtree.memory.rows import row_to_eval
from revtree.memory.stages import FULL, GUARD, HOLDOUT

HYPOTHESIS_CHARS = 80
MAX_CHANGED = 5000  # a delta of more nodes is answered whole (and bounds an IN list)


def alarm_text() -> Any:
    """The alarm column as its JSON text: most are null, and need no decoding."""
    return cast(NODES.c.alarm, Text).label("alarm")


def _lean_nodes(conn: Connection, run_id: str) -> list[Node]:
    rows = conn.execute(
        select(
            NODES.c.id,
            NODES.c.parent_id,
            NODES.c.operator,
            NODES.c.status,
            NODES.c.depth,
            NODES.c.score,
            NODES.c.score_std,
            NODES.c.n_evals,
            NODES.c.created_at,
            NODES.c.finished_at,
            NODES.c.attempt,
            NODES.c.error_kind,  # the summary counts near twins by it
            # and a twin's error: which check found it (the rest need no error text)
            case((NODES.c.error_kind == TWIN, NODES.c.error), else_=None).label("error"),
            alarm_text(),
        )
        .where(NODES.c.run_id == run_id)
        .order_by(NODES.c.id)
    ).all()
    return [
        Node(
            run_id,
            r.id,
            r.parent_id,
            r.operator,
            NodeStatus(r.status),
            depth=r.depth,
            score=r.score,
            score_std=r.score_std,
            n_evals=r.n_evals,
            created_at=r.created_at,
            finished_at=r.finished_at,
            attempt=r.attempt,
            error_kind=r.error_kind,
            error=r.error,
            alarm=None if r.alarm in (None, "null") else json.loads(r.alarm),
        )
        for r in rows
    ]


def best_of(nodes: list[Node], maximize: bool) -> Node | None:
    """``Tree.best``: the best succeeded node without a drift alarm (lowest id on ties)."""
    best: Node | None = None
    top = -math.inf
    for n in nodes:
        if n.status is not NodeStatus.SUCCEEDED or n.alarm is not None:
            continue
        if n.score is None or not math.isfinite(n.score):
            continue
        key = directed(n.score, maximize)
        if best is None or key > top:
            best, top = n, key
    return best


class SummaryView:
    """The reads of ``report.summarize`` (a :class:`~revtree.memory.reads.RunReads`)
    over a Store, lean where a run is large: ``nodes`` have no proposal, review or
    lesson; ``evaluations`` of a whole run are those summarize reads (holdout, guard,
    and the full stage of the root and the best, as found by the last ``nodes`` of the
    run); ``llm_calls`` have no prompt or answer. The other reads are the Store's own;
    it has no write methods."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.best: dict[str, int | None] = {}

    def nodes(self, run_id: str) -> list[Node]:
        with transaction(self.store.engine) as conn:
            nodes = _lean_nodes(conn, run_id)
        maximize = self.store.get_run(run_id).maximize
        best = best_of(nodes, maximize)
        self.best[run_id] = best.id if best else None
        return nodes

    def evaluations(
        self, run_id: str, node_id: int | None = None, stage: str | None = None
    ) -> list[EvalResult]:
        if node_id is not None or stage is not None:
            return self.store.evaluations(run_id, node_id, stage)
        best = self.best.get(run_id)
        wanted = [0] if best is None else [0, best]
        query = select(EVALS).where(
            EVALS.c.run_id == run_id,
            or_(
                EVALS.c.stage.in_((HOLDOUT, GUARD)),
                (EVALS.c.stage == FULL) & EVALS.c.node_id.in_(wanted),
            ),
        )
        with transaction(self.store.engine) as conn:
            rows = conn.execute(query.order_by(EVALS.c.id)).all()
        return [row_to_eval(r) for r in rows]

    def llm_calls(self, run_id: str) -> list[LLMCall]:
        with transaction(self.store.engine) as conn:
            rows = conn.execute(
                select(
                    CALLS.c.role,
                    CALLS.c.model,
                    CALLS.c.input_tokens,
                    CALLS.c.output_tokens,
                    CALLS.c.cached_tokens,
                    CALLS.c.cache_write_tokens,
                    CALLS.c.cost_usd,
                    CALLS.c.latency,
                    CALLS.c.ok,
                    CALLS.c.node_id,
                    CALLS.c.error,
                )
                .where(CALLS.c.run_id == run_id)
                .order_by(CALLS.c.id)
            ).all()
        return [LLMCall(*r) for r in rows]

    def sandbox_seconds(self, run_id: str) -> float:
        return self.store.sandbox_seconds(run_id)

    def decisions(self, run_id: str, nodes: dict[int, int]) -> dict[int, Decision]:
        return self.store.decisions(run_id, nodes)

    def events_since(self, run_id: str, after: int = 0, limit: int = 1000) -> list[Event]:
        return self.store.events_since(run_id, after, limit)


def run_marks(store: Store, run_id: str | None = None) -> dict[str, tuple[Any, ...]]:
    """Run id -> (last event seq, updated_at, model calls): every change of a run moves
    one of them (a state change comes with its event; model calls are counted)."""
    runs_q = select(RUNS.c.id, RUNS.c.last_event, RUNS.c.updated_at)
    calls_q = select(CALLS.c.run_id, func.count()).group_by(CALLS.c.run_id)
    if run_id is not None:
        runs_q = runs_q.where(RUNS.c.id == run_id)
        calls_q = calls_q.where(CALLS.c.run_id == run_id)
    with transaction(store.engine) as conn:
        runs = conn.execute(runs_q).all()
        calls = {r[0]: r[1] for r in conn.execute(calls_q).all()}
    return {r.id: (r.last_event, r.updated_at, calls.get(r.id, 0)) for r in runs}


def last_seq(store: Store, run_id: str) -> int:
    with transaction(store.engine) as conn:
        seq = conn.execute(select(RUNS.c.last_event).where(RUNS.c.id == run_id)).scalar()
    return int(seq or 0)


FINISHED = [s.value for s in NodeStatus if s.is_finished()]


def changed_ids(conn: Connection, run_id: str, since: int) -> list[int]:
    """The nodes an answer ``since`` event seq must carry: those named by an event after
    it, and every node still in flight (a step of one may be stored without an event).
    A node inserted without its own event (a fork's copied history) is caught by the
    client, which compares its count with the answer's ``n`` and then reads all."""
    named = (
        select(EVENTS.c.node_id)
        .where(EVENTS.c.run_id == run_id, EVENTS.c.seq > since, EVENTS.c.node_id.is_not(None))
        .distinct()
    )
    flying = select(NODES.c.id).where(NODES.c.run_id == run_id, NODES.c.status.not_in(FINISHED))
    return sorted(set(conn.execute(named).scalars()) | set(conn.execute(flying).scalars()))


def best_lineage(conn: Connection, run_id: str, maximize: bool) -> tuple[int | None, list[int]]:
    """The best node (``Tree.best``'s rule, over lean columns) and its ancestry, root first."""
    rows = conn.execute(
        select(NODES.c.id, NODES.c.parent_id, NODES.c.status, NODES.c.score, alarm_text())
        .where(NODES.c.run_id == run_id)
        .order_by(NODES.c.id)
    ).all()
    return lineage_of([tuple(r) for r in rows], maximize)


def lineage_of(rows: Sequence[Sequence[Any]], maximize: bool) -> tuple[int | None, list[int]]:
    """:func:`best_lineage` of rows whose first five columns are ``id, parent_id, status,
    score, alarm`` (plain tuples: a Row's attributes cost a microsecond apiece)."""
    best: int | None = None
    top = 0.0
    ok = NodeStatus.SUCCEEDED.value
    for i, _, st, s, alarm in (r[:5] for r in rows):
        if st != ok or alarm not in (None, "null") or s is None or not math.isfinite(s):
            continue
        if best is None or directed(s, maximize) > directed(top, maximize):
            best, top = i, s
    up = {r[0]: r[1] for r in rows}
    lineage: list[int] = []
    node: int | None = best
    while node is not None and len(lineage) <= len(rows):
        lineage.append(node)
        node = up.get(node)
    lineage.reverse()
    return best, lineage


def _verified(conn: Connection, run_id: str, repeats: int, ids: list[int] | None) -> set[int]:
    query = (
        select(EVALS.c.node_id)
        .join(NODES, (NODES.c.run_id == EVALS.c.run_id) & (NODES.c.id == EVALS.c.node_id))
        .where(
            EVALS.c.run_id == run_id,
            EVALS.c.stage == FULL,
            EVALS.c.repeat >= repeats,
            EVALS.c.attempt == NODES.c.attempt,
            EVALS.c.ok.is_(True),
        )
    )
    if ids is not None:
        query = query.where(EVALS.c.node_id.in_(ids))
    return set(conn.execute(query.distinct()).scalars())


def node_columns(
    store: Store, run_id: str, maximize: bool, repeats: int, since: int | None = None
) -> dict[str, Any]:
    """A run's nodes as columns (``GET /api/runs/{id}/nodes``), see docs/dashboard.md.
    ``since`` (an event seq): only the nodes :func:`changed_ids` names, for a live page
    that holds the rest; ``seq`` is the cursor of the next ask, ``n`` the run's count."""
    hypothesis = NODES.c.proposal["hypothesis"].as_string()
    with transaction(store.engine) as conn:
        seq = int(conn.execute(select(RUNS.c.last_event).where(RUNS.c.id == run_id)).scalar() or 0)
        ids = None if since is None else changed_ids(conn, run_id, since)
        if ids is not None and len(ids) > MAX_CHANGED:  # as much as the whole: send the whole
            ids, since = None, None
        query = select(
            NODES.c.id,
            NODES.c.parent_id,
            NODES.c.status,
            NODES.c.score,
            NODES.c.operator,
            NODES.c.created_at,
            NODES.c.finished_at,
            alarm_text(),
            hypothesis,
            cast(NODES.c.extra_parents, Text).label("extra"),
        ).where(NODES.c.run_id == run_id)
        if ids is not None:
            query = query.where(NODES.c.id.in_(ids))
        rows = [tuple(r) for r in conn.execute(query.order_by(NODES.c.id)).all()]
        verified = _verified(conn, run_id, repeats, ids)
        holdout = conn.execute(
            select(EVALS.c.node_id, EVALS.c.score)
            .where(EVALS.c.run_id == run_id, EVALS.c.stage == HOLDOUT, EVALS.c.ok.is_(True))
            .order_by(EVALS.c.id)
        ).all()
        best, lineage = (
            lineage_of([r[:4] + r[7:8] for r in rows], maximize)
            if ids is None
            else best_lineage(conn, run_id, maximize)
        )
        count = conn.execute(
            select(func.count()).select_from(NODES).where(NODES.c.run_id == run_id)
        ).scalar()
    cols: list[tuple[Any, ...]] = list(zip(*rows, strict=True)) if rows else [()] * 10
    node_ids, _, _, scores, _, _, _, alarms, hyps, extra = cols
    return {
        "id": list(node_ids),
        "parent": list(cols[1]),
        "status": list(cols[2]),
        "score": [None if s is None or not math.isfinite(s) else s for s in scores],
        "op": list(cols[4]),
        "created": list(cols[5]),
        "finished": list(cols[6]),
        "alarm": [0 if a in (None, "null") else 1 for a in alarms],
        "verified": [1 if i in verified else 0 for i in node_ids],
        "hypothesis": [(h or "")[:HYPOTHESIS_CHARS] for h in hyps],
        "extra_parents": {  # crossovers only: most nodes have one parent
            str(i): json.loads(e)
            for i, e in zip(node_ids, extra, strict=True)
            if e not in (None, "null")
        },
        "best": best,
        "lineage": lineage,
        "holdout": [{"node": h.node_id, "score": h.score} for h in holdout],
        "since": since,
        "seq": seq,
        "n": int(count or 0),
    }
