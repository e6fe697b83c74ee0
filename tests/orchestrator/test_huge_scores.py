"""Scores next to the largest double (issue 23, item 3): a candidate's 1e308 was recorded as
best, then the gain's mean overflowed (``OverflowError: intermediate overflow in fsum``),
ending the run and, from then on, every ``ls``, ``show`` and the dashboard's ``/api/runs``
in that home. Now a score beyond ``SCORE_LIMIT`` is refused (the node fails, naming the
limit), metrics are averaged without overflow, and every reader survives any double in the
store, also one written before the limit (put there with SQL here)."""

from __future__ import annotations

import json
import textwrap
import urllib.request
from pathlib import Path

import pytest
import sqlalchemy as sa

from revtree.memory.records import SCORE_LIMIT, finite_mean
from revtree.orchestrator.trust import gain
from tests.dashboard.conftest import Site, start_dashboard
from tests.orchestrator.conftest import drive_here, revtree_here

# the score by the knob X: the baseline (X = 3) scores +/-1e300 by repeat (allowed, and its
# noise would overflow a plain sum of squares); other candidates 1e308, -1e308, or 1e300
# with a side metric whose mean over repeats overflows a plain sum, and an integer of 400
# digits (not a double at all)
EVALUATOR = """\
import json, os
import sol
rep = int(os.environ["REVTREE_REPEAT"])
if sol.X == 3.0:
    value = -1e300 if rep % 2 else 1e300
elif sol.X > 1:
    value = 1e308
elif sol.X < -1:
    value = -1e308
else:
    value = 1e300
out = {"f": value, "side": 1.7e308, "wide": 10 ** 400}
os.write(3, json.dumps(out).encode())
"""


def huge_task(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "sol.py").write_text("X = 3.0\n")
    (root / "ev.py").write_text(EVALUATOR)
    (root / "task.toml").write_text(
        textwrap.dedent("""\
        name = "huge"
        goal = "maximise f"
        editable = ["sol.py"]
        protected = ["ev.py"]

        [evaluate]
        command = "python ev.py"
        metric = "f"
        direction = "maximize"
        repeats = 2
        timeout = 20

        [search]
        policy = "greedy"
        seed = 3

        [budget]
        max_nodes = 10

        [[knobs]]
        name = "X"
        type = "float"
        low = -5
        high = 5
        file = "sol.py"
        """)
    )
    return root


def readers_work(home: Path, db: str, run_id: str) -> dict[str, object]:
    """ls, ls --json, show and show --json all exit 0 (in this process: what they print
    and exit with); show --json's summary."""
    for args in (("ls",), ("ls", "--json"), ("show", run_id)):
        revtree_here(home, *args, "--db", db, REVTREE_SANDBOX="local")
    out = revtree_here(home, "show", run_id, "--json", "--db", db, REVTREE_SANDBOX="local")
    summary: dict[str, object] = json.loads(out.stdout)
    return summary


@pytest.mark.slow
def test_huge_scores_are_refused_and_every_reader_survives_them(
    tmp_path: Path, home: Path, db_url: str
) -> None:
    task = huge_task(tmp_path / "task")
    drive_here(home, "run", str(task), "--quiet", "--db", db_url, REVTREE_SANDBOX="local")
    summary = readers_work(home, db_url, "last")
    run_id = str(summary["run_id"])

    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT id, status, score, error FROM nodes WHERE run_id = :r"),
                {"r": run_id},
            ).all()
        # the baseline's repeats are +/-1e300: allowed, and averaged without overflow
        base = next(r for r in rows if r.id == 0)
        assert base.status == "succeeded" and abs(base.score) < SCORE_LIMIT
        refused = [r for r in rows if r.error and "beyond the limit" in r.error]
        assert refused, rows  # 1e308 or -1e308 was refused, naming the limit
        assert all(r.score is None or abs(r.score) <= SCORE_LIMIT for r in rows)
        # a store written before the limit: any double a candidate could have written
        with engine.begin() as conn:
            for node_id, value in ((0, -1.7e308), (refused[0].id, 1.7e308)):
                conn.execute(
                    sa.text(
                        "UPDATE nodes SET status = 'succeeded', score = :v, error = NULL "
                        "WHERE run_id = :r AND id = :n"
                    ),
                    {"v": value, "r": run_id, "n": node_id},
                )
            conn.execute(
                sa.text("UPDATE evaluations SET ok = true, score = :v WHERE run_id = :r"),
                {"v": 1.7e308, "r": run_id},
            )
    finally:
        engine.dispose()
    readers_work(home, db_url, run_id)


@pytest.mark.slow
def test_the_dashboard_lists_runs_with_huge_scores(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    site = Site(home, f"sqlite:///{home / 'revtree.db'}", {"REVTREE_SANDBOX": "local"})
    site.cli("run", str(huge_task(tmp_path / "task")), "--quiet")
    engine = sa.create_engine(site.db)
    with engine.begin() as conn:  # as a store from before the limit holds them
        conn.execute(sa.text("UPDATE nodes SET status = 'succeeded', score = 1.7e308"))
        conn.execute(sa.text("UPDATE nodes SET score = -1.7e308 WHERE id = 0"))
        conn.execute(sa.text("UPDATE evaluations SET ok = 1, score = 1.7e308"))
    engine.dispose()
    with (
        start_dashboard(site) as dash,
        urllib.request.urlopen(f"{dash.url}/api/runs", timeout=30) as resp,
    ):
        assert resp.status == 200
        runs = json.loads(resp.read())
    assert len(runs) == 1


def test_gain_and_means_stay_finite_next_to_the_largest_double() -> None:
    assert finite_mean([1.7e308, 1.7e308]) == pytest.approx(1.7e308)
    assert finite_mean([float("inf"), 1.0]) is None
    g = gain([1e300, -1e300, 1e300], [-1e300, 1e300], maximize=True)
    assert g is not None and g.stderr is not None and g.stderr > 0
    assert gain([1.7e308], [-1.7e308], maximize=True) is None  # the difference overflows
    assert gain([1.7e308, 1.7e308], [1.0, 2.0], maximize=True) is not None


def test_a_huge_timeout_is_a_one_line_task_error(tmp_path: Path, home: Path) -> None:
    task = huge_task(tmp_path / "task")
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace("timeout = 20", "timeout = 1e308"))
    out = revtree_here(home, "check", str(task), "--sandbox", "docker", check=False)
    text = out.stdout + out.stderr
    assert out.returncode != 0 and "Traceback" not in text, text
    assert "key 'evaluate.timeout': expected a duration of at most 365 days" in text, text
