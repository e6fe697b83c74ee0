"""The dashboard's API against a real server (``revtree dashboard`` on 127.0.0.1), a real
SQLite store and real runs made by the real CLI; see docs/dashboard.md."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from revtree.memory import Store
from revtree.memory.gitstore import GitStore
from revtree.memory.records import Node, NodeStatus, RunStatus
from revtree.orchestrator.run import RunPaths
from tests.dashboard.conftest import (
    TOKEN,
    Dashboard,
    Site,
    make_run,
    make_task,
    start_dashboard,
    wait_for,
)
from tests.orchestrator.conftest import cli_env, revtree_here

XSS = "<script>alert(1)</script>"
RUN_KEYS = {
    "id", "task", "status", "reason", "policy", "direction", "best_score", "best_node",
    "baseline_score", "holdout_score", "n_nodes", "usd", "created_at", "updated_at",
    "parent_run", "parent_node", "n_alarms",
}  # fmt: skip
NODE_COLUMNS = (
    "id", "parent", "status", "score", "op", "created", "finished", "alarm", "verified",
    "hypothesis",
)  # fmt: skip


def client(d: Dashboard) -> httpx.Client:
    return httpx.Client(base_url=d.url, timeout=30)


def get(d: Dashboard, path: str) -> Any:
    r = client(d).get(path)
    assert r.status_code == 200, (path, r.status_code, r.text)
    return r.json()


def post(d: Dashboard, path: str, body: Any = None, token: str | None = TOKEN) -> httpx.Response:
    headers = {"X-Revtree-Token": token} if token is not None else {}
    return client(d).post(path, json=body, headers=headers, timeout=120)


def sse(d: Dashboard, path: str, most: int, timeout: float = 30.0, **headers: str) -> list[Any]:
    """(event, id, data) of the stream's messages until ``end`` or ``most`` of them."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    with client(d).stream("GET", path, headers=headers, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        event, ident, data = None, None, None
        for line in r.iter_lines():
            assert time.monotonic() < deadline, f"stream too slow: {out}"
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("id:"):
                ident = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                data = json.loads(line.split(":", 1)[1])
            elif line == "" and event is not None:
                out.append((event, ident, data))
                if event == "end" or len(out) >= most:
                    break
                event, ident, data = None, None, None
    return out


def status_of(d: Dashboard, run_id: str) -> str:
    return str(get(d, f"/api/runs/{run_id}")["status"])


@pytest.fixture(scope="module")
def second_run(site: Site, finished_run: str) -> str:
    """A finished 3-node run, plus node 50: a hand-made candidate whose hypothesis and
    diff hold a script tag."""
    run_id = make_run(site, budget=3)
    store = Store(site.db)
    try:
        root = store.node(run_id, 0)
        assert root.commit is not None
        git = GitStore(RunPaths(site.home, run_id).repo)
        sha = git.commit(root.commit, {"sol.py": f"X = 1.0\nN = 7\n# {XSS}\n".encode()}, XSS)
        git.set_node_ref(50, sha)
        git.close()
        node = Node(
            run_id, 50, 0, "improve", NodeStatus.SUCCEEDED, depth=1, commit=sha,
            proposal={"hypothesis": f"{XSS} and more", "plan": XSS}, score=99.0, n_evals=0,
            finished_at=time.time(),
        )  # fmt: skip
        store.add_node(node, ("node", "node 50 added by the test", None))
    finally:
        store.close()
    return run_id


# -- reading --------------------------------------------------------------------------
def test_info_and_runs(dashboard: Dashboard, finished_run: str) -> None:
    info = get(dashboard, "/api/info")
    assert info["read_only"] is False and info["version"] and "revtree.db" in info["db"]
    runs = get(dashboard, "/api/runs")["runs"]
    mine = next(r for r in runs if r["id"] == finished_run)
    assert set(mine) >= RUN_KEYS
    assert mine["status"] == "completed" and mine["n_nodes"] == 6 and mine["task"] == "quad"
    assert [r["created_at"] for r in runs] == sorted((r["created_at"] for r in runs), reverse=True)


def test_run_is_show_json_plus(dashboard: Dashboard, site: Site, finished_run: str) -> None:
    data = get(dashboard, f"/api/runs/{finished_run}")
    shown = json.loads(
        revtree_here(site.home, "show", finished_run, "--json", "--db", site.db).stdout
    )
    assert {k: data[k] for k in shown} == shown  # the lean summary is the same summary
    assert data["maximize"] is False and data["approve"] is False and data["waiting"] == []
    assert data["budget"]["nodes"] == {"used": 6, "max": 6, "twins": 0}
    assert data["budget"]["usd"]["max"] is None
    events = get(dashboard, f"/api/runs/{finished_run}/events?after=0&limit=5000")["events"]
    assert data["last_seq"] == events[-1]["seq"] > 5


def test_nodes_are_columns(dashboard: Dashboard, finished_run: str) -> None:
    cols = get(dashboard, f"/api/runs/{finished_run}/nodes")
    shown = get(dashboard, f"/api/runs/{finished_run}")
    assert all(len(cols[k]) == 6 for k in NODE_COLUMNS), cols
    assert cols["id"] == [0, 1, 2, 3, 4, 5] and cols["parent"][0] is None
    assert cols["best"] == shown["best_node"]
    assert cols["lineage"][0] == 0 and cols["lineage"][-1] == cols["best"]
    for child, parent in zip(cols["lineage"][1:], cols["lineage"], strict=False):
        assert cols["parent"][cols["id"].index(child)] == parent
    assert set(cols["status"]) == {"succeeded"} and set(cols["alarm"]) == {0}
    assert cols["verified"][0] == 1  # the baseline is verified (repeats past the first)
    assert all(isinstance(h, str) and len(h) <= 80 for h in cols["hypothesis"])
    assert cols["holdout"] == []


def test_node_detail_has_its_diff(dashboard: Dashboard, site: Site, finished_run: str) -> None:
    node = get(dashboard, f"/api/runs/{finished_run}/nodes/1")
    plain = revtree_here(site.home, "diff", finished_run, "1", "--db", site.db).stdout
    changed = next(
        line for line in plain.splitlines() if line.startswith("+X") or line.startswith("+N")
    )
    assert node["id"] == 1 and node["parent"] == 0 and node["status"] == "succeeded"
    assert changed[1:] in node["diff_html"] and 'class="gi"' in node["diff_html"]
    assert node["diff_stat"] == [
        {"file": "sol.py", "added": plain.count("\n+") - 1, "removed": plain.count("\n-") - 1}
    ]
    assert node["evaluations"] and node["evaluations"][0]["stage"] == "full"
    assert {"hypothesis", "plan", "review", "lesson", "llm_calls", "transcript"} <= set(node)
    assert node["transcript"] == {"prefixes": {}, "calls": []}  # offline agents: no model
    root = get(dashboard, f"/api/runs/{finished_run}/nodes/0")
    assert root["diff_html"] == "" and root["diff_stat"] == []


def test_script_comes_back_as_data_and_the_diff_escapes_it(
    dashboard: Dashboard, second_run: str
) -> None:
    r = client(dashboard).get(f"/api/runs/{second_run}/nodes/50")
    assert r.headers["content-type"] == "application/json"
    node = r.json()
    assert node["hypothesis"] == f"{XSS} and more" and node["plan"] == XSS
    assert XSS not in node["diff_html"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in node["diff_html"]
    cols = get(dashboard, f"/api/runs/{second_run}/nodes")
    assert cols["hypothesis"][cols["id"].index(50)] == f"{XSS} and more"


def test_events_page(dashboard: Dashboard, finished_run: str) -> None:
    first = get(dashboard, f"/api/runs/{finished_run}/events?after=0&limit=3")["events"]
    assert [e["seq"] for e in first] == [1, 2, 3]
    assert set(first[0]) == {"seq", "ts", "kind", "message", "node_id", "data"}
    later = get(dashboard, f"/api/runs/{finished_run}/events?after=2&limit=2")["events"]
    assert [e["seq"] for e in later] == [3, 4]
    r = client(dashboard).get(f"/api/runs/{finished_run}/events?after=x")
    assert r.status_code == 400 and "error" in r.json()


def test_stream_of_a_finished_run_ends(dashboard: Dashboard, finished_run: str) -> None:
    last = get(dashboard, f"/api/runs/{finished_run}")["last_seq"]
    got = sse(dashboard, f"/api/runs/{finished_run}/stream?after=0", most=10_000)
    assert got[-1][0] == "end"
    logs = got[:-1]
    assert [m[0] for m in logs] == ["log"] * last
    assert [int(m[1]) for m in logs] == list(range(1, last + 1))
    assert [m[2]["seq"] for m in logs] == list(range(1, last + 1))
    tail = sse(dashboard, f"/api/runs/{finished_run}/stream?after={last - 2}", most=100)
    assert [m[0] for m in tail] == ["log", "log", "end"]
    resumed = sse(
        dashboard, f"/api/runs/{finished_run}/stream", most=100, **{"Last-Event-ID": str(last)}
    )
    assert [m[0] for m in resumed] == ["end"]


def test_stream_keeps_up_with_a_busy_run(dashboard: Dashboard, site: Site) -> None:
    """Events written flat out (well past 50/s) all arrive, once and in order, then end."""
    store = Store(site.db)
    run_id = f"busy-{time.monotonic_ns()}"
    store.create_run(run_id, "quad", "greedy", "minimize", 1, {})
    got: list[Any] = []

    def write() -> None:
        for k in range(300):
            store.add_event(run_id, "bench", f"event {k}", None, {"k": k})
        store.update_run(run_id, ("run", "done", None), status="completed")

    writer = threading.Thread(target=write)
    t0 = time.monotonic()
    try:
        writer.start()
        got = sse(dashboard, f"/api/runs/{run_id}/stream?after=0", most=10_000, timeout=60)
    finally:
        writer.join(60)
        store.close()
    assert [m[0] for m in got] == ["log"] * 302 + ["end"]
    assert [m[2]["seq"] for m in got[:-1]] == list(range(1, 303))
    assert [m[2]["data"]["k"] for m in got[1:301]] == list(range(300))
    assert 302 / (time.monotonic() - t0) > 50


def test_database_password_never_reaches_the_page() -> None:
    from revtree.web.views import hidden_password

    shown = hidden_password("postgresql+psycopg://me:s3cret@db.example:5432/revtree")
    assert "s3cret" not in shown and "me:***@db.example" in shown
    assert hidden_password("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"


@pytest.mark.slow  # 13 s of --quick under -n 2 (issue 24)
def test_compare(dashboard: Dashboard, finished_run: str, second_run: str) -> None:
    data = get(dashboard, f"/api/compare?runs={finished_run},{second_run}")
    assert data["runs"] == [finished_run, second_run]
    rows = dict((k, v) for k, v in data["rows"])
    assert rows["n_nodes"] == [6, 4] and rows["task"] == ["quad", "quad"]
    curve = data["curves"][finished_run]
    assert curve and all(len(p) == 2 for p in curve)
    assert [p[1] for p in curve] == sorted((p[1] for p in curve), reverse=True)  # minimize
    assert curve[-1][1] == get(dashboard, f"/api/runs/{finished_run}")["best_score"]
    r = client(dashboard).get(f"/api/compare?runs={finished_run},nosuchrun")
    assert r.status_code == 404 and "nosuchrun" in r.json()["error"]


@pytest.mark.slow
def test_islands_of_an_evolution_run(site: Site, dashboard: Dashboard, finished_run: str) -> None:
    assert get(dashboard, f"/api/runs/{finished_run}/islands") == {"islands": [], "cells": []}
    evo = make_run(site, "--policy", "evolution", budget=9)
    data = get(dashboard, f"/api/runs/{evo}/islands")
    cols = get(dashboard, f"/api/runs/{evo}/nodes")
    assert len(data["islands"]) >= 2
    members = {n for island in data["islands"] for n in island["nodes"]}
    succeeded = {i for i, s in zip(cols["id"], cols["status"], strict=True) if s == "succeeded"}
    assert members and members <= succeeded - {0}
    for island in data["islands"]:
        assert island["best"] is None or island["best"] in island["nodes"]
    assert data["cells"] and all({"key", "node", "score"} <= set(c) for c in data["cells"])


def test_unknown_run_node_and_route(dashboard: Dashboard, finished_run: str) -> None:
    c = client(dashboard)
    r = c.get(f"/api/runs/{finished_run}x")
    assert r.status_code == 404 and f"no run '{finished_run}x'" in r.json()["error"]
    r = c.get(f"/api/runs/{finished_run}/nodes/99")
    assert r.status_code == 404 and "no node 99" in r.json()["error"]
    assert c.get(f"/api/runs/{finished_run}/nodes/abc").status_code == 404
    assert c.get(f"/api/runs/{finished_run}x/stream").status_code == 404
    assert c.get("/api/nothing").json() == {"error": "no such route: GET /api/nothing"}
    assert c.get(f"/api/runs/{finished_run[:-1]}").json()["run_id"] == finished_run  # a prefix


# -- files ------------------------------------------------------------------------------
def raw_get(d: Dashboard, target: str) -> tuple[int, bytes]:
    """A GET of ``target`` exactly as written (no client-side normalisation)."""
    host, port = d.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_page_and_its_files(dashboard: Dashboard) -> None:
    code, body = raw_get(dashboard, "/")
    assert code == 200 and b"<html" in body.lower()
    from revtree.web.app import STATIC

    for name in (p.name for p in STATIC.iterdir() if p.is_file()):
        assert raw_get(dashboard, f"/static/{name}")[1] == (STATIC / name).read_bytes()
        assert raw_get(dashboard, f"/{name}")[1] == (STATIC / name).read_bytes()
    r = client(dashboard).get("/api/runs", headers={"Host": "evil.example"})
    assert r.status_code == 400 and "runs" not in r.text  # a rebound name reads nothing
    for path in ("/", "/index.html", "/api/info", "/nothing-here"):
        r = client(dashboard).get(path)
        assert r.headers["referrer-policy"] == "no-referrer", path  # the URL holds the token
        assert r.headers["x-content-type-options"] == "nosniff", path


@pytest.mark.parametrize(
    "target",
    [
        "/static/../../etc/passwd",
        "/static/../../../../../../etc/passwd",
        "/../../../../etc/passwd",
        "/static/..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
        "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/static/%252e%252e/%252e%252e/etc/passwd",
        "/static//etc/passwd",
        "//etc/passwd",
        "/static/..\\..\\..\\..\\etc\\passwd",
        "/static/../app.py",
        "/static/..%2fapp.py",
        "/../app.py",
        "/%2e%2e/app.py",
    ],
)
def test_no_file_outside_the_static_folder(dashboard: Dashboard, target: str) -> None:
    code, body = raw_get(dashboard, target)
    assert b"root:" not in body and b"create_app" not in body, (code, body[:200])
    assert code in (400, 404), (code, body[:200])


# -- actions ----------------------------------------------------------------------------
ACTIONS = ("stop", "resume", "fork", "retry", "approve", "reject")


@pytest.mark.parametrize("action", ACTIONS)
def test_actions_need_the_token(dashboard: Dashboard, finished_run: str, action: str) -> None:
    before = len(get(dashboard, "/api/runs")["runs"])
    body = {"node": 1, "set": [], "why": "x"}
    for token in (None, "", "wrong-token", TOKEN + "x", TOKEN[:-1]):
        r = post(dashboard, f"/api/runs/{finished_run}/{action}", body, token=token)
        assert r.status_code == 403, (token, r.text)
        assert "token" in r.json()["error"].lower()
    assert len(get(dashboard, "/api/runs")["runs"]) == before  # no fork happened


def test_read_only_refuses_every_action(site: Site, finished_run: str) -> None:
    with start_dashboard(site, "--read-only") as ro:
        assert ro.token is None and "token=" not in "\n".join(ro.lines)
        assert get(ro, "/api/info")["read_only"] is True
        for action in ACTIONS:
            r = post(ro, f"/api/runs/{finished_run}/{action}", {"node": 1}, token=TOKEN)
            assert r.status_code == 403 and r.json() == {"error": "read-only dashboard"}
        assert get(ro, f"/api/runs/{finished_run}")["run_id"] == finished_run


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"node": "1"}, '"node" must be'),
        ({"node": True}, '"node" must be'),
        ({"node": -1}, '"node" must be'),
        ({"node": 1, "set": "a=b"}, '"set" must be'),
        ({"node": 1, "set": ["no equals sign"]}, "key=value"),
        ({"node": 1, "set": ["--help=1"]}, "key=value"),
        ({"node": 1, "set": ["nosuch.key=1"]}, "nosuch"),  # the CLI's own words
        ({"node": 99}, "no node 99"),
        ([1, 2], "JSON object"),
    ],
)
def test_fork_checks_its_input(
    dashboard: Dashboard, finished_run: str, body: Any, words: str
) -> None:
    r = post(dashboard, f"/api/runs/{finished_run}/fork", body)
    assert r.status_code in (400, 404), r.text
    assert words in r.json()["error"]


@pytest.mark.slow  # 14 s of --quick under -n 2 (issue 24)
def test_actions_on_a_finished_run(dashboard: Dashboard, site: Site, finished_run: str) -> None:
    r = post(dashboard, f"/api/runs/{finished_run}/stop")
    # the CLI's exit 1 (issue 26): nothing was stopped, and the page is told so
    assert r.status_code == 400, r.text
    assert r.json()["error"] == f"run {finished_run} is not running (completed)"
    r = post(dashboard, f"/api/runs/{finished_run}/approve", {"node": 1})
    assert r.status_code == 400 and "does not hold candidates for approval" in r.json()["error"]
    r = post(dashboard, f"/api/runs/{finished_run}x/stop")
    assert r.status_code == 404


@pytest.mark.slow
def test_fork_starts_a_new_run(dashboard: Dashboard, finished_run: str) -> None:
    best = get(dashboard, f"/api/runs/{finished_run}")["best_node"]
    body = {"node": best, "set": ["budget.max_nodes=8"]}
    r = post(dashboard, f"/api/runs/{finished_run}/fork", body)
    assert r.status_code == 200, r.text
    new = r.json()["run"]
    assert new and new != finished_run
    assert f"run {new} forked from {finished_run}" in r.json()["message"]
    data = get(dashboard, f"/api/runs/{new}")
    assert data["parent_run"] == finished_run and data["parent_node"] == best
    wait_for(lambda: status_of(dashboard, new) != "running", 120, "the fork to finish")
    assert status_of(dashboard, new) == "completed"


@pytest.mark.slow
def test_retry_runs_the_node_again(dashboard: Dashboard, second_run: str) -> None:
    r = post(dashboard, f"/api/runs/{second_run}/retry", {"node": 1, "from": "evaluate"})
    assert r.status_code == 200, r.text
    assert "node 1" in r.json()["message"]

    def second_attempt() -> bool:
        n = get(dashboard, f"/api/runs/{second_run}/nodes/1")
        return bool(n["attempt"] == 2 and n["status"] in ("succeeded", "failed"))

    wait_for(second_attempt, 120, "attempt 2 of node 1")
    evals = get(dashboard, f"/api/runs/{second_run}/nodes/1")["evaluations"]
    assert {e["attempt"] for e in evals} == {1, 2}
    r = post(dashboard, f"/api/runs/{second_run}/retry", {"node": 1, "from": "nowhere"})
    assert r.status_code == 400 and '"from"' in r.json()["error"]


@pytest.fixture
def running(site: Site) -> Iterator[Any]:
    """``start(*args, **task)``: a detached run of a slow knob task; stopped at the end."""
    started: list[str] = []

    def start(*args: str, **task: Any) -> str:
        n = len(list(site.home.parent.glob("task-*")))
        folder = make_task(site.home.parent / f"task-{n}", **task)
        out = site.cli("run", str(folder), "--detach", *args).stdout
        run_id = out.split()[1]
        started.append(run_id)
        return run_id

    yield start
    store = Store(site.db)
    try:
        for run_id in started:
            run = store.get_run(run_id)
            if run.pid and not run.status.is_finished():
                site.cli("stop", run_id, check=False)
        for run_id in started:
            wait_for(lambda r=run_id: store.get_run(r).status.is_finished(), 60, "the stop")
    finally:
        store.close()


@pytest.mark.slow
def test_stop_and_resume_a_running_run(dashboard: Dashboard, running: Any) -> None:
    run_id = running(budget=200, sleep=0.3)
    wait_for(lambda: get(dashboard, f"/api/runs/{run_id}")["n_nodes"] >= 3, 60, "nodes")
    live = sse(dashboard, f"/api/runs/{run_id}/stream?after=0", most=8)
    assert [m[0] for m in live] == ["log"] * 8
    assert [int(m[1]) for m in live] == list(range(1, 9))
    r = post(dashboard, f"/api/runs/{run_id}/stop")
    assert r.status_code == 200 and f"to stop run {run_id}" in r.json()["message"], r.text
    wait_for(lambda: status_of(dashboard, run_id) == "stopped", 60, "status stopped")
    last = get(dashboard, f"/api/runs/{run_id}")["last_seq"]
    assert sse(dashboard, f"/api/runs/{run_id}/stream?after={last}", most=5) == [
        ("end", str(last), {"status": "stopped"})
    ]
    r = post(dashboard, f"/api/runs/{run_id}/resume")
    assert r.status_code == 200 and "detached" in r.json()["message"], r.text
    wait_for(lambda: status_of(dashboard, run_id) == "running", 60, "status running")
    n = get(dashboard, f"/api/runs/{run_id}")["n_nodes"]
    wait_for(lambda: get(dashboard, f"/api/runs/{run_id}")["n_nodes"] > n, 60, "new nodes")


@pytest.mark.slow
def test_approve_and_reject(dashboard: Dashboard, running: Any) -> None:
    run_id = running("--approve", budget=6, sleep=0.0)

    def waiting() -> list[int]:
        data = get(dashboard, f"/api/runs/{run_id}")
        assert data["approve"] is True
        return list(data["waiting"])

    first = wait_for(waiting, 60, "a candidate waiting")[0]  # type: ignore[index]
    r = post(dashboard, f"/api/runs/{run_id}/approve", {"node": first})
    assert r.status_code == 200 and f"node {first}" in r.json()["message"], r.text
    r = post(dashboard, f"/api/runs/{run_id}/approve", {"node": first})
    words = r.json()["error"]  # still held, or already on its way to the evaluation
    assert r.status_code == 400 and ("already approved" in words or "not waiting" in words)
    second = wait_for(lambda: [n for n in waiting() if n != first], 60, "another")[0]  # type: ignore[index]
    r = post(dashboard, f"/api/runs/{run_id}/reject", {"node": second, "why": f"no {XSS}"})
    assert r.status_code == 200, r.text

    def rejected() -> bool:
        return bool(get(dashboard, f"/api/runs/{run_id}/nodes/{second}")["status"] == "rejected")

    wait_for(rejected, 60, "the rejection recorded")
    r = post(dashboard, f"/api/runs/{run_id}/reject", {"node": second, "why": 5})
    assert r.status_code == 400 and '"why"' in r.json()["error"]


# -- the command ------------------------------------------------------------------------
def test_busy_port_is_one_clear_error(site: Site) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "revtree", "dashboard", "--port", str(port), "--db", site.db],
            capture_output=True,
            text=True,
            env=cli_env(site.home),
            timeout=60,
        )
    assert proc.returncode == 1, proc
    assert f"port {port}" in proc.stderr and "in use" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "dashboard:" not in proc.stdout


@pytest.mark.slow  # 25 s of --quick under -n 2 (issue 24)
def test_run_dashboard_refusals(site: Site) -> None:
    """--dashboard with --detach, or on a busy port, is refused before any run exists."""
    folder = make_task(site.home.parent / "task-refused", budget=3)
    before = len(json.loads(site.cli("ls", "--json").stdout))
    r = site.cli("run", str(folder), "--dashboard", "--detach", check=False)
    assert r.returncode == 2 and "--detach" in r.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = site.cli("run", str(folder), "--dashboard", "--dashboard-port", str(port), check=False)
    assert r.returncode != 0 and f"port {port}" in r.stderr and "dashboard:" not in r.stdout
    assert len(json.loads(site.cli("ls", "--json").stdout)) == before


def test_help_fits_80_columns(site: Site) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "revtree", "dashboard", "--help"],
        capture_output=True,
        text=True,
        env=cli_env(site.home, COLUMNS="80"),
        timeout=60,
    )
    assert proc.returncode == 0
    assert all(len(line) <= 80 for line in proc.stdout.splitlines()), proc.stdout
    for option in ("--db", "--host", "--port", "--read-only"):
        assert option in proc.stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.slow  # 27 s of --quick under -n 2 (issue 24)
def test_a_signal_stops_it_cleanly(site: Site, finished_run: str, sig: int) -> None:
    with start_dashboard(site, REVTREE_DASHBOARD_TOKEN="") as d:  # a random token
        assert d.token and d.token != TOKEN and len(d.token) >= 16
        assert d.url.startswith("http://127.0.0.1:") and not d.url.endswith(":0")
        r = post(d, f"/api/runs/{finished_run}/stop", token=TOKEN)
        assert r.status_code == 403
        ok = post(d, f"/api/runs/{finished_run}/stop", token=d.token)  # the token admits
        assert ok.status_code == 400 and "is not running" in ok.json()["error"], ok.text
        with client(d).stream("GET", f"/api/runs/{finished_run}/stream?after=0") as r:
            assert r.status_code == 200
            os.kill(d.proc.pid, sig)  # with a stream open
            assert d.proc.wait(15) == 0


@pytest.mark.slow
def test_run_with_dashboard(site: Site) -> None:
    folder = make_task(site.home.parent / "task-dash", budget=200, sleep=0.3)  # never done first
    proc = subprocess.Popen(
        [sys.executable, "-m", "revtree", "run", str(folder), "--dashboard",
         "--dashboard-port", "0", "--db", site.db],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=cli_env(site.home, REVTREE_SANDBOX="local", REVTREE_DASHBOARD_TOKEN=TOKEN),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().strip() for _ in range(2)]
        assert lines[0].startswith("run ") and lines[1].startswith("dashboard: http://127.0.0.1:")
        url = lines[1].split()[1]
        run_id = lines[0].split()[1]
        assert url.endswith(f"/?token={TOKEN}#/run/{run_id}")  # the run's own page
        d = Dashboard(url.split("/?")[0], TOKEN, proc, site)
        assert get(d, f"/api/runs/{run_id}")["run_id"] == run_id
        r = post(d, f"/api/runs/{run_id}/stop")
        assert r.status_code == 200, r.text
        assert proc.wait(60) == 130  # stopped by the user, as `revtree stop` does
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow
def test_run_with_dashboard_piped_into_head_runs_to_its_end(site: Site) -> None:
    """`revtree run … --dashboard | head -1`: the reader goes after the first line; the
    dashboard's line must not kill the run (it did: a plain print hit the closed pipe)."""
    folder = make_task(site.home.parent / "task-head", budget=5)
    cmd = (
        f"{sys.executable} -m revtree run {folder} --dashboard --dashboard-port 0 "
        f"--db {site.db} | head -1"
    )
    out = subprocess.run(
        ["bash", "-c", cmd + "; exit ${PIPESTATUS[0]}"], capture_output=True, text=True,
        env=cli_env(site.home, REVTREE_SANDBOX="local"), timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("run ") and len(out.stdout.splitlines()) == 1, out.stdout
    assert "Traceback" not in out.stderr, out.stderr
    run = Store(site.db).get_run(out.stdout.split()[1])
    assert run.status is RunStatus.COMPLETED, (run.status, run.reason)
