"""The cycle collector around a command's imports and exit (``revtree.collector``, issue
24), in fresh interpreters: a pytest process is a library user, whose collector must
stay as it was.

- ``revtree run`` (through ``main()``, as ``python -m revtree`` runs it) makes no full
  collection before its loop starts, then runs with the default thresholds, everything
  its imports made frozen as the loop begins; it leaves with everything frozen, and its
  store closed all the same (no write-ahead log left beside the SQLite file).
- ``revtree ls`` never settles: it ends still held, and frozen (its exit).
- The library alone: ``settle()`` without ``hold()`` changes nothing; ``hold()`` then
  ``settle()`` freezes once and restores the thresholds; a second ``settle()`` is a no-op.

Speed is measured in ``benchmarks/peer.py`` and ``benchmarks/cli_start.py``.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from revtree import collector
from tests.orchestrator.conftest import cli_env, make_task

# Runs revtree's main() with ARGS; reports each full collection's start (and whether the
# collector was held then) and, at exit, the thresholds and the frozen count.
WATCHED = """\
import atexit, gc, json, sys
from revtree import collector
full, settled = [], []
settle = collector.settle
def settling():
    settle()
    settled.append(gc.get_freeze_count())  # what settle froze (0: it was not held)
collector.settle = settling
gc.callbacks.append(
    lambda phase, info: phase == "start" and info["generation"] == 2
    and full.append(collector.held())
)
def report():
    gc.callbacks.clear()
    print("COLLECTOR " + json.dumps(
        [full, list(gc.get_threshold()), gc.get_freeze_count(), collector.held(), settled]
    ))
atexit.register(report)
sys.argv = ["revtree", *sys.argv[1:]]
from revtree.cli import main
main()
"""

LIBRARY = """\
import gc, json
from revtree import collector
before = gc.get_threshold()
collector.settle()
alone = [list(gc.get_threshold()), gc.get_freeze_count()]
collector.hold()
held = [list(gc.get_threshold()), collector.held()]
collector.settle()
settled = [list(gc.get_threshold()), gc.get_freeze_count() > 0, collector.held()]
gc.unfreeze()
collector.settle()
again = gc.get_freeze_count()
print(json.dumps([list(before), alone, held, settled, again]))
"""


def watched(home: Path, *args: str) -> tuple[int, list[bool], list[int], int, bool, list[int]]:
    proc = subprocess.run(
        [sys.executable, "-c", WATCHED, *args],
        capture_output=True,
        text=True,
        env=cli_env(home),
        timeout=120,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("COLLECTOR ")]
    assert lines, proc.stdout + proc.stderr
    full, threshold, frozen, held, settled = json.loads(lines[-1].removeprefix("COLLECTOR "))
    return proc.returncode, full, threshold, frozen, held, settled


@pytest.mark.slow(seconds=4)
def test_a_run_makes_no_full_collection_before_its_loop(tmp_path: Path) -> None:
    task, home = make_task(tmp_path / "task", budget=3), tmp_path / "home"
    code, full, threshold, frozen, held, settled = watched(
        home, "run", str(task), "--sandbox", "local", "--quiet"
    )
    assert code == 0
    assert True not in full, full  # no full collection while held (the imports)
    assert tuple(threshold) == collector.DEFAULT and not held  # settled by drive()
    assert settled[0] > 10_000, settled  # drive() froze the imports' objects as it began
    assert frozen >= settled[0]  # and the exit what was made after
    # the store's connections closed all the same (db._dispose_all): the write-ahead
    # log merged into the file and gone, the file alone a whole copy of the run
    assert not (home / "revtree.db-wal").exists()
    copy = tmp_path / "copy.db"
    copy.write_bytes((home / "revtree.db").read_bytes())
    with contextlib.closing(sqlite3.connect(copy)) as conn:
        assert conn.execute("SELECT count(*) FROM nodes").fetchone() == (3,)


def test_a_short_command_stays_held_and_leaves_frozen(tmp_path: Path) -> None:
    code, full, threshold, frozen, held, settled = watched(tmp_path / "home", "ls")
    assert code == 0 and full == [] and held and settled == []
    assert threshold == [collector.DEFAULT[0], collector.DEFAULT[1], collector.HELD]
    assert frozen > 1_000  # leave(): typer's, rich's and the CLI's objects


def test_the_library_keeps_its_collector_until_held() -> None:
    out = subprocess.run(
        [sys.executable, "-c", LIBRARY], capture_output=True, text=True, timeout=60, check=True
    )
    before, alone, held, settled, again = json.loads(out.stdout)
    assert alone == [before, 0]  # settle() without hold(): nothing frozen, nothing changed
    assert held == [[before[0], before[1], collector.HELD], True]
    assert settled == [before, True, False]
    assert again == 0  # only once
