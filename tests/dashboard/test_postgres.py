"""The dashboard over PostgreSQL, the database a team shares: the same answers as over
SQLite (the summary is ``revtree show --json``'s), the live stream, an action, and the
password nowhere in what it serves."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.dashboard.conftest import Site, make_run, start_dashboard
from tests.pg import fresh_database

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def pg_site(tmp_path: Path) -> Iterator[Site]:
    with fresh_database("revtree_dash") as url:
        home = tmp_path / "home"
        home.mkdir()
        yield Site(home, url, {"REVTREE_SANDBOX": "local"})


def test_the_dashboard_serves_a_postgres_store(pg_site: Site) -> None:
    run_id = make_run(pg_site, budget=5)
    password = make_url(pg_site.db).password
    assert password
    shown = json.loads(pg_site.cli("show", run_id, "--json").stdout)
    with start_dashboard(pg_site) as d, httpx.Client(base_url=d.url, timeout=30) as c:
        assert all(password not in line for line in d.lines), d.lines
        info = c.get("/api/info")
        assert info.status_code == 200 and password not in info.text, info.text
        runs = c.get("/api/runs").json()["runs"]
        assert [r["id"] for r in runs] == [run_id]

        summary = c.get(f"/api/runs/{run_id}").json()
        for key in ("status", "n_nodes", "best_node", "best_score", "baseline_score"):
            assert summary[key] == shown[key], key

        cols = c.get(f"/api/runs/{run_id}/nodes").json()
        assert cols["id"] == list(range(5)) and cols["parent"][0] is None
        best = c.get(f"/api/runs/{run_id}/nodes/{shown['best_node']}").json()
        assert "sol.py" in best["diff_html"] and best["evaluations"], best

        with c.stream("GET", f"/api/runs/{run_id}/stream?after=0") as r:
            kinds = [ln.split(": ", 1)[1] for ln in r.iter_lines() if ln.startswith("event: ")]
        assert kinds[-1] == "end" and kinds.count("log") == summary["last_seq"], kinds

        missing = c.get("/api/runs/no-such-run")
        assert missing.status_code == 404 and password not in missing.text, missing.text

        stop = c.post(f"/api/runs/{run_id}/stop", headers=d.headers())
        assert stop.status_code == 400, stop.text  # the CLI's exit 1: nothing to stop
        assert "not running" in stop.json()["error"] and password not in stop.text
