"""The conversion between the rows of the SQL memory and the records
(:mod:`revtree.memory.records`) that the Store and the light reads
(:mod:`revtree.memory.sqlite_reads`) hand out. A row is anything with the columns as
attributes, JSON already decoded: a SQLAlchemy ``Row`` or a namespace of a ``sqlite3``
row. No SQLAlchemy here (the tables' handles are in :mod:`revtree.memory.models`)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from revtree.errors import RunNotFound
from revtree.memory.records import (
    Decision,
    EvalResult,
    Event,
    LLMCall,
    Node,
    NodeStatus,
    RunInfo,
    RunStatus,
)


def node_values(node: Node) -> dict[str, Any]:
    return {
        "run_id": node.run_id,
        "id": node.id,
        "parent_id": node.parent_id,
        "extra_parents": list(node.extra_parents) or None,
        "depth": node.depth,
        "operator": node.operator,
        "status": node.status.value,
        "commit": node.commit,
        "proposal": node.proposal,
        "score": node.score,
        "score_std": node.score_std,
        "n_evals": node.n_evals,
        "error": node.error,
        "error_kind": node.error_kind,
        "thread_id": node.thread_id,
        "created_at": node.created_at or time.time(),
        "finished_at": node.finished_at,
        "review": node.review,
        "lesson": node.lesson,
        "attempt": node.attempt,
        "alarm": node.alarm,
        "features": node.features,
    }


def row_to_node(r: Any) -> Node:
    return Node(
        run_id=r.run_id,
        id=r.id,
        parent_id=r.parent_id,
        operator=r.operator,
        status=NodeStatus(r.status),
        depth=r.depth,
        commit=r.commit,
        proposal=r.proposal,
        score=r.score,
        score_std=r.score_std,
        n_evals=r.n_evals,
        error=r.error,
        error_kind=r.error_kind,
        thread_id=r.thread_id,
        created_at=r.created_at,
        finished_at=r.finished_at,
        extra_parents=tuple(r.extra_parents or ()),
        review=r.review,
        lesson=r.lesson,
        attempt=r.attempt,
        alarm=r.alarm,
        features=r.features,
    )


def row_to_eval(r: Any) -> EvalResult:
    return EvalResult(
        node_id=r.node_id,
        stage=r.stage,
        repeat=r.repeat,
        ok=r.ok,
        score=r.score,
        metrics=dict(r.metrics or {}),
        exit_code=r.exit_code,
        duration=r.duration,
        stdout_tail=r.stdout_tail or "",
        stderr_tail=r.stderr_tail or "",
        error=r.error,
        error_kind=r.error_kind,
        log_path=r.log_path,
        attempt=r.attempt,
        host=r.host,
        gpus=tuple(r.gpus or ()),
    )


def row_to_run(r: Any) -> RunInfo:
    return RunInfo(
        id=r.id,
        task_name=r.task_name,
        status=RunStatus(r.status),
        policy=r.policy,
        direction=r.direction,
        spec=r.spec,
        seed=r.seed,
        created_at=r.created_at,
        updated_at=r.updated_at,
        reason=r.reason,
        pid=r.pid,
        host=r.host,
        wall_used=r.wall_used,
        policy_state=r.policy_state,
        parent_run=r.parent_run,
        parent_node=r.parent_node,
    )


def found_run(run_id: str, url: str, exact: Any, prefixed: list[Any]) -> RunInfo:
    """The run that ``get_run(run_id)`` found, from the row with that exact id (or
    'last') and, where there was none, up to 11 rows whose ids start with it in id
    order; the same answer and errors for the Store and the light reads."""
    if exact is None:
        if len(prefixed) > 1:
            ids = ", ".join(r.id for r in prefixed[:10]) + (", ..." if len(prefixed) > 10 else "")
            raise RunNotFound(
                f"run id {run_id!r} is ambiguous: it matches {ids}; give more characters"
            )
        exact = prefixed[0] if prefixed else None
    if exact is None:
        raise RunNotFound(f"no run {run_id!r} in {url}")
    return row_to_run(exact)


def row_to_event(r: Any) -> Event:
    return Event(r.run_id, r.seq, r.ts, r.kind, r.message, r.node_id, r.data)


def row_to_call(r: Any) -> LLMCall:
    return LLMCall(
        r.role,
        r.model,
        r.input_tokens,
        r.output_tokens,
        r.cached_tokens,
        r.cache_write_tokens,
        r.cost_usd,
        r.latency,
        r.ok,
        r.node_id,
        r.error,
        r.prompt,
        r.response,
    )


def first_decisions(
    rows: Iterable[tuple[int, dict[str, Any] | None]], nodes: dict[int, int]
) -> dict[int, Decision]:
    """The decision on each of ``nodes`` (node -> attempt) from the ``decision`` events'
    ``(node_id, data)`` in seq order: the first for that attempt (a store written before
    decisions were atomic may hold two)."""
    out: dict[int, Decision] = {}
    for node_id, data in rows:
        if data and data.get("attempt") == nodes[node_id] and node_id not in out:
            out[node_id] = Decision(bool(data["accepted"]), data.get("why") or "")
    return out
