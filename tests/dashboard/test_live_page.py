"""The run page as people see it, in a real headless Chromium against a real
``revtree dashboard`` server: what a live 10,000-node page fetches per second,
crossover edges and fork links, and screenshots of every page at 800 and 1400 px.

The screenshots go to ``$REVTREE_ARTIFACTS/screenshots`` (default
``test-artifacts/screenshots/``, git-ignored) for CI to keep. Runs here are inserted in
bulk through the Store, as the orchestrator writes them; every wait is bounded."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from revtree.memory import NodeStatus, Store
from revtree.memory.records import Node
from tests.dashboard.conftest import TOKEN, Dashboard, Site, big_run

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("REVTREE_ARTIFACTS") or ROOT / "test-artifacts") / "screenshots"
TOAST = """() => { const t = document.getElementById("toast"); t.hidden = false;
  t.textContent = "resume: run is not resumable: " + "a long reason ".repeat(12); }"""
LONG = "Replace the insertion sort of the inner loop with a merge of sorted runs, " * 3


def showcase(site: Site, template_run: str) -> tuple[str, str]:
    """(a run, a fork of it) inserted in bulk: every status, a crossover, a long
    hypothesis, approval asked on the run, and node 7 waiting for it."""
    store = Store(site.db)
    try:
        spec = dict(store.get_run(template_run).spec)
        spec["search"] = {**(spec.get("search") or {}), "approve": "evaluate"}
        run_id, t0 = f"show-{time.time_ns()}", time.time() - 600
        statuses = [NodeStatus.SUCCEEDED] * 6 + [NodeStatus.FAILED, NodeStatus.REJECTED]
        nodes = [node(run_id, 0, None, NodeStatus.SUCCEEDED, 1.0253, t0)]
        for i in range(1, 13):
            st = statuses[i % len(statuses)] if i < 11 else NodeStatus.EVALUATING
            score = 1.0253 - 0.0003 * i if st is NodeStatus.SUCCEEDED else None
            nodes.append(node(run_id, i, (i - 1) // 2, st, score, t0 + 20 * i))
        nodes[9] = node(run_id, 9, 4, NodeStatus.SUCCEEDED, 1.0221, t0 + 180, extra=[5, 6])
        nodes[7] = node(run_id, 7, 3, NodeStatus.CODED, None, t0 + 140)
        root = (nodes[0], ("node", "baseline", None))
        store.create_run(run_id, "showcase", "greedy", "minimize", 1, spec, root=root)
        store.copy_history(run_id, nodes[1:], [], ("run", "bulk", None))
        store.update_run(run_id, status="stopped", reason="stopped by the user")
        fork = f"{run_id}-fork"
        kept = [replace(n, run_id=fork) for n in nodes if n.id <= 4 and n.status.is_finished()]
        history = (kept, [], ("run", "fork", None))
        made = ("showcase", "greedy", "minimize", 2, spec)
        store.create_run(fork, *made, parent_run=run_id, parent_node=4, history=history)
        store.update_run(fork, status="completed", reason="budget spent")
    finally:
        store.close()
    return run_id, fork


def node(
    run_id: str,
    i: int,
    parent: int | None,
    st: NodeStatus,
    score: float | None,
    t: float,
    extra: list[int] | None = None,
) -> Node:
    return Node(
        run_id,
        i,
        parent,
        "baseline" if parent is None else "crossover" if extra else "improve",
        st,
        extra_parents=tuple(extra or ()),
        depth=0 if parent is None else i.bit_length(),
        score=score,
        proposal={"hypothesis": f"#{i}: {LONG}"},
        created_at=t,
        finished_at=t + 15 if st.is_finished() else None,
    )


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"] - 1
        and b["x"] < a["x"] + a["width"] - 1
        and a["y"] < b["y"] + b["height"] - 1
        and b["y"] < a["y"] + a["height"] - 1
    )


def test_crossover_edges_and_fork_links(
    page: Any, site: Site, dashboard: Dashboard, finished_run: str
) -> None:
    run_id, fork = showcase(site, finished_run)
    page.goto(f"{dashboard.url}/?token={TOKEN}#/run/{run_id}")
    page.wait_for_selector("#tree[data-ready='1']")
    assert page.get_attribute("#tree path.cross", "d").count("M") == 2  # 9 from 5 and 6
    assert page.inner_text("#run-family") == f"forks: {fork}"
    page.click(f"#run-family a[href='#/run/{fork}']")
    said = f"fork of {run_id} @4"
    page.wait_for_function(f"document.querySelector('#run-family')?.innerText === '{said}'")
    assert page.get_attribute("#run-family a", "href") == f"#/run/{run_id}/node/4"
    assert page.errors == []


@pytest.mark.slow  # 10 s of --quick: every page at two widths (issue 24)
def test_screenshots_at_800_and_1400_px(
    browser: Any, site: Site, dashboard: Dashboard, finished_run: str
) -> None:
    """Every page at both widths, saved for CI; the node panel never covers the plot or
    the log, and a node waiting for approval is not drawn as one in flight."""
    run_id, fork = showcase(site, finished_run)
    SHOTS.mkdir(parents=True, exist_ok=True)
    base = f"{dashboard.url}/?token={TOKEN}#"
    pages = {
        "runs": ("/", "#runs tbody tr"),
        "run": (f"/run/{run_id}", "#tree[data-ready='1']"),
        "node": (f"/run/{run_id}/node/9", "#panel #evaluations, #panel #hypothesis"),
        "approval": (f"/run/{run_id}/node/7", "#panel button[data-action='approve']"),
        "compare": (f"/compare/{run_id},{fork}", "#cmptable"),
    }
    errors: list[str] = []
    for width in (800, 1400):
        ctx = browser.new_context(viewport={"width": width, "height": 900})
        pg = ctx.new_page()
        pg.on("pageerror", lambda e: errors.append(str(e)))
        try:
            for name, (frag, ready) in pages.items():
                pg.goto("about:blank")
                pg.goto(base + frag)
                pg.wait_for_selector(ready, timeout=20_000)
                pg.wait_for_timeout(300)
                pg.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
                if name == "run":  # a long toast: in the header's end, not over the legend
                    counts = pg.inner_text("#run-counts")
                    assert "2 in flight · 1 waiting" in counts, counts
                    pg.evaluate(TOAST)
                    pg.screenshot(path=str(SHOTS / f"toast-{width}.png"))
                    toast = pg.locator("#toast").bounding_box()
                    assert not overlap(toast, pg.locator("#treecard .legend").bounding_box())
                    assert not overlap(toast, pg.locator("#plot").bounding_box())
                if name == "approval":
                    waiting = pg.get_attribute("#tree g.node[data-id='7']", "class") or ""
                    assert "waiting" in waiting and "inflight" not in waiting, waiting
                if name in ("node", "approval"):
                    panel = pg.locator("#panel").bounding_box()
                    for other in ("#plot", "#logcard"):
                        box = pg.locator(other).bounding_box()
                        assert not overlap(panel, box), (name, width, other, panel, box)
        finally:
            ctx.close()
    assert errors == []
    assert len(list(SHOTS.glob("*.png"))) >= 10


@pytest.mark.slow(seconds=12)  # builds 10k nodes and watches the page for 10 s
def test_live_ten_thousand_node_page_fetches_under_50_kb_a_second(
    page: Any, site: Site, dashboard: Dashboard, finished_run: str
) -> None:
    run_id = big_run(site, finished_run)
    store = Store(site.db)
    store.update_run(run_id, status="running", reason=None)
    stop = threading.Event()
    writer = threading.Thread(target=grow, args=(store, run_id, stop), daemon=True)
    try:
        page.goto(f"{dashboard.url}/?token={TOKEN}#/run/{run_id}")
        page.wait_for_selector("#tree[data-ready='1'] g.node", timeout=60_000)
        page.wait_for_selector("#log .ev")
        got: list[int] = []
        cdp = page.context.new_cdp_session(page)
        cdp.on("Network.dataReceived", lambda e: got.append(int(e.get("dataLength") or 0)))
        cdp.send("Network.enable")
        writer.start()
        t0 = time.monotonic()
        page.wait_for_timeout(10_000)
        seconds = time.monotonic() - t0
        per_second = sum(got) / seconds
        print(f"\nlive 10k-node page: {sum(got)} bytes in {seconds:.1f} s = {per_second:.0f} B/s")
        counts = page.inner_text("#run-counts")
        assert int(counts.split()[0]) > 10_000, counts  # the new nodes were seen
        assert per_second < 50_000, per_second
        assert page.errors == []
    finally:
        stop.set()
        if writer.is_alive():
            writer.join(10)
        store.update_run(run_id, status="completed", reason="done")
        store.close()


def grow(store: Store, run_id: str, stop: threading.Event) -> None:
    """A live run's writes: a node selected, then finished, four a second."""
    i = 10_000
    while not stop.is_set() and i < 10_200:
        t = time.time()
        n = Node(run_id, i, i - 1, "improve", NodeStatus.PENDING, depth=1, created_at=t)
        store.add_node(n, ("select", f"node {i} selected", None))
        stop.wait(0.125)
        store.update_node(
            run_id,
            i,
            ("node", f"node {i}: succeeded", None),
            status=NodeStatus.SUCCEEDED,
            score=20.0,
            finished_at=time.time(),
        )
        stop.wait(0.125)
        i += 1
