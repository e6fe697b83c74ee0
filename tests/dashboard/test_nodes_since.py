"""``GET /api/runs/{id}/nodes?since=SEQ`` through a real ``revtree dashboard`` (issue 26):
only the nodes an event after SEQ names and those in flight, with the whole run's best,
lineage, cursor and count; a node inserted without its own event shows in ``n``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx

from revtree.memory import NodeStatus, Store
from revtree.memory.records import Node
from tests.dashboard.conftest import Dashboard, Site


def nodes(c: httpx.Client, run_id: str, since: int | None = None) -> dict[str, Any]:
    query = "" if since is None else f"?since={since}"
    r = c.get(f"/api/runs/{run_id}/nodes{query}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_since_answers_only_what_changed(
    site: Site, dashboard: Dashboard, finished_run: str
) -> None:
    store = Store(site.db)
    try:
        with httpx.Client(base_url=dashboard.url, timeout=30) as c:
            whole = nodes(c, finished_run)
            assert whole["since"] is None and whole["n"] == len(whole["id"]) > 2
            assert whole["extra_parents"] == {}
            # nothing happened: nothing but the cursor, the best and the count
            quiet = nodes(c, finished_run, whole["seq"])
            assert quiet["id"] == [] and quiet["seq"] == whole["seq"]
            assert quiet["best"] == whole["best"] and quiet["lineage"] == whole["lineage"]
            assert quiet["n"] == whole["n"]
            # a crossover child of the best is selected, then finishes
            new = max(whole["id"]) + 1
            child = Node(
                finished_run,
                new,
                whole["best"],
                "crossover",
                NodeStatus.PENDING,
                extra_parents=(0,),
                created_at=1.0,
            )
            store.add_node(child, ("select", "selected", None))
            flying = nodes(c, finished_run, quiet["seq"])
            assert flying["id"] == [new] and flying["status"] == ["pending"]
            assert flying["extra_parents"] == {str(new): [0]}
            assert flying["n"] == whole["n"] + 1 and flying["seq"] > quiet["seq"]
            # in flight: sent on every ask, even with no event of its own
            assert nodes(c, finished_run, flying["seq"])["id"] == [new]
            store.update_node(
                finished_run, new, ("node", "done", None), status=NodeStatus.FAILED, finished_at=2.0
            )
            done = nodes(c, finished_run, flying["seq"])
            assert done["id"] == [new] and done["status"] == ["failed"]
            assert nodes(c, finished_run, done["seq"])["id"] == []
            # a node copied without its own event is not named, but the count tells
            copied = replace(child, id=new + 1, status=NodeStatus.SUCCEEDED, finished_at=3.0)
            store.copy_history(finished_run, [copied], [], ("run", "copied", None))
            after = nodes(c, finished_run, done["seq"])
            assert after["id"] == [] and after["n"] == whole["n"] + 2
            bad = c.get(f"/api/runs/{finished_run}/nodes?since=x1")
            assert bad.status_code == 400 and "since" in bad.json()["error"]
    finally:
        store.close()
