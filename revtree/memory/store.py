"""The Store: the one gateway to the SQL memory.

Guarantees:
- every change is committed before the method returns, together with the event that
  announces it (the ``events`` table *is* the live log), so nothing is shown that is
  not stored;
- event ``seq`` numbers increase by one per run, allocated in the same transaction;
- an evaluation is stored once per (node, stage, repeat, attempt); a second record is
  ignored;
- methods are thread-safe; writes from one process are serialised;
- ``listeners`` receive each event after its transaction committed, in ``seq`` order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, cast

from sqlalchemy import Engine, Table, delete, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from revtree.errors import RunNotFound, StoreError
from revtree.memory.db import default_url, make_engine, migrate, transaction
from revtree.memory.models import EvaluationRow, EventRow, LLMCallRow, NodeRow, RunRow
from revtree.memory.records import (
    EvalResult,
    Event,
    LLMCall,
    Node,
    NodeStatus,
    RunInfo,
    RunStatus,
)

RUNS = cast(Table, RunRow.__table__)
NODES = cast(Table, NodeRow.__table__)
EVALS = cast(Table, EvaluationRow.__table__)
EVENTS = cast(Table, EventRow.__table__)
CALLS = cast(Table, LLMCallRow.__table__)
EventSpec = tuple[str, str, dict[str, Any] | None]  # (kind, message, data)


class Store:
    """Runs, nodes, evaluations and events in one SQL database."""

    def __init__(self, url: str | None = None, engine: Engine | None = None) -> None:
        self.url = url or default_url()
        self.engine = engine or make_engine(self.url)
        self._write_lock = threading.RLock()  # a listener may write again
        self.listeners: list[Callable[[Event], None]] = []
        self._pending: list[Event] = []
        migrate(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def _write(self) -> Any:
        store = self

        class _Tx:
            def __enter__(self) -> Connection:
                store._write_lock.acquire()
                self.cm = transaction(store.engine, write=True)
                try:
                    return self.cm.__enter__()
                except BaseException:
                    store._write_lock.release()
                    raise

            def __exit__(self, *exc: Any) -> Any:
                try:
                    result = self.cm.__exit__(*exc)
                    store._announce(failed=exc[0] is not None)
                    return result
                except BaseException:
                    store._pending.clear()
                    raise
                finally:
                    store._write_lock.release()

        return _Tx()

    # -- events -------------------------------------------------------------------
    def _announce(self, failed: bool) -> None:
        """Hand committed events to the listeners, in seq order, before the next write."""
        events, self._pending = self._pending, []
        if failed:
            return
        for ev in events:
            for listener in list(self.listeners):
                try:
                    listener(ev)
                except Exception:  # a broken display must not break the run
                    self.listeners.remove(listener)

    def _event(self, conn: Connection, run_id: str, spec: EventSpec, node_id: int | None) -> Event:
        kind, message, data = spec
        seq = conn.execute(
            update(RUNS)
            .where(RUNS.c.id == run_id)
            .values(last_event=RUNS.c.last_event + 1, updated_at=time.time())
            .returning(RUNS.c.last_event)
        ).scalar_one()
        ev = Event(run_id, seq, time.time(), kind, message, node_id, data)
        conn.execute(
            insert(EVENTS).values(
                run_id=run_id,
                seq=seq,
                ts=ev.ts,
                kind=kind,
                node_id=node_id,
                message=message,
                data=data,
            )
        )
        self._pending.append(ev)
        return ev

    def add_event(
        self,
        run_id: str,
        kind: str,
        message: str,
        node_id: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> Event:
        with self._write() as conn:
            return self._event(conn, run_id, (kind, message, data), node_id)

    def events_since(self, run_id: str, after: int = 0, limit: int = 1000) -> list[Event]:
        with transaction(self.engine) as conn:
            rows = conn.execute(
                select(EVENTS)
                .where(EVENTS.c.run_id == run_id, EVENTS.c.seq > after)
                .order_by(EVENTS.c.seq)
                .limit(limit)
            ).all()
        return [Event(r.run_id, r.seq, r.ts, r.kind, r.message, r.node_id, r.data) for r in rows]

    # -- runs ---------------------------------------------------------------------
    def create_run(
        self,
        run_id: str,
        task_name: str,
        policy: str,
        direction: str,
        seed: int,
        spec: dict[str, Any],
        parent_run: str | None = None,
        parent_node: int | None = None,
        root: tuple[Node, EventSpec] | None = None,
        history: tuple[list[Node], list[EvalResult], EventSpec] | None = None,
    ) -> RunInfo:
        """Insert a run, and its ``root`` node or a fork's ``history`` (see
        :meth:`copy_history`) in the same transaction: a process killed while creating a
        run leaves either nothing or a run that can be resumed."""
        now = time.time()
        with self._write() as conn:
            conn.execute(
                insert(RUNS).values(
                    id=run_id,
                    task_name=task_name,
                    status=RunStatus.RUNNING.value,
                    policy=policy,
                    direction=direction,
                    seed=seed,
                    spec=spec,
                    created_at=now,
                    updated_at=now,
                    wall_used=0.0,
                    last_event=0,
                    parent_run=parent_run,
                    parent_node=parent_node,
                )
            )
            self._event(
                conn,
                run_id,
                ("run", f"run {run_id} created for task {task_name}", {"policy": policy}),
                None,
            )
            if root is not None:
                conn.execute(insert(NODES).values(**_node_values(root[0])))
                self._event(conn, run_id, root[1], root[0].id)
            if history is not None:
                self._copy(conn, run_id, *history)
        return self.get_run(run_id)

    def get_run(self, run_id: str) -> RunInfo:
        """The run with this id, or the only one whose id starts with it, or 'last'."""
        with transaction(self.engine) as conn:
            if run_id in ("last", "latest"):
                row = conn.execute(select(RUNS).order_by(RUNS.c.created_at.desc()).limit(1)).first()
            else:
                row = conn.execute(select(RUNS).where(RUNS.c.id == run_id)).first()
                if row is None:
                    rows = conn.execute(
                        select(RUNS).where(RUNS.c.id.startswith(run_id, autoescape=True)).limit(2)
                    ).all()
                    if len(rows) > 1:
                        raise RunNotFound(f"run id {run_id!r} is ambiguous; give more characters")
                    row = rows[0] if rows else None
        if row is None:
            raise RunNotFound(f"no run {run_id!r} in {self.url}")
        return _run_info(row)

    def list_runs(self) -> list[RunInfo]:
        with transaction(self.engine) as conn:
            rows = conn.execute(select(RUNS).order_by(RUNS.c.created_at)).all()
        return [_run_info(r) for r in rows]

    def update_run(
        self, run_id: str, event: EventSpec | None = None, **values: Any
    ) -> Event | None:
        if "status" in values:
            values["status"] = RunStatus(values["status"]).value
        with self._write() as conn:
            values["updated_at"] = time.time()
            conn.execute(update(RUNS).where(RUNS.c.id == run_id).values(**values))
            return self._event(conn, run_id, event, None) if event else None

    def claim_run(self, run_id: str, pid: int, host: str, alive: Any) -> RunInfo:
        """Mark the run as driven by (pid, host) unless a live process holds it."""
        from revtree.errors import RunBusy

        with self._write() as conn:
            row = conn.execute(  # FOR UPDATE on PostgreSQL; SQLite's BEGIN IMMEDIATE
                select(RUNS).where(RUNS.c.id == run_id).with_for_update()
            ).one()
            if (
                row.status == RunStatus.RUNNING.value
                and row.pid
                and row.pid != pid
                and alive(row.pid, row.host)
            ):
                raise RunBusy(f"run {run_id} is being driven by pid {row.pid} on {row.host}")
            conn.execute(
                update(RUNS)
                .where(RUNS.c.id == run_id)
                .values(
                    pid=pid,
                    host=host,
                    heartbeat_at=time.time(),
                    status=RunStatus.RUNNING.value,
                    reason=None,
                    updated_at=time.time(),
                )
            )
        return self.get_run(run_id)

    def copy_history(
        self, run_id: str, nodes: list[Node], evaluations: list[EvalResult], event: EventSpec
    ) -> Event:
        """Insert finished nodes and their evaluations into a (new) run, in one transaction."""
        with self._write() as conn:
            return self._copy(conn, run_id, nodes, evaluations, event)

    def _copy(
        self,
        conn: Connection,
        run_id: str,
        nodes: list[Node],
        evaluations: list[EvalResult],
        event: EventSpec,
    ) -> Event:
        if nodes:
            conn.execute(insert(NODES), [_node_values(n) for n in nodes])
        if evaluations:
            now = time.time()
            conn.execute(
                insert(EVALS),
                [{**e.__dict__, "run_id": run_id, "created_at": now} for e in evaluations],
            )
        return self._event(conn, run_id, event, None)

    def delete_run(self, run_id: str) -> None:
        with self._write() as conn:
            for table in (EVENTS, EVALS, CALLS, NODES):
                conn.execute(delete(table).where(table.c.run_id == run_id))
            conn.execute(delete(RUNS).where(RUNS.c.id == run_id))

    # -- nodes --------------------------------------------------------------------
    def add_node(
        self, node: Node, event: EventSpec, policy_state: dict[str, Any] | None = None
    ) -> Event:
        """Insert a node (and the policy state that chose it) in one transaction."""
        with self._write() as conn:
            conn.execute(insert(NODES).values(**_node_values(node)))
            if policy_state is not None:
                conn.execute(
                    update(RUNS).where(RUNS.c.id == node.run_id).values(policy_state=policy_state)
                )
            return self._event(conn, node.run_id, event, node.id)

    def update_node(
        self, run_id: str, node_id: int, event: EventSpec | None = None, **values: Any
    ) -> Event | None:
        if "status" in values:
            values["status"] = NodeStatus(values["status"]).value
        with self._write() as conn:
            n = conn.execute(
                update(NODES)
                .where(NODES.c.run_id == run_id, NODES.c.id == node_id)
                .values(**values)
            ).rowcount
            if n != 1:
                raise StoreError(f"run {run_id}: no node {node_id} to update")
            return self._event(conn, run_id, event, node_id) if event else None

    def nodes(self, run_id: str) -> list[Node]:
        with transaction(self.engine) as conn:
            rows = conn.execute(
                select(NODES).where(NODES.c.run_id == run_id).order_by(NODES.c.id)
            ).all()
        return [_node(r) for r in rows]

    def node(self, run_id: str, node_id: int) -> Node:
        with transaction(self.engine) as conn:
            row = conn.execute(
                select(NODES).where(NODES.c.run_id == run_id, NODES.c.id == node_id)
            ).first()
        if row is None:
            raise StoreError(f"run {run_id} has no node {node_id}")
        return _node(row)

    def node_timings(self, run_id: str) -> dict[int, dict[str, float]]:
        with transaction(self.engine) as conn:
            rows = conn.execute(
                select(NODES.c.id, NODES.c.timings).where(NODES.c.run_id == run_id)
            ).all()
        return {r[0]: dict(r[1] or {}) for r in rows}

    # -- evaluations --------------------------------------------------------------
    def record_evaluation(
        self, run_id: str, result: EvalResult, event: EventSpec | None = None
    ) -> Event | None:
        """Store one evaluation; a duplicate (node, stage, repeat, attempt) is ignored
        (returns None)."""
        values = {k: v for k, v in result.__dict__.items()}
        values.update(run_id=run_id, created_at=time.time())
        try:
            with self._write() as conn:
                conn.execute(insert(EVALS).values(**values))
                return self._event(conn, run_id, event, result.node_id) if event else None
        except StoreError as e:
            if isinstance(e.__cause__, IntegrityError):
                return None
            raise

    def evaluations(
        self, run_id: str, node_id: int | None = None, stage: str | None = None
    ) -> list[EvalResult]:
        """A run's evaluations in the order stored, of one node and one stage if given."""
        query = select(EVALS).where(EVALS.c.run_id == run_id)
        if node_id is not None:
            query = query.where(EVALS.c.node_id == node_id)
        if stage is not None:
            query = query.where(EVALS.c.stage == stage)
        with transaction(self.engine) as conn:
            rows = conn.execute(query.order_by(EVALS.c.id)).all()
        return [_eval(r) for r in rows]

    def evaluation_counts(self, run_id: str) -> dict[tuple[int, str, int], int]:
        """Evaluations per (node, stage, repeat), every attempt counted: 1 everywhere
        means nothing was evaluated twice, unless ``retry`` asked for it."""
        with transaction(self.engine) as conn:
            rows = conn.execute(
                select(EVALS.c.node_id, EVALS.c.stage, EVALS.c.repeat, func.count())
                .where(EVALS.c.run_id == run_id)
                .group_by(EVALS.c.node_id, EVALS.c.stage, EVALS.c.repeat)
            ).all()
        return {(r[0], r[1], r[2]): r[3] for r in rows}

    def evaluations_by_kind(self, run_id: str, repeats: int = 1) -> dict[str, int]:
        """Evaluations by what they were for: ``verify`` (full-stage repeats past the
        task's ``repeats``) and each other stage (``full``, ``guard``, ``holdout``...)."""
        verify = (EVALS.c.stage == "full") & (EVALS.c.repeat >= repeats)
        with transaction(self.engine) as conn:
            rows = conn.execute(
                select(EVALS.c.stage, verify, func.count())
                .where(EVALS.c.run_id == run_id)
                .group_by(EVALS.c.stage, verify)
            ).all()
        out: dict[str, int] = {}
        for stage, is_verify, n in rows:
            key = "verify" if is_verify else stage
            out[key] = out.get(key, 0) + int(n)
        return out

    def sandbox_seconds(self, run_id: str) -> float:
        with transaction(self.engine) as conn:
            total = conn.execute(
                select(func.sum(EVALS.c.duration)).where(EVALS.c.run_id == run_id)
            ).scalar()
        return float(total or 0.0)

    # -- LLM calls ----------------------------------------------------------------
    def record_llm_call(self, run_id: str, call: LLMCall) -> None:
        with self._write() as conn:
            conn.execute(
                insert(CALLS).values(run_id=run_id, created_at=time.time(), **call.__dict__)
            )

    def llm_calls(self, run_id: str) -> list[LLMCall]:
        with transaction(self.engine) as conn:
            rows = conn.execute(
                select(CALLS).where(CALLS.c.run_id == run_id).order_by(CALLS.c.id)
            ).all()
        return [
            LLMCall(
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
            for r in rows
        ]

    def llm_totals(self, run_id: str) -> tuple[float, int]:
        """(dollars, tokens) spent by a run's model calls."""
        with transaction(self.engine) as conn:
            row = conn.execute(
                select(
                    func.sum(CALLS.c.cost_usd),
                    func.sum(CALLS.c.input_tokens + CALLS.c.output_tokens),
                ).where(CALLS.c.run_id == run_id)
            ).one()
        return float(row[0] or 0.0), int(row[1] or 0)


def _node_values(node: Node) -> dict[str, Any]:
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
    }


def _node(r: Any) -> Node:
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
    )


def _eval(r: Any) -> EvalResult:
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
    )


def _run_info(r: Any) -> RunInfo:
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
