"""A damaged WAL (issue 23, item 7): a real run killed -9 mid-run leaves its rows in
``revtree.db-wal``; random bytes over the WAL's header (SQLite then ignores the whole
WAL: every row since the run began is gone) or a truncation (the rows of the last nodes
are gone) must not lose the run. ``doctor`` reports it (never "no problems found" while a
run folder has no rows), ``doctor --repair`` rebuilds the run's row from ``run.json`` and
its nodes from ``repo.git`` (ids, parents, operators, hypotheses, commits; scores lost),
and ``show`` and ``export`` work on the rebuilt run. SQLite only: PostgreSQL keeps no WAL
file a user or a candidate could damage in the home."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from revtree.memory import GitStore
from tests.orchestrator.conftest import cli_env, make_task, revtree, revtree_here


def _killed_mid_run(tmp_path: Path, home: Path, nodes: int = 4) -> None:
    """Start a real run (local sandbox), kill its process group with SIGKILL once
    ``nodes`` candidates have succeeded, so the WAL keeps its frames (no checkpoint)."""
    task = make_task(tmp_path / "task", budget=30, sleep=0.2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "revtree", "run", str(task), "--quiet"],
        env=cli_env(home, REVTREE_SANDBOX="local"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    done = 0
    try:
        for _ in range(1200):  # bounded: 240 s at most
            time.sleep(0.2)
            # counted from the node refs, never through SQLite: the last connection to
            # close checkpoints the WAL into the file and deletes it
            repos = list((home / "runs").glob("*/repo.git")) if proc.poll() is None else []
            if len(repos) != 1:
                continue
            refs = subprocess.run(
                ["git", "-C", str(repos[0]), "for-each-ref", "refs/revtree/nodes/"],
                capture_output=True,
                text=True,
            ).stdout
            done = len(refs.splitlines()) - 1
            if done > nodes:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert done > nodes, "the run did not get far enough"


def _damage(home: Path, attack: str) -> None:
    wal = home / "revtree.db-wal"
    size = wal.stat().st_size
    assert size > 32 * 1024, "the rows must still be in the WAL"
    if attack == "random":
        with wal.open("r+b") as f:
            f.write(os.urandom(8192))
    else:
        os.truncate(wal, size // 2)


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["random", "truncate"])
def test_a_damaged_wal_is_rebuilt_from_the_git_store(
    tmp_path: Path, home: Path, attack: str
) -> None:
    _killed_mid_run(tmp_path, home)
    (run_dir,) = (home / "runs").iterdir()
    run_id = run_dir.name
    git = GitStore(run_dir / "repo.git")
    refs = git.node_refs()
    git.close()
    assert len(refs) >= 5 and (run_dir / "run.json").is_file()
    _damage(home, attack)

    found = revtree_here(home, "doctor", check=False)
    out = found.stdout + found.stderr
    assert found.returncode == 1 and "no problems found" not in out, out
    # SQLite either reads the file as damaged, or reads an older state without the rows
    assert "is damaged" in out or ("lost-run" in out or "lost-node" in out), out
    print(f"{attack}: before --repair:", out.strip().splitlines()[:2])
    assert "Traceback" not in out, out

    fixed = revtree_here(home, "doctor", "--repair", check=False)
    assert "no problems found" not in fixed.stdout and "Traceback" not in fixed.stderr
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert revtree_here(home, "doctor").stdout.strip() == "no problems found"

    shown = json.loads(revtree_here(home, "show", run_id, "--json", "--nodes").stdout)
    nodes = {n["id"]: n for n in shown["nodes"]}
    assert set(nodes) == set(refs), (set(nodes), set(refs))
    assert all(nodes[i]["commit"] == sha for i, sha in refs.items())
    assert shown["status"] == "failed"  # resumable: `revtree resume` evaluates the rest
    lost = [i for i, n in nodes.items() if n["status"] in ("coded", "reviewed")]
    print(f"{attack}: after --repair: {len(nodes)} nodes, {len(lost)} rebuilt without a score")
    print(fixed.stdout.strip().splitlines()[-1][:200])
    last = max(refs)
    assert nodes[last]["parent"] is not None and nodes[last]["parent"] < last
    assert revtree_here(home, "show", run_id).returncode == 0

    patch = tmp_path / "x.patch"
    revtree_here(home, "export", run_id, "--node", str(last), "--patch", str(patch))
    text = patch.read_text()
    assert text.startswith("diff --git a/sol.py b/sol.py"), text
    src = tmp_path / "task"
    subprocess.run(["git", "apply", "--check", str(patch)], cwd=src, check=True)


@pytest.mark.slow  # 18 s of --quick under -n 2 (issue 24)
def test_a_deleted_database_is_rebuilt_from_the_run_folders(tmp_path: Path, home: Path) -> None:
    """The user deletes revtree.db (and its -wal/-shm) after a run: ``doctor`` does not
    say "no run has used it yet" while a run folder remains; ``--repair`` rebuilds it."""
    task = make_task(tmp_path / "task", budget=3)
    revtree(home, "run", str(task), "--quiet", REVTREE_SANDBOX="local")
    (run_dir,) = (home / "runs").iterdir()
    git = GitStore(run_dir / "repo.git")
    refs = git.node_refs()
    git.close()
    for part in home.glob("revtree.db*"):
        part.unlink()

    found = revtree_here(home, "doctor", check=False)
    assert found.returncode == 1, found.stdout + found.stderr
    assert "is missing" in found.stdout and "doctor --repair" in found.stdout, found.stdout
    assert not (home / "revtree.db").exists()  # the check creates nothing

    revtree_here(home, "doctor", "--repair")
    assert revtree_here(home, "doctor").stdout.strip() == "no problems found"
    shown = json.loads(revtree_here(home, "show", run_dir.name, "--json", "--nodes").stdout)
    assert {n["id"]: n["commit"] for n in shown["nodes"]} == refs and len(refs) == 3
    assert shown["status"] == "failed"
