"""Fixtures of the dashboard tests: a real ``revtree dashboard`` server (a subprocess on
127.0.0.1, ``--port 0``) over a real SQLite store, and real runs made by the real CLI.

- ``Site``: a revtree home and its database URL (every process of a test shares them).
- ``start_dashboard(site, *args, **env)``: a context manager that starts the server,
  reads its ``dashboard: URL`` line (bounded wait) and yields a :class:`Dashboard`
  (``.url`` without the query, ``.token``, ``.proc``); the server is killed on exit.
- ``make_run(site, *args, **task)``: a finished run made by ``revtree run`` (the knob
  task of ``tests/orchestrator/conftest.py``); returns its id.
- fixtures, one world per test module: ``site`` (module scope: a copy of the session's
  template home, so a module may add runs and nodes without touching another's),
  ``finished_run`` (the id of the finished 6-node greedy run every ``site`` holds),
  ``dashboard`` (a server over ``site``, token ``TOKEN``). The template run is made by
  the real CLI once per session, shared by the xdist workers through a file lock
  (issue 24: each module made its own, 10-15 s apiece).
- browser tests: ``browser`` (a headless Chromium, module scope; skips without one) and
  ``page`` (a 1280x800 page whose last state is saved under ``ARTIFACTS``);
  ``big_run(site, template_run)``: a 10,000-node run inserted in bulk.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import queue
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from revtree.memory import NodeStatus, Store
from revtree.memory.records import Node
from tests.orchestrator.conftest import cli_env, make_task, revtree, spawn, wait_for

__all__ = [
    "ARTIFACTS",
    "TOKEN",
    "WAIT_MS",
    "Dashboard",
    "Site",
    "big_run",
    "end_process",
    "make_run",
    "make_task",
    "revtree",
    "spawn",
    "start_dashboard",
    "wait_for",
]

TOKEN = "test-token-0123456789"
LINE = re.compile(r"^dashboard: (http://[^\s?]+?)/?(?:\?token=(\S+))?$")


@dataclass
class Site:
    """A revtree home and the URL of its SQLite database."""

    home: Path
    db: str
    env: dict[str, str] = field(default_factory=dict)  # extra environment of every process

    def cli(self, *args: str, check: bool = True, timeout: float = 300) -> Any:
        """``revtree ARGS --db URL`` in a subprocess (a CompletedProcess)."""
        return revtree(self.home, *args, "--db", self.db, check=check, timeout=timeout, **self.env)


@dataclass
class Dashboard:
    url: str  # http://127.0.0.1:PORT, no trailing slash, no query
    token: str | None  # None for a read-only dashboard
    proc: subprocess.Popen[str]
    site: Site
    lines: list[str] = field(default_factory=list)  # what it printed (stdout and stderr)

    def headers(self) -> dict[str, str]:
        return {"X-Revtree-Token": self.token} if self.token else {}


def _reader(proc: subprocess.Popen[str], out: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        out.put(line.rstrip("\n"))
    out.put(None)


@contextlib.contextmanager
def start_dashboard(
    site: Site, *args: str, timeout: float = 30.0, **env: str
) -> Iterator[Dashboard]:
    """``revtree dashboard --port 0 --db URL ARGS`` until the block ends. The token is
    ``TOKEN`` (``$REVTREE_DASHBOARD_TOKEN``) unless ``env`` says otherwise."""
    extra = {"REVTREE_DASHBOARD_TOKEN": TOKEN, "REVTREE_SANDBOX": "local", **site.env, **env}
    proc = subprocess.Popen(
        [sys.executable, "-m", "revtree", "dashboard", "--port", "0", "--db", site.db, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(site.home, **extra),
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_reader, args=(proc, lines), daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    match = None
    try:
        while match is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no 'dashboard:' line within {timeout}s: {seen}")
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"revtree dashboard exited {proc.wait(5)}: {seen}")
            seen.append(line)
            match = LINE.match(line.strip())
        dash = Dashboard(match.group(1), match.group(2), proc, site, seen)
        yield dash
    finally:
        end_process(proc)


def end_process(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after 10 s: a server a test started is gone when it ends."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def make_run(site: Site, *args: str, sleep: float = 0.0, budget: int = 6, **task: Any) -> str:
    """A run of the knob task made and driven to its end by ``revtree run``; its id.
    ``args`` go to ``revtree run`` (``--policy evolution``, ...), ``task`` to
    ``make_task`` (``policy=``, ``extra=``...)."""
    n = len(list(site.home.parent.glob("task-*")))
    folder = make_task(site.home.parent / f"task-{n}", budget=budget, sleep=sleep, **task)
    site.cli("run", str(folder), "--quiet", *args)
    return str(json.loads(site.cli("show", "last", "--json").stdout)["run_id"])


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(the folder holding ``home`` and ``task-0``, the run id): a finished greedy run
    of 6 nodes of the knob task (offline agents, no model), made by ``revtree run``
    once per session. Under xdist the workers share one (in the folder above their own
    base temp, behind an ``flock``): the first worker makes it, the others wait for it.
    Read-only: ``site`` copies it."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root, done = shared / "dash-template", shared / "dash-template.json"
    with open(shared / "dash-template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            (root / "home").mkdir(parents=True)
            made = Site(root / "home", _db(root / "home"), {"REVTREE_SANDBOX": "local"})
            done.write_text(json.dumps(make_run(made)))
    return root, str(json.loads(done.read_text()))


def _db(home: Path) -> str:
    return f"sqlite:///{home / 'revtree.db'}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, template: tuple[Path, str]) -> Site:
    """A home of this module's own that holds the template's finished run (its task
    folder copied beside it as ``task-0``)."""
    root = tmp_path_factory.mktemp("dash")
    shutil.copytree(template[0], root, dirs_exist_ok=True)
    home = root / "home"
    return Site(home, _db(home), {"REVTREE_SANDBOX": "local"})


@pytest.fixture(scope="module")
def finished_run(template: tuple[Path, str]) -> str:
    """The id of the finished greedy run of 6 nodes of the knob task that ``site`` holds."""
    return template[1]


@pytest.fixture(scope="module")
def dashboard(site: Site, finished_run: str) -> Iterator[Dashboard]:
    """A dashboard over ``site`` (which holds ``finished_run``), token ``TOKEN``."""
    with start_dashboard(site) as d:
        yield d


# -- browser tests -------------------------------------------------------------------
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"
WAIT_MS = 20_000  # the longest any single browser wait may take


def chromium_path() -> str | None:
    return os.environ.get("REVTREE_TEST_CHROMIUM") or shutil.which("chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    exe = chromium_path()
    if not exe:
        pytest.skip("no Chromium: set REVTREE_TEST_CHROMIUM or install Debian's chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:  # pragma: no cover - playwright is a test dependency
        pytest.skip(f"no Chromium: playwright is not importable ({e})")
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=exe,
            headless=True,
            args=["--no-sandbox", "--no-proxy-server", "--disable-extensions"],
        )
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh 1280x800 page; its console errors are collected in ``page.errors`` and a
    screenshot of its last state is written under test-artifacts/dashboard/."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    pg.set_default_timeout(WAIT_MS)
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    try:
        yield pg
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        try:
            pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
        finally:
            ctx.close()


def stored_run(
    store: Store, template_run: str, run_id: str, task: str, score: float, t0: float, seed: int = 0
) -> None:
    """A greedy minimizing run ``run_id`` with the spec of ``template_run``, its baseline
    scored ``score`` at ``t0``; its other nodes are the caller's to add."""
    spec = store.get_run(template_run).spec
    root = Node(
        run_id, 0, None, "baseline", NodeStatus.SUCCEEDED, score=score, created_at=t0,
        finished_at=t0 + 1,
    )  # fmt: skip
    baseline = (root, ("node", "baseline", None))
    store.create_run(run_id, task, "greedy", "minimize", seed, spec, root=baseline)


def big_run(site: Site, template_run: str, n: int = 10_000, seed: int = 3) -> str:
    """A run of ``n`` finished nodes inserted in bulk through the Store (the spec of a
    real run, a random tree that favours recent parents, 5% failures, a few alarms)."""
    rng = random.Random(seed)
    store = Store(site.db)
    try:
        run_id = f"big-{int(time.time())}-{rng.randrange(10**6)}"
        t0 = time.time() - 3600
        stored_run(store, template_run, run_id, "big", 25.0, t0, seed)
        nodes, depth = [], [0]
        for i in range(1, n):
            lo = max(0, i - 200)
            parent = rng.randrange(lo, i) if rng.random() < 0.9 else rng.randrange(0, i)
            depth.append(depth[parent] + 1)
            failed = rng.random() < 0.05
            nodes.append(
                Node(
                    run_id,
                    i,
                    parent,
                    rng.choice(["draft", "improve", "debug"]),
                    NodeStatus.FAILED if failed else NodeStatus.SUCCEEDED,
                    depth=depth[i],
                    score=None if failed else 25.0 * rng.random() * (1 - i / (2 * n)),
                    proposal={"hypothesis": f"candidate {i}: try something {rng.random():.3f}"},
                    created_at=t0 + i * 0.3,
                    finished_at=t0 + i * 0.3 + 0.2,
                    alarm={"kind": "drift", "message": "staged"} if i % 2500 == 0 else None,
                )
            )
            if len(nodes) == 2000 or i == n - 1:
                store.copy_history(run_id, nodes, [], ("run", f"bulk {i + 1}", None))
                nodes = []
        store.update_run(run_id, status="completed", reason="bulk-built for a test")
    finally:
        store.close()
    return run_id
