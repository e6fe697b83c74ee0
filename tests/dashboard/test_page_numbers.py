"""What the run page shows of its numbers and actions (issue 26), in a real headless
Chromium against a real ``revtree dashboard``: score-plot ticks that are all different
on scores apart only in their fourth significant digit, a baseline line, best and
baseline told apart, rejected candidates counted apart from failed ones, a favicon, the
stopped banner's resume button, and no resume on a completed run."""

from __future__ import annotations

import itertools
import time
from typing import Any

import httpx
import pytest

from revtree.memory import NodeStatus, Store
from revtree.memory.records import Node
from tests.dashboard.conftest import Dashboard, Site, stored_run
from tests.dashboard.test_browser import open_run

pytestmark = pytest.mark.browser

SCORES = [1.2349, 1.2344, 1.2342, None, 1.2346, 1.2341, None, 1.2343]  # the baseline 1.2345
REJECTED = 4  # the first None; the second (node 7) failed
STOPPED = "stopped by the user; `revtree resume` continues"


def close_run(site: Site, template_run: str) -> str:
    """A stopped run whose scores differ only in the fourth significant digit, with one
    rejected and one failed candidate, written through the Store."""
    store = Store(site.db)
    try:
        run_id = f"close-{time.time_ns()}"
        t0 = time.time() - 600
        stored_run(store, template_run, run_id, "close", 1.2345, t0)
        nodes = []
        for i, score in enumerate(SCORES, start=1):
            status = NodeStatus.SUCCEEDED
            if score is None:
                status = NodeStatus.REJECTED if i == REJECTED else NodeStatus.FAILED
            nodes.append(
                Node(
                    run_id,
                    i,
                    i - 1,
                    "improve",
                    status,
                    depth=i,
                    score=score,
                    proposal={"hypothesis": f"candidate {i}"},
                    created_at=t0 + 10 * i,
                    finished_at=t0 + 10 * i + 5,
                )
            )
        store.copy_history(run_id, nodes, [], ("run", "bulk", None))
        store.update_run(run_id, status="stopped", reason=STOPPED)
    finally:
        store.close()
    return run_id


def test_close_scores_ticks_counts_and_the_stopped_banner(
    page: Any,
    site: Site,
    dashboard: Dashboard,
    finished_run: str,
) -> None:
    run_id = close_run(site, finished_run)
    open_run(page, dashboard, run_id)
    ticks = page.eval_on_selector_all("#plot text.ytick", "ts => ts.map(t => t.textContent)")
    assert len(ticks) >= 3 and len(set(ticks)) == len(ticks), ticks
    values = [float(t) for t in ticks]
    steps = {round(b - a, 9) for a, b in itertools.pairwise(values)}
    assert len(steps) == 1 and steps.pop() in (0.0001, 0.0002, 0.0005), ticks  # nice steps
    assert page.locator("#plot .baseline line").count() == 1
    head = page.inner_text(".runhead")
    assert "best (min) 1.2341" in head and "baseline 1.2345" in head, head
    counts = page.inner_text("#run-counts")
    assert "1 failed" in counts and "1 rejected" in counts, counts
    page.evaluate(f"location.hash = '#/run/{run_id}/node/1'")
    page.wait_for_selector("#panel #node-score")
    assert page.inner_text("#panel #node-score") == "1.2349"  # not 1.235 beside 1.2345
    # the stopped banner offers the page's button, not the command
    reason = page.inner_text("#run-reason")
    assert "revtree resume" not in reason and "stopped by the user" in reason, reason
    assert page.locator("#run-reason button[data-action='resume']").count() == 1
    assert page.locator("button[data-action='resume']").count() == 1
    page.goto(f"{dashboard.url}/?token={dashboard.token}#/")
    page.wait_for_selector(f"#runs tr[data-run='{run_id}']")
    row = page.inner_text(f"#runs tr[data-run='{run_id}']")
    assert "1.2341" in row and "1.2345" in row, row
    # a completed run: nothing to resume
    open_run(page, dashboard, finished_run)
    assert page.locator("button[data-action='resume']").count() == 0
    assert page.errors == []
    icon = httpx.get(f"{dashboard.url}/favicon.ico", timeout=10)
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")


def test_an_action_button_shows_its_outcome(
    page: Any,
    site: Site,
    dashboard: Dashboard,
    finished_run: str,
) -> None:
    """A fork the CLI refuses (an unknown setting): the button says it failed, the toast
    says why, and no run is made."""
    open_run(page, dashboard, finished_run, "/node/1")
    page.wait_for_selector("#panel #hypothesis")
    page.click("#panel button:has-text('fork from here')")
    page.fill("#panel .forkform textarea", "budget.no_such_knob=7")
    page.click("#panel button[data-action='fork']")
    page.wait_for_selector("#panel button[data-action='fork'][data-outcome='error']")
    assert page.inner_text("#panel button[data-action='fork']") == "✗ fork"
    assert "fork: " in page.inner_text("#toast") and "no_such_knob" in page.inner_text("#toast")
