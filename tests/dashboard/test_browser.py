"""The dashboard page in a real headless Chromium (Debian's, through Playwright), against
a real ``revtree dashboard`` server over real runs made by the real CLI.

Every test writes a screenshot under ``test-artifacts/dashboard/``. Chromium is
``$REVTREE_TEST_CHROMIUM`` or ``chromium`` on PATH; without one every test skips and
says why. Every wait is bounded."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from revtree.memory import NodeStatus, Store
from tests.dashboard.conftest import (
    ARTIFACTS,
    TOKEN,
    Dashboard,
    Site,
    big_run,
    make_run,
    make_task,
    start_dashboard,
    wait_for,
)

pytestmark = pytest.mark.browser
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'


def open_run(page: Any, dash: Dashboard, run_id: str, suffix: str = "") -> None:
    page.goto(f"{dash.url}/?token={dash.token}#/run/{run_id}{suffix}")
    page.wait_for_selector("#tree[data-ready='1']")


def show(site: Site, run_id: str) -> dict[str, Any]:
    return dict(json.loads(site.cli("show", run_id, "--json").stdout))


def start_live_run(site: Site, name: str, *args: str, budget: int, sleep: float) -> str:
    """``revtree run TASK --detach`` of the knob task with a slow evaluator; its id once
    it has a node (bounded wait)."""
    folder = make_task(site.home.parent / name, budget=budget, sleep=sleep)
    before = {r for r in list_runs(site)}
    site.cli("run", str(folder), "--detach", "--quiet", *args)
    new: set[str] = set()

    def started() -> bool:
        new.update(list_runs(site) - before)
        return bool(new)

    wait_for(started, 60, "the detached run to appear")
    return new.pop()


def list_runs(site: Site) -> set[str]:
    store = Store(site.db)
    try:
        return {r.id for r in store.list_runs()}
    finally:
        store.close()


def stop_quietly(site: Site, run_id: str) -> None:
    site.cli("stop", run_id, check=False, timeout=60)


# -- a. new nodes appear without a reload ---------------------------------------------
@pytest.mark.slow  # 45 s of --quick under -n 2 (issue 24)
def test_new_nodes_appear_live_without_reloading(
    page: Any, site: Site, dashboard: Dashboard
) -> None:
    # slow enough that the run is still going when the tree has grown: the growth comes
    # from the live stream, not from the run's final "end" event
    run_id = start_live_run(site, "live-a", budget=20, sleep=1.0)
    # every fetch of /nodes the page makes, timed in the page
    page.add_init_script(
        """(() => { const f = window.fetch; window.__nodeFetches = [];
        window.fetch = function (u, o) {
          if (String(u).split('?')[0].endsWith('/nodes'))
            window.__nodeFetches.push([performance.now(), String(new Error().stack)]);
          return f.apply(this, arguments); }; })();"""
    )
    try:
        open_run(page, dashboard, run_id)
        page.evaluate("window.__marker = 'same page'")
        loads = page.evaluate("performance.getEntriesByType('navigation').length")
        before = page.locator("#tree g.node").count()
        assert before >= 1
        page.wait_for_function(
            f"document.querySelectorAll('#tree g.node').length > {before}", timeout=60_000
        )
        after = page.locator("#tree g.node").count()
        assert after > before
        assert show(site, run_id)["status"] == "running"  # grown live, not at the end
        assert page.locator("#log .ev").count() > 0  # the live log got the events
        assert page.evaluate("window.__marker") == "same page"  # no reload happened
        assert page.evaluate("performance.getEntriesByType('navigation').length") == loads
        assert f"#/run/{run_id}" in page.url
        # the re-fetch of /nodes is throttled: at most one a second
        fetches = page.evaluate("window.__nodeFetches")
        times = [f[0] for f in fetches][1:]  # the first: the page's own load
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(g > 800 for g in gaps), fetches
        assert page.errors == []
    finally:
        stop_quietly(site, run_id)


# -- b. a node's diff -----------------------------------------------------------------
@pytest.mark.slow  # 30 s of --quick under -n 2 (issue 24)
def test_clicking_a_node_shows_its_diff(
    page: Any, site: Site, dashboard: Dashboard, finished_run: str
) -> None:
    summary = json.loads(site.cli("show", finished_run, "--json", "--nodes").stdout)
    nodes = summary.get("nodes") or []
    changed = [n for n in nodes if n["id"] != 0 and n.get("knobs") and n["status"] == "succeeded"]
    assert changed, nodes
    node = changed[0]
    open_run(page, dashboard, finished_run)
    page.click(f"#tree g.node[data-id='{node['id']}']")
    page.wait_for_selector("#panel:not([hidden]) #diff pre")
    assert page.url.endswith(f"#/run/{finished_run}/node/{node['id']}")
    diff = page.inner_text("#diff")
    # a line the candidate changed: one of its knobs, set in sol.py
    assert "sol.py" in diff
    assert any(f"+{k} = " in diff for k in node["knobs"]), (node["knobs"], diff)
    assert page.locator("#diff .gi").count() >= 1  # Pygments' inserted lines, coloured
    assert page.locator("#diff .gd").count() >= 1
    color = page.eval_on_selector("#diff .gi", "e => getComputedStyle(e).backgroundColor")
    assert color not in ("rgba(0, 0, 0, 0)", "transparent")
    # against the root: the same panel, the other base
    page.click("#panel button[data-against='root']")
    page.wait_for_function(
        "document.querySelector('#panel button.on[data-against=\"root\"]') !== null"
    )
    assert page.errors == []


# -- c. stop from the page ------------------------------------------------------------
@pytest.mark.slow  # 51 s of --quick under -n 2 (issue 24)
def test_stop_button_stops_the_run(page: Any, site: Site, dashboard: Dashboard) -> None:
    run_id = start_live_run(site, "live-c", budget=60, sleep=1.0)
    try:
        open_run(page, dashboard, run_id)
        page.wait_for_selector("#run-status[data-status='running']")
        page.click("button[data-action='stop']")
        wait_for(lambda: show(site, run_id)["status"] == "stopped", 60, "the run to stop")
        page.wait_for_selector("#run-status[data-status='stopped']", timeout=30_000)
        assert "stopped" in page.inner_text("#run-status")
        # a stopped run offers resume, not stop
        assert page.locator("button[data-action='stop']").count() == 0
        assert page.locator("button[data-action='resume']").count() == 1
        # and resume from the page: the run goes on, and the page follows it again
        page.click("button[data-action='resume']")
        wait_for(lambda: show(site, run_id)["status"] == "running", 60, "the run to resume")
        page.wait_for_selector("#run-status[data-status='running']", timeout=30_000)
        assert page.errors == []
    finally:
        stop_quietly(site, run_id)


# -- d. XSS: model text is text -------------------------------------------------------
@pytest.mark.slow  # 23 s of --quick under -n 2 (issue 24)
def test_a_hypothesis_with_html_renders_as_text(
    page: Any, site: Site, dashboard: Dashboard
) -> None:
    run_id = make_run(site, budget=3)
    store = Store(site.db)
    try:
        node = store.node(run_id, 1)
        proposal = {**(node.proposal or {}), "hypothesis": XSS, "plan": XSS}
        store.update_node(run_id, 1, ("node", XSS, None), proposal=proposal, lesson=XSS)
    finally:
        store.close()
    open_run(page, dashboard, run_id, "/node/1")
    page.wait_for_selector("#panel #hypothesis .hyp")
    page.wait_for_selector("#log .ev")
    page.wait_for_timeout(300)  # an onerror handler would have fired by now
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.inner_text("#panel #hypothesis .hyp") == XSS  # the literal text, visible
    assert page.get_by_text(XSS, exact=True).first.is_visible()
    assert page.locator("#panel img, #log img, #panel script, #log script").count() == 0
    assert XSS in page.inner_text("#log")  # the event message too
    # the tree's tooltip carries it as text as well
    title = page.eval_on_selector("#tree g.node[data-id='1'] title", "e => e.textContent")
    assert XSS[:40] in title
    assert page.evaluate("typeof window.__xss") == "undefined"


# -- e. 10k nodes ---------------------------------------------------------------------
@pytest.mark.slow  # 10 s of --quick: 10,000 nodes bulk-built, then the page (issue 24)
def test_ten_thousand_nodes_open_fast_and_pan_zoom(
    page: Any, site: Site, dashboard: Dashboard, finished_run: str
) -> None:
    run_id = big_run(site, finished_run)
    # warm the server's caches once (as a second visit would), then measure the page
    page.goto(f"{dashboard.url}/?token={dashboard.token}#/run/{run_id}")
    page.wait_for_selector("#tree[data-ready='1']", timeout=60_000)
    page.goto("about:blank")
    page.goto(f"{dashboard.url}/?token={dashboard.token}#/run/{run_id}")
    page.wait_for_selector("#tree[data-ready='1'] g.node", timeout=60_000)
    since_nav = page.evaluate("performance.now()")  # ms since this navigation started
    fetch_draw = page.evaluate("window.__revtreeTreeMs")
    drawn = page.locator("#tree g.node").count()
    api_ms = page.evaluate(
        """performance.getEntriesByType('resource').filter(e => e.name.includes('/api/runs/'))
        .map(e => [e.name.split('/api/')[1].split('?')[0], Math.round(e.duration)])"""
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "ten-thousand.json").write_text(
        json.dumps(
            {
                "nodes": 10_000,
                "open_to_tree_ms": since_nav,
                "fetch_and_draw_ms": fetch_draw,
                "node_elements": drawn,
                "api_ms": api_ms,
            },
            indent=1,
        )
    )
    print(
        f"\n10k nodes: tree drawn {since_nav:.0f} ms after navigation "
        f"(fetch + layout + draw {fetch_draw:.0f} ms), {drawn} node elements, API {api_ms}"
    )
    assert since_nav < 10_000, since_nav  # the target is 2 s; CI machines are loaded
    assert 0 < drawn <= 3000  # level of detail: not 10k DOM nodes
    page.screenshot(path=str(ARTIFACTS / "ten-thousand-open.png"))
    # pan and zoom still work
    view = "#tree > g.viewport"
    t1 = page.get_attribute(view, "transform")
    box = page.locator("#tree").bounding_box()
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(cx, cy)
    page.mouse.wheel(0, -400)
    page.wait_for_function(
        f"document.querySelector('{view}').getAttribute('transform') !== {json.dumps(t1)}"
    )
    t2 = page.get_attribute(view, "transform")
    assert "scale" in t2 and t2 != t1
    page.mouse.move(cx, cy)
    page.mouse.down()
    page.mouse.move(cx + 120, cy + 60, steps=4)
    page.mouse.up()
    t3 = page.get_attribute(view, "transform")
    assert t3 != t2
    page.wait_for_selector("#tree g.node")  # the viewport's nodes are drawn after the pan
    assert page.errors == []


# -- the runs page, read-only mode, compare -------------------------------------------
@pytest.mark.slow  # 9 s of --quick: a fork run, then three pages (issue 24)
def test_runs_page_groups_forks_and_compares(
    page: Any, site: Site, dashboard: Dashboard, finished_run: str
) -> None:
    before = list_runs(site)
    site.cli("fork", finished_run, "--node", "1", "--set", "budget.max_nodes=8", "--quiet")
    (fork,) = list_runs(site) - before
    page.goto(f"{dashboard.url}/?token={TOKEN}#/")
    page.wait_for_selector(f"#runs tr[data-run='{fork}']")
    ids = page.eval_on_selector_all("#runs tbody tr[data-run]", "rs => rs.map(r => r.dataset.run)")
    # the fork is listed right under its parent, as a child
    assert ids.index(fork) == ids.index(finished_run) + 1, ids
    assert "child" in (page.get_attribute(f"#runs tr[data-run='{fork}']", "class") or "")
    assert "completed" in page.inner_text(f"#runs tr[data-run='{finished_run}']")
    page.screenshot(path=str(ARTIFACTS / "runs-page.png"))
    assert page.is_disabled("button:has-text('compare')")
    for run in (finished_run, fork):
        page.check(f"#runs tr[data-run='{run}'] input[type=checkbox]")
    page.click("button:has-text('compare')")
    page.wait_for_selector("#cmptable")
    assert page.url.endswith(f"#/compare/{finished_run},{fork}")
    assert page.locator("#cmpplot path[data-run]").count() == 2
    assert page.locator("#cmptable tbody tr").count() >= 1
    page.screenshot(path=str(ARTIFACTS / "compare-page.png"))
    page.goto(f"{dashboard.url}/?token={TOKEN}#/")
    page.click(f"#runs tr[data-run='{fork}'] a")
    page.wait_for_selector("#tree[data-ready='1']")
    assert page.url.endswith(f"#/run/{fork}")
    # the fork's plot starts at the fork (its history, the parent's time, drawn there):
    # no gap of the parent's time before the fork's own candidates
    page.wait_for_selector("#plot circle.dot")
    ticks = page.eval_on_selector_all(
        "#plot .axis text:not(.ytick)", "ts => ts.map(t => t.textContent)"
    )
    assert ticks[0] == "fork", ticks
    cx = dict(
        page.eval_on_selector_all(
            "#plot circle.dot", "cs => cs.map(c => [+c.dataset.id, +c.getAttribute('cx')])"
        )
    )
    origin = min(cx.values())
    assert cx[0] == cx[1] == origin, cx  # the lineage of node 1, taken over
    assert all(x > origin for i, x in cx.items() if i > 1), cx
    assert "2 inherited" in page.inner_text("#run-counts")
    sandbox = page.inner_text("[data-gauge='sandbox time'] .label")
    assert "inherited" in sandbox, sandbox
    page.screenshot(path=str(ARTIFACTS / "fork-run-page.png"))
    assert page.errors == []


def test_read_only_page_has_no_actions(page: Any, site: Site, finished_run: str) -> None:
    with start_dashboard(site, "--read-only") as ro:
        page.goto(f"{ro.url}/#/run/{finished_run}")
        page.wait_for_selector("#tree[data-ready='1'] g.node")
        page.click("#tree g.node[data-id='1']")
        page.wait_for_selector("#panel #hypothesis")
        assert page.locator("button[data-action]").count() == 0
        assert "read-only" in page.inner_text("#mode")
        assert page.errors == []


@pytest.mark.slow  # 19 s of --quick under -n 2 (issue 24)
def test_evolution_run_shows_islands_and_cells(page: Any, site: Site, dashboard: Dashboard) -> None:
    run_id = make_run(site, budget=10, policy="evolution")
    open_run(page, dashboard, run_id)
    page.wait_for_selector("#evolution .island")
    assert page.locator("#evolution .island").count() >= 1
    if page.locator("#evolution .cell").count():
        page.locator("#evolution .cell").first.click()
        page.wait_for_selector("#panel:not([hidden]) #hypothesis")
        assert "/node/" in page.url
    assert page.errors == []


@pytest.mark.slow  # 39 s of --quick under -n 2 (issue 24)
def test_approve_and_reject_from_the_node_panel(
    page: Any, site: Site, dashboard: Dashboard
) -> None:
    # room for a candidate that never waits (a near twin, a refused answer): the one
    # rejected is whichever waits after node 1, not node 2 by assumption
    run_id = start_live_run(site, "live-g", "--approve", budget=5, sleep=0.0)
    store = Store(site.db)
    try:
        open_run(page, dashboard, run_id, "/node/1")
        page.wait_for_selector("#panel button[data-action='approve']", timeout=60_000)
        page.click("#panel button[data-action='approve']")
        wait_for(lambda: store.node(run_id, 1).status.is_finished(), 60, "node 1 to finish")
        assert store.node(run_id, 1).status is NodeStatus.SUCCEEDED

        def parked() -> list[int]:  # the approval event: written as a thread parks
            events = store.events_since(run_id, 0, 100_000)
            return [e.node_id for e in events if e.kind == "approval" and e.node_id != 1]

        wait_for(lambda: bool(parked()), 60, "another candidate to wait for approval")
        other = parked()[0]
        assert other is not None and other > 1
        page.evaluate(f"location.hash = '#/run/{run_id}/node/{other}'")
        page.wait_for_selector("#panel button[data-action='reject']", timeout=60_000)
        page.fill("#panel input[placeholder^='why']", "touches the wrong constant")
        page.click("#panel button[data-action='reject']")
        wait_for(lambda: store.node(run_id, other).status.is_finished(), 60, "its end")
        rejected = store.node(run_id, other)
        assert rejected.status is NodeStatus.REJECTED
        assert "touches the wrong constant" in (rejected.error or "")
        assert page.errors == []
    finally:
        store.close()
        stop_quietly(site, run_id)


@pytest.mark.slow  # 42 s of --quick under -n 2 (issue 24)
def test_fork_from_the_node_panel(
    page: Any, site: Site, dashboard: Dashboard, finished_run: str
) -> None:
    before = list_runs(site)
    open_run(page, dashboard, finished_run, "/node/1")
    page.wait_for_selector("#panel #hypothesis")
    page.click("#panel button:has-text('fork from here')")
    page.fill("#panel .forkform textarea", "budget.max_nodes=7")
    page.click("#panel button[data-action='fork']")
    page.wait_for_function(
        f"location.hash.startsWith('#/run/') && !location.hash.startsWith('#/run/{finished_run}')"
    )
    new = page.evaluate("location.hash").split("/")[2]
    assert new in list_runs(site) - before
    page.wait_for_selector("#tree[data-ready='1'] g.node")
    info = show(site, new)
    assert info["parent_run"] == finished_run and info["parent_node"] == 1
    wait_for(lambda: show(site, new)["status"] != "running", 120, "the fork to finish")
    assert show(site, new)["n_nodes"] == 7
    assert page.errors == []


@pytest.mark.slow  # 21 s of --quick under -n 2 (issue 24)
def test_retry_from_the_node_panel(page: Any, site: Site, dashboard: Dashboard) -> None:
    run_id = make_run(site, budget=3)
    store = Store(site.db)
    try:
        assert store.node(run_id, 2).attempt == 1
        open_run(page, dashboard, run_id, "/node/2")
        page.wait_for_selector("#panel button[data-action='retry']")
        page.select_option("#panel select[aria-label='retry from']", "evaluate")
        page.click("#panel button[data-action='retry']")
        wait_for(lambda: store.node(run_id, 2).attempt == 2, 60, "node 2's second attempt")
        wait_for(lambda: store.node(run_id, 2).status.is_finished(), 60, "the retry to finish")
        # the open panel follows the node without a reload: attempt 2's evaluation shows
        page.wait_for_function(
            "[...document.querySelectorAll('#evaluations tbody tr td:nth-child(3)')]"
            ".some(td => td.textContent === '2')",
            timeout=30_000,
        )
        assert page.locator("#toast.err").count() == 0
        assert page.errors == []
    finally:
        store.close()
