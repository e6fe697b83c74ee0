"""Housekeeping with real git, real databases and real runs: export to a branch, doctor, gc.

gc is checked on SQLite and (marker ``postgres``) on PostgreSQL with the same test."""

from __future__ import annotations

import shutil
import socket
import sqlite3
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from revtree.errors import RevtreeError
from revtree.memory import GitStore, Node, NodeStatus, RunStatus, Store
from revtree.memory.checkpoints import gc
from revtree.orchestrator import Orchestrator, RunPaths, create_run
from revtree.orchestrator.commands.doctor import doctor
from revtree.orchestrator.commands.export import export_branch
from revtree.orchestrator.commands.fork import lineage
from revtree.orchestrator.commands.report import summarize
from revtree.orchestrator.commands.retry import retry
from revtree.tasks import TaskSpec, load_task

from ..pg import fresh_database
from .conftest import make_task, revtree, revtree_here, wait_for


@pytest.fixture(autouse=True)
def _keep_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs keep their finished candidates' checkpoints (REVTREE_PRUNE_EVERY=0), as
    before runs pruned their own: what gc and retry do with them is under test here."""
    monkeypatch.setenv("REVTREE_PRUNE_EVERY", "0")


def _finished_run(store: Store, home: Path, task: Path) -> str:
    run = create_run(store, load_task(task), home)
    Orchestrator(store, run.id, home=home).drive()
    return run.id


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def _user_repo(tmp_path: Path) -> Path:
    """A git repository holding the task in the subfolder ``proj``, with local changes."""
    repo = tmp_path / "user"
    make_task(repo / "proj", budget=6)
    (repo / "README").write_text("hello\n")
    _git(repo.parent, "init", "-q", str(repo))
    _git(repo, "config", "user.name", "Tester")
    _git(repo, "config", "user.email", "tester@example.com")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "initial")
    (repo / "README").write_text("hello, edited\n")  # unstaged
    (repo / "new.txt").write_text("staged\n")
    _git(repo, "add", "new.txt")  # staged
    return repo


def _no_index(diff: str) -> list[str]:
    """A diff's lines without its ``index`` lines (abbreviation lengths vary by repo)."""
    return [line for line in diff.strip().splitlines() if not line.startswith("index ")]


def _deepest(store: Store, run_id: str) -> Node:
    nodes = store.nodes(run_id)
    return max((n for n in nodes if n.commit and n.id), key=lambda n: (n.depth, n.id))


def test_export_branch_commits_the_node_without_touching_the_work_tree(
    tmp_path: Path, home: Path, store: Store
) -> None:
    repo = _user_repo(tmp_path)
    run_id = _finished_run(store, home, repo / "proj")
    node = _deepest(store, run_id)
    nodes = {n.id: n for n in store.nodes(run_id)}
    head = _git(repo, "rev-parse", "HEAD").strip()
    status, staged = _git(repo, "status", "--porcelain"), _git(repo, "diff", "--cached")
    assert status  # the user has local changes that must survive

    done = export_branch(store, run_id, node.id, repo / "proj", "revtree/best", home)

    assert _git(repo, "status", "--porcelain") == status
    assert _git(repo, "diff", "--cached") == staged
    assert (repo / "README").read_text() == "hello, edited\n"
    assert _git(repo, "rev-parse", "HEAD").strip() == head  # HEAD did not move
    assert _git(repo, "rev-parse", "revtree/best").strip() == done.commit
    assert _git(repo, "rev-parse", "revtree/best^").strip() == head
    assert _git(repo, "rev-list", "--count", f"{head}..revtree/best").strip() == "1"
    git = GitStore(RunPaths(home, run_id).repo)
    root = nodes[0].commit
    assert root and node.commit
    changed = git.changed_paths(root, node.commit)
    assert changed
    names = _git(repo, "diff", "--name-only", "HEAD", "revtree/best").split()
    assert names == [f"proj/{p}" for p in changed] == done.files
    for p in changed:
        assert _git(repo, "show", f"revtree/best:proj/{p}") == git.read(node.commit, p).decode()
    # the diff is exactly the run's diff of the node against its root, one folder down
    ours = _git(repo, "diff", "--no-color", "--binary", "--relative=proj", "HEAD", "revtree/best")
    assert _no_index(ours) == _no_index(git.diff(root, node.commit))
    git.close()
    message = _git(repo, "log", "-1", "--format=%B", "revtree/best")
    assert f"node {node.id} of run {run_id}" in message.splitlines()[0]
    chain = lineage(nodes, node.id)
    assert len(chain) >= 2
    lines = [line for line in message.splitlines() if line.startswith("- node ")]
    assert [int(line.split()[2]) for line in lines] == [n.id for n in chain]
    assert "[baseline]" in lines[0] and "baseline: the untouched source" in lines[0]
    for n, line in zip(chain, lines, strict=True):
        assert f"[{n.operator}]" in line
        assert (n.proposal or {}).get("hypothesis", "").splitlines()[0] in line
        if n.score is not None:
            assert f"{n.score:.6g}" in line


def test_export_branch_refuses_clearly(tmp_path: Path, home: Path, store: Store) -> None:
    repo = _user_repo(tmp_path)
    run_id = _finished_run(store, home, repo / "proj")
    node = _deepest(store, run_id)
    export_branch(store, run_id, node.id, repo, "taken", home)
    with pytest.raises(RevtreeError, match="branch 'taken' already exists"):
        export_branch(store, run_id, node.id, repo, "taken", home)
    empty = tmp_path / "empty"
    _git(tmp_path, "init", "-q", str(empty))
    with pytest.raises(RevtreeError, match="has no HEAD commit"):
        export_branch(store, run_id, node.id, empty, "x", home)
    _git(empty, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "x", "--allow-empty")
    with pytest.raises(RevtreeError, match="not inside the repository"):
        export_branch(store, run_id, node.id, empty, "x", home)
    store.add_node(Node(run_id, 99, 0, "improve", NodeStatus.PENDING), ("select", "n99", None))
    with pytest.raises(RevtreeError, match=r"node 99 .* has no commit"):
        export_branch(store, run_id, 99, repo, "y", home)
    for name in ("x", "y"):  # nothing half-made
        assert (
            subprocess.run(
                ["git", "-C", str(repo), "rev-parse", "--verify", "-q", name], capture_output=True
            ).returncode
            != 0
        )


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_doctor_finds_and_repairs(tmp_path: Path, home: Path, store: Store) -> None:
    run_id = _finished_run(store, home, make_task(tmp_path / "t", budget=5))
    assert doctor(store, home) == []
    nodes = {n.id: n for n in store.nodes(run_id)}
    repo = RunPaths(home, run_id).repo
    _git(repo, "update-ref", "-d", "refs/revtree/nodes/1")
    _git(repo, "update-ref", "refs/revtree/nodes/77", nodes[0].commit or "")
    store.update_run(run_id, status=RunStatus.RUNNING, pid=_dead_pid(), host=socket.gethostname())
    db = sqlite3.connect(home / "revtree.db")
    db.execute("PRAGMA foreign_keys=OFF")
    db.execute(
        "INSERT INTO evaluations (run_id, node_id, stage, repeat, ok, duration, created_at) "
        "VALUES (?, 555, 'full', 0, 1, 0.1, 0)",
        (run_id,),
    )
    db.commit()
    db.close()

    expected = {"missing-ref", "stray-ref", "dead-run", "orphan-evaluation"}
    for _ in range(2):  # without --repair nothing changes
        found = doctor(store, home, run_id)
        assert {f.kind for f in found} == expected, found
        assert not any(f.repaired for f in found)
        assert all(f.run == run_id for f in found)
    fixed = doctor(store, home, repair=True)
    assert {f.kind for f in fixed} == expected and all(f.repaired for f in fixed)
    assert doctor(store, home) == []
    run = store.get_run(run_id)
    assert (run.status, run.reason, run.pid) == (
        RunStatus.FAILED,
        "crashed (found by doctor)",
        None,
    )
    git = GitStore(repo)
    assert git.node_refs() == {i: n.commit for i, n in nodes.items()}
    git.close()
    assert all(e.node_id in nodes for e in store.evaluations(run_id))


def test_doctor_reports_what_it_cannot_repair(tmp_path: Path, home: Path, store: Store) -> None:
    run_id = _finished_run(store, home, make_task(tmp_path / "t", budget=4))
    done = [n for n in store.nodes(run_id) if n.status is NodeStatus.SUCCEEDED and n.id]
    store.update_node(run_id, done[0].id, commit=None)
    store.update_node(run_id, done[1].id, commit="ab" * 20)
    found = doctor(store, home, repair=True)
    assert {(f.kind, f.repaired) for f in found} == {
        ("no-commit", False),
        ("missing-commit", False),
    }, found
    # a run being driven by a live process is not touched
    store.update_run(run_id, status=RunStatus.RUNNING, pid=_own_pid(), host=socket.gethostname())
    assert "dead-run" not in {f.kind for f in doctor(store, home, repair=True)}

    # a run without its root node (as a kill between two transactions once left) is named
    store.create_run("rootless", "t", "greedy", "minimize", 0, {})
    store.update_run("rootless", status=RunStatus.STOPPED)
    kinds = {(f.run, f.kind) for f in doctor(store, home, "rootless")}
    assert kinds == {("rootless", "no-root"), ("rootless", "missing-repo")}


def _own_pid() -> int:
    import os

    return os.getpid()


def _thread_rows(home: Path) -> dict[str, int]:
    db = sqlite3.connect(home / "revtree.db")
    try:
        rows = db.execute("SELECT thread_id, COUNT(*) FROM checkpoints GROUP BY thread_id")
        return dict(rows.fetchall())
    finally:
        db.close()


def test_gc_prunes_finished_checkpoints_and_the_run_resumes(
    tmp_path: Path, home: Path, store: Store
) -> None:
    run_id = _finished_run(store, home, make_task(tmp_path / "t", budget=4))
    finished = {f"{run_id}:{n.thread_id}" for n in store.nodes(run_id) if n.status.is_finished()}
    before = _thread_rows(home)
    assert finished & before.keys()
    db = sqlite3.connect(home / "revtree.db")
    cols = [r[1] for r in db.execute("PRAGMA table_info(checkpoints)")]
    unfinished = create_run(store, load_task(tmp_path / "t"), home)  # its root is unfinished
    keep = f"{unfinished.id}:root"
    picked = ", ".join(f"'{keep}'" if c == "thread_id" else c for c in cols)
    db.execute(
        f"INSERT INTO checkpoints ({', '.join(cols)}) SELECT {picked} FROM checkpoints LIMIT 1"
    )
    db.commit()
    db.close()

    report = gc(store)
    assert report["checkpoints"] == sum(before[t] for t in finished if t in before)
    assert report["threads"] == len(finished & before.keys())
    assert report["vacuumed"] and report["bytes_before"] > 0 and report["bytes_after"] > 0
    after = _thread_rows(home)
    assert not finished & after.keys()
    assert after == {keep: 1}
    assert gc(store)["checkpoints"] == 0

    # the run is intact: shown, and resumed with a bigger budget
    assert summarize(store, store.get_run(run_id))["n_nodes"] == 4
    spec = TaskSpec.model_validate(store.get_run(run_id).spec)
    bigger = spec.with_overrides(budget={"max_nodes": 6})
    store.update_run(run_id, spec=bigger.model_dump(mode="json"))
    run = Orchestrator(store, run_id, home=home).drive()
    assert run.status is RunStatus.COMPLETED
    nodes = store.nodes(run_id)
    assert len(nodes) == 6 and all(n.status.is_finished() for n in nodes)
    assert set(store.evaluation_counts(run_id).values()) == {1}
    assert doctor(store, home) == []


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_store(request: pytest.FixtureRequest, home: Path) -> Iterator[Store]:
    """A Store on SQLite (in ``home``) or on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        s = Store(f"sqlite:///{home / 'revtree.db'}")
        yield s
        s.close()
        return
    with fresh_database() as url:
        s = Store(url)
        yield s
        s.close()


CHECKPOINT_TABLES = {  # where LangGraph's savers keep their rows: gc's report key -> table
    "sqlite": {"checkpoints": "checkpoints", "writes": "writes"},
    "postgresql": {
        "checkpoints": "langgraph.checkpoints",
        "blobs": "langgraph.checkpoint_blobs",
        "writes": "langgraph.checkpoint_writes",
    },
}


def _checkpoint_rows(store: Store) -> dict[str, Counter[str]]:
    """Rows per LangGraph thread, per checkpoint table."""
    out: dict[str, Counter[str]] = {}
    with store.engine.connect() as conn:
        for table in CHECKPOINT_TABLES[store.engine.dialect.name].values():
            rows = conn.execute(text(f"SELECT thread_id, COUNT(*) FROM {table} GROUP BY thread_id"))
            out[table] = Counter({t: int(n) for t, n in rows})
    return out


def _threads(store: Store, run_id: str, finished: bool) -> set[str]:
    return {
        f"{run_id}:{n.thread_id}"
        for n in store.nodes(run_id)
        if n.thread_id and n.status.is_finished() is finished
    }


def _stopped_midway(store: Store, home: Path, task: Path, after: int) -> str:
    """A run stopped (as by ``revtree stop``) once ``after`` nodes succeeded, with
    candidates still in flight: their nodes stay unfinished, their checkpoints kept."""
    run = create_run(store, load_task(task), home)
    stop, errors = threading.Event(), []

    def drive() -> None:
        try:
            Orchestrator(store, run.id, home=home).drive(stop)
        except BaseException as e:  # surfaced below
            errors.append(e)

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        wait_for(
            lambda: sum(n.status is NodeStatus.SUCCEEDED for n in store.nodes(run.id)) >= after,
            120,
            f"{after} succeeded nodes",
        )
    finally:
        stop.set()
        driver.join(timeout=120)
    assert not driver.is_alive() and errors == []
    assert store.get_run(run.id).status is RunStatus.STOPPED
    return run.id


@pytest.mark.slow  # 19 s of --quick under -n 2 (issue 24)
def test_gc_mid_run_keeps_unfinished_candidates_and_resume_completes(
    tmp_path: Path, home: Path, any_store: Store
) -> None:
    store = any_store
    done = _finished_run(store, home, make_task(tmp_path / "a", budget=4))
    task = make_task(tmp_path / "b", budget=10, parallel=2, sleep=0.4)
    deleted = _finished_run(store, home, make_task(tmp_path / "c", budget=3))
    stopped = _stopped_midway(store, home, task, after=3)
    shutil.rmtree(RunPaths(home, deleted).dir)  # as `revtree rm` does: its folder, then
    store.delete_run(deleted)  # its rows; its checkpoints are orphans now
    before = _checkpoint_rows(store)
    tables = CHECKPOINT_TABLES[store.engine.dialect.name]
    main = tables["checkpoints"]
    orphans = {t for t in before[main] if t.startswith(f"{deleted}:")}
    finished = _threads(store, done, True) | _threads(store, stopped, True) | orphans
    unfinished = _threads(store, stopped, False)
    assert unfinished & before[main].keys()  # a stopped candidate with checkpoints to keep
    assert finished & before[main].keys() and orphans

    report = gc(store)

    after = _checkpoint_rows(store)
    for table, rows in before.items():
        assert not finished & after[table].keys()
        assert after[table] == Counter({t: n for t, n in rows.items() if t not in finished})
    for key, table in tables.items():
        assert report[key] == sum(n for t, n in before[table].items() if t in finished), key
    assert report["threads"] == len(finished & set().union(*before.values()))
    assert report["vacuumed"] and report["bytes_before"] > 0 and report["bytes_after"] > 0

    run = Orchestrator(store, stopped, home=home).drive()  # resume after gc
    assert run.status is RunStatus.COMPLETED, run.reason
    nodes = store.nodes(stopped)
    assert len(nodes) == 10 and all(n.status.is_finished() for n in nodes)
    assert set(store.evaluation_counts(stopped).values()) == {1}
    assert doctor(store, home) == []
    assert gc(store)["threads"] > 0  # the resumed candidates, finished now
    left = set().union(*_checkpoint_rows(store).values())
    assert not left & (_threads(store, done, True) | _threads(store, stopped, True))


def test_retry_after_gc_starts_the_pruned_thread_over(
    tmp_path: Path, home: Path, any_store: Store
) -> None:
    """``revtree retry`` is the one reader of a finished candidate's checkpoints: after
    gc pruned them, a retry starts the thread over and still completes the node."""
    store = any_store
    run_id = _finished_run(store, home, make_task(tmp_path / "t", budget=4))
    leaf = _deepest(store, run_id)
    assert gc(store)["threads"] == 4
    thread = f"{run_id}:{leaf.thread_id}"
    main = CHECKPOINT_TABLES[store.engine.dialect.name]["checkpoints"]
    assert thread not in _checkpoint_rows(store)[main]

    node = retry(store, run_id, leaf.id, "evaluate", home=home)

    assert (node.status, node.attempt, node.commit) == (NodeStatus.SUCCEEDED, 2, leaf.commit)
    evals = store.evaluations(run_id, leaf.id)
    assert sorted({e.attempt for e in evals if e.stage == "full"}) == [1, 2]
    assert store.get_run(run_id).status is RunStatus.COMPLETED
    assert doctor(store, home) == []
    assert thread in _checkpoint_rows(store)[main]  # the new attempt's thread
    assert gc(store)["threads"] == 1


@pytest.mark.slow
def test_cli_export_doctor_gc(tmp_path: Path, home: Path, store: Store) -> None:
    repo = _user_repo(tmp_path)
    revtree(home, "run", str(repo / "proj"), "--quiet")
    run_id = store.list_runs()[0].id
    assert "no problems found" in revtree_here(home, "doctor").stdout
    out = revtree_here(home, "export", run_id, "--branch", "best", "--repo", str(repo)).stdout
    assert "branch best" in out
    assert _git(repo, "rev-parse", "best^").strip() == _git(repo, "rev-parse", "HEAD").strip()
    both = revtree_here(home, "export", run_id, "--branch", "b2", "--patch", "p", check=False)
    assert both.returncode == 2 and "exactly one" in both.stderr
    assert revtree_here(home, "export", run_id, check=False).returncode == 2
    again = revtree_here(
        home, "export", run_id, "--branch", "best", "--repo", str(repo), check=False
    )
    assert again.returncode == 2 and "already exists" in again.stderr

    _git(RunPaths(home, run_id).repo, "update-ref", "-d", "refs/revtree/nodes/1")
    found = revtree_here(home, "doctor", run_id[:8], check=False)
    assert found.returncode == 1 and "missing-ref" in found.stdout
    fixed = revtree_here(home, "doctor", "--repair")
    assert "missing-ref" in fixed.stdout and "yes" in fixed.stdout
    assert "no problems found" in revtree_here(home, "doctor").stdout
    out = revtree_here(home, "gc").stdout
    assert "removed" in out and "checkpoint" in out
    assert "0 checkpoint(s)" not in out
    assert "completed" in revtree_here(home, "show", run_id).stdout
