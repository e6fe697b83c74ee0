"""A fresh PostgreSQL database per test, on the server named by ``REVTREE_TEST_PG``.

Tests marked ``postgres`` skip when that variable is unset (a developer machine without a
server); CI (``.ci/run``) starts a server and sets it, so there they always run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy.engine import make_url

ENV = "REVTREE_TEST_PG"


def server_url() -> str:
    url = os.environ.get(ENV)
    if not url:
        pytest.skip(f"{ENV} is not set (no PostgreSQL server to test on)")
    return url


@contextmanager
def fresh_database(prefix: str = "revtree_t") -> Iterator[str]:
    """Create an empty database, yield its SQLAlchemy URL, drop it (and its sessions)."""
    import psycopg

    base = make_url(server_url())
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
