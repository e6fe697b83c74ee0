"""The tables of the SQL memory as SQLAlchemy Core handles (``RUNS``, ``NODES``...), in
``METADATA``. Migrations in ``migrations/`` mirror them (tests/memory/test_store.py
compares the two).

Core, not the ORM: revtree reads and writes them with Core statements only, and
``sqlalchemy.orm`` with its declarative classes was a twentieth of a run's imports
(issue 24). Times are UNIX seconds (float) so every backend stores them alike. JSON
columns hold proposals, metrics, event data and the policy state.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

METADATA = MetaData()

RUNS = Table(
    "runs",
    METADATA,
    Column("id", String(64), primary_key=True),
    Column("task_name", String(200), nullable=False),
    Column("status", String(16), index=True, nullable=False),
    Column("reason", Text),
    Column("policy", String(64), nullable=False),
    Column("direction", String(8), nullable=False),
    Column("seed", Integer, nullable=False),
    Column("spec", JSON, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("pid", Integer),
    Column("host", String(255)),
    Column("heartbeat_at", Float),
    Column("wall_used", Float, default=0.0, nullable=False),
    Column("last_event", Integer, default=0, nullable=False),
    Column("policy_state", JSON),
    Column("parent_run", String(64)),
    Column("parent_node", Integer),
)

NODES = Table(
    "nodes",
    METADATA,
    Column("run_id", String(64), primary_key=True),
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("parent_id", Integer),
    Column("extra_parents", JSON),
    Column("depth", Integer, default=0, nullable=False),
    Column("operator", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("commit", String(64)),
    Column("proposal", JSON),
    Column("score", Float),
    Column("score_std", Float),
    Column("n_evals", Integer, default=0, nullable=False),
    Column("error", Text),
    Column("error_kind", String(32)),
    Column("thread_id", String(64)),
    Column("timings", JSON),
    Column("created_at", Float, nullable=False),
    Column("finished_at", Float),
    Column("review", JSON),
    Column("lesson", Text),
    Column("attempt", Integer, default=1, server_default="1", nullable=False),
    Column("alarm", JSON),
    Column("features", JSON),
    ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
    Index("ix_nodes_run_status", "run_id", "status"),
)

EVALS = Table(
    "evaluations",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False),
    Column("node_id", Integer, nullable=False),
    Column("stage", String(64), nullable=False),
    Column("repeat", Integer, nullable=False),
    Column("ok", Boolean, nullable=False),
    Column("score", Float),
    Column("metrics", JSON),
    Column("exit_code", Integer),
    Column("duration", Float, nullable=False),
    Column("stdout_tail", Text),
    Column("stderr_tail", Text),
    Column("error", Text),
    Column("error_kind", String(32)),
    Column("log_path", Text),
    Column("created_at", Float, nullable=False),
    # where migration 0003 added it, so that a new database has the columns in the same order
    Column("attempt", Integer, default=1, server_default="1", nullable=False),
    Column("host", String(255)),
    Column("gpus", JSON),
    ForeignKeyConstraint(["run_id", "node_id"], ["nodes.run_id", "nodes.id"], ondelete="CASCADE"),
    Index("ux_evaluations_key", "run_id", "node_id", "stage", "repeat", "attempt", unique=True),
)

EVENTS = Table(
    "events",
    METADATA,
    Column("run_id", String(64), primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("ts", Float, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("node_id", Integer),
    Column("message", Text, nullable=False),
    Column("data", JSON),
    ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
)

CALLS = Table(
    "llm_calls",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False),
    Column("node_id", Integer),
    Column("role", String(32), nullable=False),
    Column("model", String(200), nullable=False),
    Column("input_tokens", Integer, nullable=False),
    Column("output_tokens", Integer, nullable=False),
    Column("cached_tokens", Integer, nullable=False),
    Column("cache_write_tokens", Integer, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("latency", Float, nullable=False),
    Column("ok", Boolean, nullable=False),
    Column("error", Text),
    Column("created_at", Float, nullable=False),
    Column("prompt", Text),
    Column("response", Text),
    ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
    Index("ix_llm_calls_run_node", "run_id", "node_id"),
)
