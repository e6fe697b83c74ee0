"""SQLAlchemy models of the SQL memory, and their tables as Core handles (``RUNS``,
``NODES``...). Migrations in ``migrations/`` mirror them.

Times are UNIX seconds (float) so every backend stores them alike. JSON columns hold
proposals, metrics, event data and the policy state.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    String,
    Table,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class RunRow(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_name: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str | None] = mapped_column(Text)
    policy: Mapped[str] = mapped_column(String(64))
    direction: Mapped[str] = mapped_column(String(8))
    seed: Mapped[int] = mapped_column(Integer)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    pid: Mapped[int | None] = mapped_column(Integer)
    host: Mapped[str | None] = mapped_column(String(255))
    heartbeat_at: Mapped[float | None] = mapped_column(Float)
    wall_used: Mapped[float] = mapped_column(Float, default=0.0)
    last_event: Mapped[int] = mapped_column(Integer, default=0)
    policy_state: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    parent_run: Mapped[str | None] = mapped_column(String(64))
    parent_node: Mapped[int | None] = mapped_column(Integer)


class NodeRow(Base):
    __tablename__ = "nodes"
    __table_args__ = (
        ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        Index("ix_nodes_run_status", "run_id", "status"),
    )

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    parent_id: Mapped[int | None] = mapped_column(Integer)
    extra_parents: Mapped[list[int] | None] = mapped_column(JSON)
    depth: Mapped[int] = mapped_column(Integer, default=0)
    operator: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    commit: Mapped[str | None] = mapped_column(String(64))
    proposal: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    score: Mapped[float | None] = mapped_column(Float)
    score_std: Mapped[float | None] = mapped_column(Float)
    n_evals: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    error_kind: Mapped[str | None] = mapped_column(String(32))
    thread_id: Mapped[str | None] = mapped_column(String(64))
    timings: Mapped[dict[str, float] | None] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    review: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    lesson: Mapped[str | None] = mapped_column(Text)
    attempt: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    alarm: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    features: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class EvaluationRow(Base):
    __tablename__ = "evaluations"
    __table_args__ = (
        ForeignKeyConstraint(
            ["run_id", "node_id"], ["nodes.run_id", "nodes.id"], ondelete="CASCADE"
        ),
        Index("ux_evaluations_key", "run_id", "node_id", "stage", "repeat", "attempt", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(64))
    node_id: Mapped[int] = mapped_column(Integer)
    stage: Mapped[str] = mapped_column(String(64))
    repeat: Mapped[int] = mapped_column(Integer)
    ok: Mapped[bool] = mapped_column(Boolean)
    score: Mapped[float | None] = mapped_column(Float)
    metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    duration: Mapped[float] = mapped_column(Float)
    stdout_tail: Mapped[str | None] = mapped_column(Text)
    stderr_tail: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    error_kind: Mapped[str | None] = mapped_column(String(32))
    log_path: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    # where migration 0003 added it, so that a new database has the columns in the same order
    attempt: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    host: Mapped[str | None] = mapped_column(String(255))
    gpus: Mapped[list[str] | None] = mapped_column(JSON)


class EventRow(Base):
    __tablename__ = "events"
    __table_args__ = (ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),)

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    ts: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(32))
    node_id: Mapped[int | None] = mapped_column(Integer)
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class LLMCallRow(Base):
    __tablename__ = "llm_calls"
    __table_args__ = (
        ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        Index("ix_llm_calls_run_node", "run_id", "node_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(64))
    node_id: Mapped[int | None] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(200))
    input_tokens: Mapped[int] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)
    cached_tokens: Mapped[int] = mapped_column(Integer)
    cache_write_tokens: Mapped[int] = mapped_column(Integer)
    cost_usd: Mapped[float] = mapped_column(Float)
    latency: Mapped[float] = mapped_column(Float)
    ok: Mapped[bool] = mapped_column(Boolean)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    prompt: Mapped[str | None] = mapped_column(Text)
    response: Mapped[str | None] = mapped_column(Text)


RUNS = cast(Table, RunRow.__table__)
NODES = cast(Table, NodeRow.__table__)
EVALS = cast(Table, EvaluationRow.__table__)
EVENTS = cast(Table, EventRow.__table__)
CALLS = cast(Table, LLMCallRow.__table__)
