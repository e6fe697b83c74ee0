"""``revtree doctor`` on a damaged SQLite database: what is wrong and how to recover, in
plain words and exit 1, instead of the raw SQL error (or a traceback)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from revtree.orchestrator.commands.doctor import check_database
from tests.orchestrator.conftest import make_task, revtree, revtree_here


def assert_recovery_advice(out: str, db: Path) -> None:
    assert f"the database {db} is damaged" in out, out
    assert f'sqlite3 {db} ".recover" | sqlite3 {db.with_name("fixed.db")}' in out, out
    assert "backup" in out and "repo.git" in out and "keep every commit" in out, out
    assert "Traceback" not in out and "sqlalchemy" not in out, out


def corrupt_a_page(db: Path, table: str = "nodes") -> None:
    """Overwrite the root page of ``table`` (the WAL checkpointed into the file first)."""
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with db.open("r+b") as f:
        f.seek((root[0] - 1) * size)
        f.write(b"\xa5" * size)


@pytest.mark.slow
def test_doctor_explains_a_corrupted_page_of_a_real_run(tmp_path: Path, home: Path) -> None:
    revtree(home, "run", str(make_task(tmp_path / "task", budget=3)), "--quiet")
    db = home / "revtree.db"
    assert revtree_here(home, "doctor").stdout.strip() == "no problems found"
    corrupt_a_page(db)
    proc = revtree_here(home, "doctor", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert_recovery_advice(proc.stdout + proc.stderr, db)
    assert str(home / "runs") in proc.stdout  # where the commits are


@pytest.mark.slow  # 6 s of --quick under -n 2 (issue 24)
def test_doctor_on_a_file_that_is_not_a_database(home: Path) -> None:
    home.mkdir(parents=True)
    db = home / "revtree.db"
    db.write_bytes(os.urandom(16384))
    proc = revtree_here(home, "doctor", check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert_recovery_advice(proc.stdout + proc.stderr, db)
    assert "not an SQLite database at all" in proc.stdout


def test_check_database_passes_sound_missing_and_server_databases(tmp_path: Path) -> None:
    db = tmp_path / "sound.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    assert check_database(f"sqlite:///{db}", tmp_path) is None
    assert check_database(f"sqlite:///{tmp_path / 'absent.db'}", tmp_path) is None
    assert not (tmp_path / "absent.db").exists(), "checking must not create the file"
    assert check_database("sqlite://", tmp_path) is None
    assert check_database("postgresql+psycopg://u:p@127.0.0.1:1/x", tmp_path) is None


def test_check_database_reports_what_integrity_check_finds(tmp_path: Path) -> None:
    db = tmp_path / "revtree.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.execute("CREATE INDEX t_x ON t (x)")
    conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(2000)])
    conn.commit()
    conn.close()
    corrupt_a_page(db, "t_x")  # an index page: the table still reads, the check does not pass
    message = check_database(f"sqlite:///{db}", tmp_path)
    assert message is not None
    assert_recovery_advice(message, db)
