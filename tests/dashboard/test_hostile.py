"""The dashboard against hostile input: odd URLs and bodies, a candidate's bytes that
are not UTF-8, a git store that lost a commit, a run deleted while streamed, a stdout
that is closed, a host beyond this machine. Each test failed before its fix."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from revtree.cli.dashboard import exposure_warning
from revtree.errors import RevtreeError
from revtree.memory import Store
from revtree.memory.gitstore import GitStore
from revtree.memory.records import Node, NodeStatus
from revtree.orchestrator.run import RunPaths
from revtree.web.actions import ActionError, Actions
from revtree.web.app import create_app
from revtree.web.stream import log_events
from tests.dashboard.conftest import TOKEN, Dashboard, Site, chromium_path, end_process
from tests.orchestrator.conftest import cli_env

EVIL_FILE = "a<img src=x onerror=alert(1)>.py"


def client(d: Dashboard) -> httpx.Client:
    return httpx.Client(base_url=d.url, timeout=30)


def hand_made(site: Site, run_id: str, node_id: int, files: dict[str, bytes] | None) -> None:
    """Node ``node_id`` of ``run_id``: a child of the root whose commit adds ``files``
    (None: a commit the git store does not hold)."""
    store = Store(site.db)
    try:
        root = store.node(run_id, 0)
        assert root.commit is not None
        if files is None:
            sha = "0" * 40
        else:
            git = GitStore(RunPaths(site.home, run_id).repo)
            sha = git.commit(root.commit, files, "hostile")
            git.set_node_ref(node_id, sha)
            git.close()
        node = Node(
            run_id, node_id, 0, "improve", NodeStatus.SUCCEEDED, depth=1, commit=sha,
            proposal={"hypothesis": "h", "plan": "p"}, score=1.0, n_evals=0,
            finished_at=time.time(),
        )  # fmt: skip
        store.add_node(node, ("node", f"node {node_id} added by the test", None))
    finally:
        store.close()


# -- odd numbers in URLs and bodies ----------------------------------------------------
@pytest.mark.parametrize("raw", ["²", "\u0661", "99999999999999999999999", "1%0A"])
@pytest.mark.slow  # 41 s of --quick under -n 2 (issue 24)
def test_a_node_id_of_other_digits_or_too_big_is_404(
    dashboard: Dashboard, finished_run: str, raw: str
) -> None:
    r = client(dashboard).get(f"/api/runs/{finished_run}/nodes/{raw}")
    assert r.status_code == 404, (raw, r.status_code, r.text)
    assert "error" in r.json()


def test_events_after_beyond_the_database(dashboard: Dashboard, finished_run: str) -> None:
    r = client(dashboard).get(f"/api/runs/{finished_run}/events?after={10**30}")
    assert r.status_code == 200, r.text
    assert r.json() == {"events": []}


def sse_events(d: Dashboard, path: str, timeout: float = 30.0) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    deadline = time.monotonic() + timeout
    with client(d).stream("GET", path, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        event = None
        for line in r.iter_lines():
            assert time.monotonic() < deadline, out
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event is not None:
                out.append((event, json.loads(line.split(":", 1)[1])))
                if event == "end":
                    break
    return out


@pytest.mark.parametrize("after", ["²", str(10**30)])
def test_stream_after_odd_numbers_still_ends(
    dashboard: Dashboard, finished_run: str, after: str
) -> None:
    out = sse_events(dashboard, f"/api/runs/{finished_run}/stream?after={after}")
    assert out and out[-1][0] == "end", out
    if after == "²":  # not a number: from the start
        assert any(e == "log" for e, _ in out)
    else:
        assert [e for e, _ in out] == ["end"]


def test_an_action_on_a_node_id_too_big_is_400(dashboard: Dashboard, finished_run: str) -> None:
    r = client(dashboard).post(
        f"/api/runs/{finished_run}/approve",
        json={"node": 10**30},
        headers={"X-Revtree-Token": TOKEN},
    )
    assert r.status_code == 400, (r.status_code, r.text)
    assert "node" in r.json()["error"]


# -- diffs -----------------------------------------------------------------------------
def test_a_diff_that_is_not_utf8_is_shown_and_escaped(
    dashboard: Dashboard, site: Site, finished_run: str
) -> None:
    files = {"latin.txt": b"caf\xe9 <b>bold</b>\n", EVIL_FILE: b"x = 1\n"}
    hand_made(site, finished_run, 70, files)
    r = client(dashboard).get(f"/api/runs/{finished_run}/nodes/70")
    assert r.status_code == 200, (r.status_code, r.text[:300])
    n = r.json()
    assert "caf\ufffd" in n["diff_html"]
    assert "<img" not in n["diff_html"] and "<b>" not in n["diff_html"]
    assert "&lt;img" in n["diff_html"]
    assert {f["file"] for f in n["diff_stat"]} == {"latin.txt", EVIL_FILE}


def test_a_commit_the_git_store_lost_is_a_note(
    dashboard: Dashboard, site: Site, finished_run: str
) -> None:
    hand_made(site, finished_run, 71, None)
    r = client(dashboard).get(f"/api/runs/{finished_run}/nodes/71")
    assert r.status_code == 200, (r.status_code, r.text[:300])
    n = r.json()
    assert n["diff_html"] == "" and n["diff_note"].startswith("no diff"), n["diff_note"]


def test_the_diff_reads_the_apps_home(
    site: Site, finished_run: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """create_app(home=...) is the home of the diffs too, not only of the actions."""
    monkeypatch.setenv("REVTREE_HOME", str(tmp_path))  # another home, without the run
    app = create_app(site.db, token=TOKEN, home=site.home)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        n = c.get(f"/api/runs/{finished_run}/nodes/1").json()
    assert n["diff_html"], n["diff_note"]


# -- the stream of a run deleted under it ----------------------------------------------
class _Gone:
    def get_run(self, run_id: str) -> Any:
        raise RevtreeError(f"no run {run_id!r}")


class _Connected:
    async def is_disconnected(self) -> bool:
        return False


def test_the_stream_of_a_deleted_run_ends() -> None:
    async def collect() -> list[dict[str, Any]]:
        gen = log_events(_Connected(), _Gone(), "gone-1", 5, poll=0.01)  # type: ignore[arg-type]
        return [m async for m in gen]

    out = asyncio.run(asyncio.wait_for(collect(), 10))
    assert out == [{"event": "end", "id": "5", "data": json.dumps({"status": "deleted"})}]


# -- a background retry is reaped ------------------------------------------------------
def test_a_background_retry_leaves_no_zombie(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("revtree.web.actions.RETRY_GRACE", 0.2)

    class Quick(Actions):
        def command(self, *args: str) -> list[str]:
            return [sys.executable, "-c", "import time; time.sleep(0.8)"]

    msg = Quick("sqlite://", tmp_path).retry("run-1", {"node": 1})["message"]
    pid = int(msg.split("(pid ", 1)[1].split(")", 1)[0])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return  # gone: reaped
        assert time.monotonic() < deadline
        if state == "Z":
            time.sleep(1.0)  # a reaper may be just about to run
            assert not Path(f"/proc/{pid}").exists(), "the retry's process is a zombie"
            return
        time.sleep(0.1)
    raise AssertionError("the retry's process did not end")


def test_actions_keep_the_password_off_command_lines_and_answers(tmp_path: Path) -> None:
    """The database URL goes to the command by its environment (``ps`` shows any
    user a command line), and its password never comes back in an action's words."""
    url = "postgresql://u:s3cret@127.0.0.1:1/x"
    actions = Actions(url, tmp_path)
    assert not any("s3cret" in a for a in actions.command("stop", "run-1"))
    assert actions.env()["REVTREE_DB"] == url

    class Loud(Actions):
        def command(self, *args: str) -> list[str]:
            code = "import os, sys; print('no run in ' + os.environ['REVTREE_DB']); sys.exit(1)"
            return [sys.executable, "-c", code]

    with pytest.raises(ActionError) as e:
        Loud(url, tmp_path).stop("run-1")
    assert "s3cret" not in str(e.value) and "no run in postgresql://u:***@" in str(e.value)


# -- the command -----------------------------------------------------------------------
def test_a_host_beyond_this_machine_is_warned_of() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.5"):
        assert exposure_warning(host, False) is None, host
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com"):
        warning = exposure_warning(host, False)
        assert warning and "actions" in warning and host in warning, host
    assert "actions" not in (exposure_warning("0.0.0.0", True) or "actions")


def test_a_closed_stdout_does_not_stop_the_server(site: Site, finished_run: str) -> None:
    """``revtree dashboard | head -0``: the line goes to stderr and it serves on."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first line
    proc = subprocess.Popen(
        [sys.executable, "-m", "revtree", "dashboard", "--port", "0", "--db", site.db],
        stdout=w,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(site.home, REVTREE_DASHBOARD_TOKEN=TOKEN),
    )
    os.close(w)
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        lines.extend(proc.stderr)

    threading.Thread(target=read, daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        url = None
        while url is None:
            assert time.monotonic() < deadline, lines
            assert proc.poll() is None, (proc.returncode, lines)
            url = next((x.split()[1] for x in list(lines) if x.startswith("dashboard:")), None)
            time.sleep(0.1)
        info = httpx.get(url.split("?")[0] + "api/info", timeout=10)
        assert info.status_code == 200
    finally:
        end_process(proc)


# -- the page --------------------------------------------------------------------------
@pytest.mark.slow  # a page that waits out its timeout: 3 s or more on 2 loaded cores
@pytest.mark.browser
def test_a_malformed_fragment_does_not_hang_the_page(dashboard: Dashboard) -> None:
    """``#/run/%E0%A4%A`` (decodeURIComponent throws): an error on the page, not
    "loading…" forever."""
    exe = chromium_path()
    if not exe:
        pytest.skip("no Chromium: set REVTREE_TEST_CHROMIUM or install Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=exe, headless=True, args=["--no-sandbox", "--no-proxy-server"]
        )
        try:
            pg = b.new_page()
            pg.set_default_timeout(20_000)
            pg.goto(f"{dashboard.url}/?token={TOKEN}#/run/%E0%A4%A")
            # the run page's frame comes at once and the error after the API answers: wait
            # for the error itself (a frame without "loading" is not yet the outcome)
            pg.wait_for_function("document.getElementById('app').innerText.includes('no run')")
            assert "loading" not in pg.inner_text("#app")
        finally:
            b.close()
