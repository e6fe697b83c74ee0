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

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, Table, bindparam, delete, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import Select

from revtree.errors import StoreError
from revtree.memory.db import make_engine, migrate, probe, transaction
from revtree.memory.decisions import Decisions
from revtree.memory.home import default_url
from revtree.memory.models import CALLS, EVALS, EVENTS, NODES, RUNS
from revtree.memory.records import (
    EvalResult,
    Event,
    LLMCall,
    Node,
    NodeStatus,
    RunInfo,
    RunStatus,
)
from revtree.memory.rows import (
    found_run,
    node_values,
    row_to_call,
    row_to_eval,
    row_to_event,
    row_to_node,
    row_to_run,
)

EventSpec = tuple[str, str, dict[str, Any] | None]  # (kind, message, data)


# The hot writes, built once: a statement built per call spent most of each write's time
# building it (its bound values and its cache key), not in the database. The values go
# as execute parameters: an INSERT's columns, an UPDATE's SET, are those given.
_NEXT_SEQ = (
    update(RUNS)
    .where(RUNS.c.id == bindparam("_run"))
    .values(last_event=RUNS.c.last_event + 1, updated_at=bindparam("_now"))
    .returning(RUNS.c.last_event)
)
_ADD = {table.name: insert(table) for table in (EVENTS, NODES, EVALS, CALLS)}


def _columns(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    """``values``, each of them a column of ``table`` (an execute parameter that names no
    column would be dropped unsaid: refused by name)."""
    if not values or values.keys() - table.c.keys():
        kind = table.name.removesuffix("s")
        raise StoreError(f"a write needs {kind} columns, not {sorted(values)}")
    return values


def _add(conn: Connection, table: Table, values: dict[str, Any]) -> None:
    """Insert one row of a record."""
    conn.execute(_ADD[table.name], _columns(table, values))


@functools.cache
def _evals_of(by_node: bool, by_stage: bool) -> Select[Any]:
    """``Store.evaluations``'s query (built once for each of its four shapes)."""
    query = select(EVALS).where(EVALS.c.run_id == bindparam("_run"))
    if by_node:
        query = query.where(EVALS.c.node_id == bindparam("_node"))
    if by_stage:
        query = query.where(EVALS.c.stage == bindparam("_stage"))
    return query.order_by(EVALS.c.id)


_NODE_SET = update(NODES).where(NODES.c.run_id == bindparam("_run"), NODES.c.id == bindparam("_id"))
_RUN_SET = update(RUNS).where(RUNS.c.id == bindparam("_run"))


class _Tx:
    """``Store._write``'s transaction: the store's write lock, then a write transaction;
    its committed events go to the listeners as it ends (a class of its own: one made per
    write cost as much as an UPDATE)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> Connection:
        store = self.store
        store._write_lock.acquire()
        self.cm = transaction(store.engine, write=True)
        try:
            return self.cm.__enter__()
        except BaseException:
            store._write_lock.release()
            raise

    def __exit__(self, *exc: Any) -> Any:
        store = self.store
        try:
            result = self.cm.__exit__(*exc)
            store._announce(failed=exc[0] is not None)
            return result
        except BaseException:
            store._pending.clear()
            raise
        finally:
            store._write_lock.release()


class Store(Decisions):
    """Runs, nodes, evaluations and events in one SQL database."""

    def __init__(
        self, url: str | None = None, engine: Engine | None = None, create: bool = True
    ) -> None:
        """``create``: make a missing SQLite file (else ``db.NoDatabase``, nothing made); a
        bad URL or a database that cannot be reached or read is a one-line StoreError."""
        self.url = url or default_url()
        self.engine = engine or make_engine(self.url, create)
        probe(self.engine)
        self._write_lock = threading.RLock()  # a listener may write again
        self.listeners: list[Callable[[Event], None]] = []
        self._pending: list[Event] = []
        migrate(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def _write(self) -> _Tx:
        return _Tx(self)

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
        seq = conn.execute(_NEXT_SEQ, {"_run": run_id, "_now": time.time()}).scalar_one()
        ev = Event(run_id, seq, time.time(), kind, message, node_id, data)
        row = {"run_id": run_id, "seq": seq, "ts": ev.ts, "kind": kind, "node_id": node_id}
        conn.execute(_ADD["events"], {**row, "message": message, "data": data})
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

    # -- approval decisions: memory/decisions.py (the Decisions base) ------------------

    def events_since(self, run_id: str, after: int = 0, limit: int = 1000) -> list[Event]:
        with transaction(self.engine) as conn:
            rows = conn.execute(
                select(EVENTS)
                .where(EVENTS.c.run_id == run_id, EVENTS.c.seq > after)
                .order_by(EVENTS.c.seq)
                .limit(limit)
            ).all()
        return [row_to_event(r) for r in rows]

    def node_events(self, run_id: str, node_id: int, kind: str) -> list[Event]:
        """A node's events of one kind, in order (what a replayed step said before)."""
        with transaction(self.engine) as conn:
            rows = conn.execute(
                select(EVENTS)
                .where(EVENTS.c.run_id == run_id, EVENTS.c.node_id == node_id)
                .where(EVENTS.c.kind == kind)
                .order_by(EVENTS.c.seq)
            ).all()
        return [row_to_event(r) for r in rows]

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
                conn.execute(insert(NODES).values(**node_values(root[0])))
                self._event(conn, run_id, root[1], root[0].id)
            if history is not None:
                self._copy(conn, run_id, *history)
        return self.get_run(run_id)

    def get_run(self, run_id: str) -> RunInfo:
        """The run with this id, or the only one whose id starts with it, or 'last'."""
        rows: list[Any] = []
        with transaction(self.engine) as conn:
            if run_id in ("last", "latest"):
                row = conn.execute(select(RUNS).order_by(RUNS.c.created_at.desc()).limit(1)).first()
            else:
                row = conn.execute(select(RUNS).where(RUNS.c.id == run_id)).first()
                if row is None:
                    rows = list(
                        conn.execute(
                            select(RUNS)
                            .where(RUNS.c.id.startswith(run_id, autoescape=True))
                            .order_by(RUNS.c.id)
                            .limit(11)
                        ).all()
                    )
        return found_run(run_id, self.url, row, rows)

    def list_runs(self) -> list[RunInfo]:
        with transaction(self.engine) as conn:
            rows = conn.execute(select(RUNS).order_by(RUNS.c.created_at)).all()
        return [row_to_run(r) for r in rows]

    def update_run(
        self, run_id: str, event: EventSpec | None = None, **values: Any
    ) -> Event | None:
        """Set the run's columns (plain values: the statement is built once, so a SQL
        expression as a value is refused by the database) and ``updated_at``."""
        if "status" in values:
            values["status"] = RunStatus(values["status"]).value
        if values:  # (none: only ``updated_at``, with the event)
            _columns(RUNS, values)
        with self._write() as conn:
            values["updated_at"] = time.time()
            conn.execute(_RUN_SET, {**values, "_run": run_id})
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
            conn.execute(insert(NODES), [node_values(n) for n in nodes])
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
            _add(conn, NODES, node_values(node))
            if policy_state is not None:
                conn.execute(_RUN_SET, {"policy_state": policy_state, "_run": node.run_id})
            return self._event(conn, node.run_id, event, node.id)

    def update_node(
        self, run_id: str, node_id: int, event: EventSpec | None = None, **values: Any
    ) -> Event | None:
        if "status" in values:
            values["status"] = NodeStatus(values["status"]).value
        _columns(NODES, values)
        with self._write() as conn:
            n = conn.execute(_NODE_SET, {**values, "_run": run_id, "_id": node_id}).rowcount
            if n != 1:
                raise StoreError(f"run {run_id}: no node {node_id} to update")
            return self._event(conn, run_id, event, node_id) if event else None

    def nodes(self, run_id: str) -> list[Node]:
        with transaction(self.engine) as conn:
            rows = conn.execute(
                select(NODES).where(NODES.c.run_id == run_id).order_by(NODES.c.id)
            ).all()
        return [row_to_node(r) for r in rows]

    def node(self, run_id: str, node_id: int) -> Node:
        with transaction(self.engine) as conn:
            row = conn.execute(
                select(NODES).where(NODES.c.run_id == run_id, NODES.c.id == node_id)
            ).first()
        if row is None:
            raise StoreError(f"run {run_id} has no node {node_id}")
        return row_to_node(row)

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
                _add(conn, EVALS, values)
                return self._event(conn, run_id, event, result.node_id) if event else None
        except StoreError as e:
            if isinstance(e.__cause__, IntegrityError):
                return None
            raise

    def evaluations(
        self, run_id: str, node_id: int | None = None, stage: str | None = None
    ) -> list[EvalResult]:
        """A run's evaluations in the order stored, of one node and one stage if given."""
        query = _evals_of(node_id is not None, stage is not None)
        params = {"_run": run_id, "_node": node_id, "_stage": stage}
        with transaction(self.engine) as conn:
            rows = conn.execute(query, params).all()
        return [row_to_eval(r) for r in rows]

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
    def delete_evaluations(self, run_id: str, node_id: int, why: str) -> None:
        """Delete the evaluation rows of a node (``doctor --repair``: rows of a node
        that does not exist), with an event saying why."""
        with self._write() as conn:
            conn.execute(delete(EVALS).where(EVALS.c.run_id == run_id, EVALS.c.node_id == node_id))
            message = f"evaluations of node {node_id} deleted ({why})"
            self._event(conn, run_id, ("repair", message, None), node_id)

    def record_llm_call(self, run_id: str, call: LLMCall) -> None:
        with self._write() as conn:
            _add(conn, CALLS, {"run_id": run_id, "created_at": time.time(), **call.__dict__})

    def llm_calls(self, run_id: str) -> list[LLMCall]:
        with transaction(self.engine) as conn:
            rows = conn.execute(
                select(CALLS).where(CALLS.c.run_id == run_id).order_by(CALLS.c.id)
            ).all()
        return [row_to_call(r) for r in rows]

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
