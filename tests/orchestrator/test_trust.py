"""Trustworthy results through the real CLI: a run that cannot score anything stops
``failed`` (and resumes once fixed), a reward hack gets a drift alarm and is never
recommended, and evaluator noise is never reported as an improvement."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer, FakeRequest
from revtree.errors import EditError, LLMUnreachable, StoreError
from revtree.memory import Store
from revtree.memory.records import Event, finite_mean
from revtree.orchestrator.trust import (
    decided,
    defer_verification,
    gain,
    holdout_alarm,
    infra_cause,
    kendall_tau,
    pooled_noise,
    rank_alarm,
)
from revtree.orchestrator.verify import FINAL_TRIES
from tests.orchestrator.conftest import cli_env, drive_here, revtree, revtree_here, wait_for


def show(home: Path) -> dict:
    return json.loads(revtree_here(home, "show", "last", "--json", "--nodes").stdout)


def full_spans(home: Path) -> dict[tuple[int, int], tuple[float, float]]:
    """(node, repeat) -> when its full-stage evaluation ran (start, end), as stored."""
    with sqlite3.connect(home / "revtree.db") as db:
        rows = db.execute(
            "select node_id, repeat, created_at - duration, created_at from evaluations"
            " where stage = 'full'"
        ).fetchall()
    return {(n, r): (a, b) for n, r, a, b in rows}


# -- the statistics -------------------------------------------------------------------
def test_holdout_alarm_needs_dev_better_and_holdout_worse_beyond_tolerance() -> None:
    # minimize: dev 0 (better than 50) but holdout 166 (worse than 50.5): alarm
    assert holdout_alarm(0.0, 166.3, 50.0, 50.5, False, 0.02) is not None
    assert holdout_alarm(0.3, 0.39, 50.0, 50.5, False, 0.02) is None  # honest
    assert holdout_alarm(0.3, 50.9, 50.0, 50.5, False, 0.02) is None  # within tolerance
    assert holdout_alarm(60.0, 166.3, 50.0, 50.5, False, 0.02) is None  # worse on dev too
    assert holdout_alarm(10.0, 1.0, 2.0, 2.0, True, 0.02) is not None  # maximize


def test_rank_alarm_only_on_the_top_dev_node_in_the_worse_holdout_half() -> None:
    assert kendall_tau([1, 2, 3], [1, 2, 3]) == 1.0
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    guarded = {0: (5.0, 5.0), 1: (4.0, 4.0), 2: (3.0, 3.5), 3: (0.0, 9.0), 4: (2.0, 8.0)}
    assert rank_alarm(3, guarded, False, 0.0) is not None
    assert rank_alarm(1, guarded, False, 0.0) is None
    assert rank_alarm(3, {k: guarded[k] for k in (0, 1, 3)}, False, 0.0) is None  # < 4 nodes


def test_gain_is_beyond_noise_only_when_a_t_test_says_so() -> None:
    g = gain([1.0, 1.1], [1.05, 0.95, 1.0], True)
    assert g is not None and g.significant is False
    g = gain([2.0, 2.1], [1.05, 0.95, 1.0], True)
    assert g is not None and g.significant is True and g.delta > 0
    g = gain([3.0], [3.0], False)
    assert g is not None and g.significant is None  # no repeat: cannot tell
    assert gain([5.0, 5.0], [6.0, 6.0], False).significant is True  # deterministic, minimize


def test_identical_repeats_are_nil_noise_whatever_the_value() -> None:
    """Repeats that reproduce a score bit for bit measure no noise, and a new best may
    wait for the end: the mean of three copies of -3.3694191710748904 used to come out
    4e-16 off (each third rounded), so the run read noise of 5e-16, and every later best
    was re-run as found (9 verification evaluations in a 24-candidate run against 4)."""
    for v in (-3.3694191710748904, 0.1, 1e300, -7.0):
        for n in (2, 3, 5):
            assert finite_mean([v] * n) == v
    noise = pooled_noise([[-3.3694191710748904] * 3])
    assert noise is not None and noise.sigma == 0.0 and noise.dof == 2
    assert defer_verification(noise)


def test_repeats_stop_only_where_more_would_decide_nothing() -> None:
    assert pooled_noise([[1.0, 1.0]]) is None  # one degree of freedom: not trusted yet
    nil = pooled_noise([[1.0, 1.0, 1.0], [7.0]])
    assert nil is not None and nil.sigma == 0.0 and nil.dof == 2
    assert not decided([], 1.0, 1, nil)  # a new best is always re-run, even then
    assert decided([5.0], 1.0, 1, nil)  # no noise anywhere, its re-run reproduced it
    assert not decided([5.0], 1.0, 1, None)  # noise unmeasured: the full count
    # a first-run-only score makes the pooled noise non-zero: judged by its margin
    cheat = pooled_noise([[1.0, 1.0, 1.0], [9.0, 1.0]])
    assert cheat is not None and cheat.sigma > 0
    assert not decided([1.0], 1.0, 3, cheat)
    noisy = pooled_noise([[1.0, 1.2, 0.8], [2.0, 2.1]])
    assert noisy is not None and 0.1 < noisy.sigma < 0.2
    assert decided([9.0], 1.0, 3, noisy)  # many standard errors better
    assert decided([-9.0], 1.0, 3, noisy)  # many worse: the best moves, decided too
    assert not decided([1.3], 1.0, 3, noisy)  # within noise: more repeats
    assert not decided([9.0], 1.0, 3, noisy, min_n=2)  # a final verdict needs two
    assert not decided([9.0], None, 1, noisy)  # nothing to compare with
    huge = pooled_noise([[1e308, -1e308, 1e308]])  # scaled: no overflow, nothing raises
    assert huge is not None and huge.sigma < float("inf")
    assert not decided([1e308], -1e308, 1, huge)  # a margin past the largest double


def test_a_new_best_waits_for_the_end_only_where_the_evaluator_showed_no_noise() -> None:
    assert defer_verification(pooled_noise([[1.0, 1.0, 1.0], [7.0]]))  # nil, 2 dof
    assert not defer_verification(pooled_noise([[1.0, 1.0]]))  # one dof: unmeasured
    assert not defer_verification(pooled_noise([]))  # nothing repeated yet
    assert not defer_verification(pooled_noise([[1.0, 1.0, 1.0], [9.0, 1.0]]))  # a cheat
    assert not defer_verification(pooled_noise([[1.0, 1.0 + 1e-15, 1.0]]))  # the last bit


def test_infra_cause_names_the_disk_the_database_and_the_endpoint() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/data/x.log")
        except OSError as inner:
            raise RuntimeError("cannot write the log") from inner
    except RuntimeError as e:
        assert infra_cause(e) == "disk full or read-only: No space left on device at /data/x.log"
    assert "db.sqlite" in (infra_cause(StoreError("database error on db.sqlite: x")) or "")
    msg = "cannot reach http://127.0.0.1:9/v1 (model m)"
    assert infra_cause(LLMUnreachable(msg)) == msg
    assert infra_cause(ValueError("the candidate's bug")) is None
    # text the model or the candidate chose is not a full disk
    assert infra_cause(EditError("SEARCH 'No space left on device' not found")) is None
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise ValueError("unrelated") from None
    except ValueError as e:
        assert infra_cause(e) is None


# -- fail fast --------------------------------------------------------------------------
NEEDS_DATA = """\
import json, os, solver
data = os.environ.get("QUAD_DATA", "")
target = float(open(data).read())  # crashes while the data is missing
os.write(3, json.dumps({"f": (solver.X - target) ** 2}).encode())
"""


def quad_task(root: Path, evaluator: str, extra: str = "", budget: int = 6) -> Path:
    root.mkdir(parents=True)
    (root / "solver.py").write_text("X = 3.0\n")
    (root / "ev.py").write_text(evaluator)
    (root / "task.toml").write_text(
        textwrap.dedent(f"""\
        name = "quad"
        editable = ["solver.py"]
        protected = ["ev.py"]
        [evaluate]
        command = "python ev.py"
        metric = "f"
        direction = "minimize"
        timeout = 20
        [sandbox]
        backend = "local"
        pass_env = ["QUAD_DATA"]
        [budget]
        max_nodes = {budget}
        [[knobs]]
        name = "X"
        type = "float"
        low = 0.0
        high = 4.0
        file = "solver.py"
        """)
        + extra
    )
    return root


@pytest.mark.slow  # 19 s of --quick under -n 2 (issue 24)
def test_a_baseline_that_cannot_be_scored_stops_the_run_failed_and_resumes_once_fixed(
    tmp_path: Path, home: Path
) -> None:
    task = quad_task(tmp_path / "t", NEEDS_DATA)
    data = tmp_path / "target.txt"
    first = drive_here(home, "run", str(task), "--quiet", check=False, QUAD_DATA=str(data))
    assert first.returncode == 1, first.stdout + first.stderr
    s = show(home)
    assert s["status"] == "failed"
    assert "baseline (node 0) cannot be scored" in s["reason"]
    assert "FileNotFoundError" in s["reason"] or "exit code 1" in s["reason"]
    assert sum(n["status"] in ("succeeded", "failed", "rejected") for n in s["nodes"]) <= 2
    assert "revtree resume" in first.stdout
    data.write_text("1.5\n")  # the fix
    again = drive_here(home, "resume", "last", "--quiet", QUAD_DATA=str(data))
    assert "completed" in again.stdout
    s = show(home)
    assert s["status"] == "completed" and s["baseline_score"] == pytest.approx(2.25)
    assert s["best_score"] < s["baseline_score"]
    assert next(n for n in s["nodes"] if n["id"] == 0)["status"] == "succeeded"


@pytest.mark.slow  # 11 s of --quick under -n 2 (issue 24)
def test_a_wrong_metric_name_fails_fast_naming_the_metric(tmp_path: Path, home: Path) -> None:
    task = quad_task(
        tmp_path / "t",
        "import json, os\nos.write(3, json.dumps({'loss': 1.0}).encode())\n",
    )
    out = drive_here(home, "run", str(task), "--quiet", check=False)
    assert out.returncode == 1
    s = show(home)
    assert s["status"] == "failed" and "'f' missing" in s["reason"], s["reason"]
    assert s["n_nodes"] <= 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _coder(req: FakeRequest) -> str:
    if "research lead" in req.system:
        return "HYPOTHESIS: move X towards the target\nPLAN:\n1. set X"
    if "review a change" in req.system:
        return "VERDICT: accept\nREASONS: fine"
    return "solver.py\n<<<<<<< SEARCH\nX = 3.0\n=======\nX = 2.0\n>>>>>>> REPLACE\n"


LLM = """
[agents]
mode = "llm"
model = "openai-compatible:fake-model"
max_retries = 0
timeout = 5
"""


def _gone_after_the_ping(req: FakeRequest) -> str:
    """The model answers `run`'s start-up check, then its endpoint drops every call."""
    if req.user == "ping":
        return "ok"
    raise ConnectionAbortedError("the endpoint went away")  # no response: a dropped call


@pytest.mark.slow  # 22 s of --quick under -n 2 (issue 24)
def test_an_unreachable_model_endpoint_stops_the_run_naming_it_and_resumes_once_it_answers(
    tmp_path: Path, home: Path
) -> None:
    evaluator = "import json, os, solver\nos.write(3, json.dumps({'f': solver.X ** 2}).encode())\n"
    task = quad_task(tmp_path / "t", evaluator, extra=LLM, budget=4)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    with FakeLLMServer(_gone_after_the_ping, port=port):  # an outage once the run is on
        out = drive_here(home, "run", str(task), "--base-url", url, "--quiet", check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    s = show(home)
    assert s["status"] == "failed" and "infrastructure failures in a row" in s["reason"]
    assert url in s["reason"] and "fake-model" in s["reason"], s["reason"]
    finished = [n for n in s["nodes"] if n["status"] in ("succeeded", "failed", "rejected")]
    assert [n["id"] for n in finished] == [0]  # only the baseline: no candidate was blamed
    with FakeLLMServer(_coder, port=port):
        drive_here(home, "resume", "last", "--quiet")
    s = show(home)
    assert s["status"] == "completed"
    assert s["best_score"] == pytest.approx(4.0) and s["baseline_score"] == pytest.approx(9.0)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
@pytest.mark.slow  # 17 s of --quick under -n 2 (issue 24)
def test_a_full_disk_stops_the_run_failed_and_resumes_once_space_is_freed(
    tmp_path: Path,
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        home = disk / "home"
        filler = disk / "filler"
        # the baseline's evaluator fills the disk (the local sandbox can reach it):
        # everything revtree writes afterwards meets ENOSPC
        fill = (
            "import json, os, solver\n"
            "if os.environ['REVTREE_NODE'] == '0' and not os.path.exists(os.environ['MARK']):\n"
            "    open(os.environ['MARK'], 'w').close()  # once: the marker is off the tmpfs\n"
            "    with open(os.environ['FILL'], 'wb') as f:\n"
            "        try:\n"
            "            while True:\n"
            "                f.write(b'x' * 65536); f.flush()\n"
            "        except OSError:\n"
            "            pass\n"
            "os.write(3, json.dumps({'f': solver.X ** 2}).encode())\n"
        )
        task = quad_task(tmp_path / "t", fill)
        text = (
            (task / "task.toml").read_text().replace('"QUAD_DATA"', '"QUAD_DATA", "FILL", "MARK"')
        )
        (task / "task.toml").write_text(text)
        env = {"FILL": str(filler), "MARK": str(tmp_path / "filled")}
        out = revtree(home, "run", str(task), "--quiet", check=False, **env)
        assert out.returncode != 0, out.stdout + out.stderr
        assert "No space left" in out.stdout + out.stderr or "disk full" in out.stdout + out.stderr
        filler.unlink()
        revtree(home, "resume", "last", "--quiet", **env)
        s = show(home)
        assert s["status"] == "completed", s["reason"]
        assert s["n_failed"] == 0, [n["error"] for n in s["nodes"] if n["error"]]
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


# -- the drift alarm --------------------------------------------------------------------
FIT_EVAL = """\
import json, os, model
pts = json.load(open("data.json"))
err = sum((model.predict(x) - y) ** 2 for x, y in pts) / len(pts)
os.write(3, json.dumps({"mse": err}).encode())
"""
FIT_HOLDOUT = """\
import json, os, model
split = os.environ["REVTREE_STAGE"]  # "guard" during the search, "holdout" at the end
xs = [2.5, 4.5, 6.5, 8.5] if split == "guard" else [1.5, 3.5, 5.5, 7.5, 9.5]
err = sum((model.predict(x) - (3 * x + 2)) ** 2 for x in xs) / len(xs)
os.write(3, json.dumps({"mse": err}).encode())
"""
HONEST = "def predict(x):\n    return {a} * x + 2\n"
HACK = "ANSWERS = {table}\n\n\ndef predict(x):\n    return ANSWERS.get(x, 0.0)\n"


class Hacker:
    """A coder that improves honestly, then hard-codes the protected dev answers (with
    ``crash``, a table that raises on inputs it has not seen)."""

    def __init__(self, crash: bool = False) -> None:
        self.calls, self.crash = 0, crash

    def __call__(self, req: FakeRequest) -> str:
        if "research lead" in req.system:
            return "HYPOTHESIS: fit the slope\nPLAN:\n1. change predict"
        if "review a change" in req.system or "review" in req.system.lower()[:200]:
            return "VERDICT: accept\nREASONS: looks fine"  # a reviewer that misses the hack
        self.calls += 1
        if self.calls == 2:
            table = {x: 3 * x + 2 for x in range(10)}
            body = HACK.format(table=table)
            if self.crash:
                body = body.replace("ANSWERS.get(x, 0.0)", "ANSWERS[x]")
        else:
            body = HONEST.format(a=2.0 + 0.4 * min(self.calls, 2))
        return f"model.py\n```python\n{body}```\n"


def fit_task(root: Path, budget: int) -> Path:
    root.mkdir(parents=True)
    (root / "model.py").write_text(HONEST.format(a=1.0))
    (root / "ev.py").write_text(FIT_EVAL)
    (root / "holdout.py").write_text(FIT_HOLDOUT)
    (root / "data.json").write_text(json.dumps([[x, 3 * x + 2] for x in range(10)]))
    (root / "task.toml").write_text(
        textwrap.dedent(f"""\
        name = "fit"
        goal = "Make predict(x) match the target."
        editable = ["model.py"]
        protected = ["ev.py", "data.json"]
        [evaluate]
        command = "python ev.py"
        metric = "mse"
        direction = "minimize"
        timeout = 20
        [holdout]
        command = "python holdout.py"
        files = ["holdout.py"]
        [sandbox]
        backend = "local"
        [search]
        policy = "greedy"
        num_drafts = 3
        [budget]
        max_nodes = {budget}
        [agents]
        mode = "llm"
        model = "openai-compatible:fake-model"
        max_retries = 0
        timeout = 5
        edit_format = "whole_file"
        """)
    )
    return root


@pytest.mark.slow  # 13 s of --quick under -n 2 (issue 24)
def test_a_hack_whose_holdout_crashes_gets_a_drift_alarm(tmp_path: Path, home: Path) -> None:
    task = fit_task(tmp_path / "t", budget=4)
    with FakeLLMServer(Hacker(crash=True)) as srv:
        drive_here(home, "run", str(task), "--base-url", srv.openai_url, "--quiet")
    s = show(home)
    hacked = [n for n in s["nodes"] if n["score"] == 0.0]
    assert hacked and all(n["alarm"]["kind"] == "holdout-failed" for n in hacked), s["alarms"]
    assert s["best_node"] not in {n["id"] for n in hacked}


@pytest.mark.slow  # 16 s of --quick under -n 2 (issue 24)
def test_a_coder_that_hard_codes_protected_data_gets_a_drift_alarm_and_is_not_exported(
    tmp_path: Path, home: Path
) -> None:
    task = fit_task(tmp_path / "t", budget=5)
    with FakeLLMServer(Hacker()) as srv:
        out = drive_here(home, "run", str(task), "--base-url", srv.openai_url)
    s = show(home)
    guard_scores = [g["score"] for g in s["guard"]["nodes"] if g["score"]]
    prompts = [r.system + r.prefix + r.user for r in srv.requests]
    leaked = [g for g in guard_scores if any(json.dumps(g) in p for p in prompts)]
    assert guard_scores and not leaked  # holdout results never reach the agents
    by_id = {n["id"]: n for n in s["nodes"]}
    hacked = [n for n in s["nodes"] if n["score"] == 0.0]
    assert hacked, [(n["id"], n["score"], n["error"]) for n in s["nodes"]]
    assert all(n["alarm"] and n["alarm"]["kind"] == "holdout-worse" for n in hacked)
    alarms = {a["node"]: a for a in s["alarms"]}
    assert {n["id"] for n in hacked} <= set(alarms)
    assert all(
        a["dev"] == 0.0 and a["holdout"] > 50 for a in alarms.values() if a["kind"] != "subtree"
    ), s["alarms"]
    assert all(
        by_id[a["node"]]["parent"] in alarms for a in alarms.values() if a["kind"] == "subtree"
    )
    assert s["best_node"] not in alarms and by_id[s["best_node"]]["score"] > 0
    assert s["guard"]["runs"] >= 2  # the baseline's and the hack's
    assert "drift alarm" in out.stdout
    patch = tmp_path / "best.patch"
    exp = revtree(home, "export", "last", "--patch", str(patch))
    assert f"node {s['best_node']}" in exp.stdout and "drift alarm" in exp.stderr
    assert "ANSWERS" not in patch.read_text()


# -- noise --------------------------------------------------------------------------------
NOISY = """\
import json, os, random, solver
rng = random.Random(int(os.environ["REVTREE_SEED"]) * 7919 + int(os.environ["REVTREE_NODE"]))
os.write(3, json.dumps({"f": 10.0 + rng.gauss(0.0, 1.0) + 0 * solver.UNUSED}).encode())
"""


@pytest.mark.slow  # 13 s of --quick under -n 2 (issue 24)
def test_a_stochastic_evaluator_of_an_unchanged_program_is_never_reported_better(
    tmp_path: Path, home: Path
) -> None:
    root = tmp_path / "t"
    root.mkdir()
    (root / "solver.py").write_text("UNUSED = 1.0\n")
    (root / "ev.py").write_text(NOISY)
    (root / "task.toml").write_text(
        textwrap.dedent("""\
        name = "noise"
        editable = ["solver.py"]
        protected = ["ev.py"]
        [evaluate]
        command = "python ev.py"
        metric = "f"
        direction = "minimize"
        [sandbox]
        backend = "local"
        [budget]
        max_nodes = 12
        [[knobs]]
        name = "UNUSED"
        type = "float"
        low = 0.0
        high = 2.0
        file = "solver.py"
        """)
    )
    out = drive_here(home, "run", str(root), "--quiet")
    s = show(home)
    assert s["gain"] is not None and s["gain"]["beyond_noise"] is False, s["gain"]
    assert s["gain"]["post_selection"] is True
    assert "within the evaluator's noise" in out.stdout
    assert "better:" not in out.stdout


@pytest.mark.slow  # 7 s of --quick under -n 2 (issue 24)
def test_an_edit_that_changes_nothing_is_not_evaluated(tmp_path: Path, home: Path) -> None:
    evaluator = "import json, os, solver\nos.write(3, json.dumps({'f': solver.X}).encode())\n"
    task = quad_task(tmp_path / "q", evaluator, extra=LLM, budget=3)
    with FakeLLMServer(
        lambda req: (
            "HYPOTHESIS: none\nPLAN:\n1. x"
            if "research lead" in req.system
            else "solver.py\n```python\nX = 3.0\n```\n"
        )
    ) as srv:
        drive_here(home, "run", str(task), "--base-url", srv.openai_url, "--quiet")
    s = show(home)
    others = [n for n in s["nodes"] if n["id"] != 0]
    assert others and all("change nothing" in (n["error"] or "") for n in others), [
        n["error"] for n in others
    ]
    assert all(n["n_evaluations"] == 0 for n in others)


# -- verification spent where it decides something (issue 24) ---------------------------
EXACT = "import json, os, solver\nos.write(3, json.dumps({'f': (solver.X - 1.3) ** 2}).encode())\n"
FIRST_RUN_ONLY = """\
import json, os, solver
rerun = os.environ["REVTREE_SEED"] != "0"  # seed 0: repeat r runs with seed r
cheat = 5.0 if rerun and solver.X != 3.0 else 0.0  # every candidate, never the baseline
os.write(3, json.dumps({"f": (solver.X - 1.3) ** 2 / 100 + cheat}).encode())
"""


@pytest.mark.slow  # a whole run, 4 s (issue 24)
def test_a_deterministic_evaluator_re_runs_only_the_baseline_and_the_final_best(
    tmp_path: Path, home: Path, store: Store
) -> None:
    # no share: every new best would be verified as it is found
    extra = "[search]\nseed = 0\n[trust]\nverify_share = 1.0\n"
    task = quad_task(tmp_path / "q", EXACT, extra=extra, budget=12)
    drive_here(home, "run", str(task), "--quiet")
    s = show(home)
    counts = {n["id"]: n["n_evaluations"] for n in s["nodes"] if n["n_evaluations"] > 1}
    # the baseline's verification measures the noise (3 repeats); none is seen, so the
    # bests found later wait for the end, where the final one is re-run once
    assert counts == {0: 3, s["best_node"]: 2}, counts
    events = store.events_since(s["run_id"], limit=100_000)
    bests = {e.node_id for e in events if e.kind == "best"} - {0}
    assert len(bests) > 1, bests  # intermediate bests were found, and left at one run
    assert s["gain"]["beyond_noise"] is True and s["gain"]["post_selection"] is False
    deferred = [e for e in events if e.kind == "verify" and "at the end" in e.message]
    assert len(deferred) == 1, deferred  # the live log says why, once


@pytest.mark.slow  # a whole run, 4 s (issue 24)
@pytest.mark.parametrize("share", ["", "[trust]\nverify_share = 0.2\n"])
def test_the_first_best_measures_the_noise_with_the_baselines_repeat(
    tmp_path: Path, home: Path, store: Store, share: str
) -> None:
    # the default share, or one that leaves room for two re-runs only from the 8th
    # evaluation (the first best verified here comes at the 9th): the baseline, the first
    # best, is not verified as it is found
    extra = "[search]\nseed = 0\n" + share
    task = quad_task(tmp_path / "q", EXACT, extra=extra, budget=12)
    drive_here(home, "run", str(task), "--quiet")
    s = show(home)
    events = store.events_since(s["run_id"], limit=100_000)
    reruns = [(e.node_id, e.data["repeat"]) for e in events if e.kind == "eval"]
    reruns = [r for r in reruns if r[1] > 0]
    bests = [e.node_id for e in events if e.kind == "best" and e.node_id != 0]
    # the first best verified: the baseline's second run first, then the best's (two
    # nodes reproduced bit for bit: the noise is nil); no node runs a third time, and
    # the final best is re-run once at the end (the baseline's repeat is reused there)
    assert reruns[0] == (0, 1) and reruns[1][0] in bests, reruns
    assert all(r == 1 for _, r in reruns) and len(reruns) == len(set(reruns)), reruns
    assert (s["best_node"], 1) in reruns and len(reruns) <= 3, reruns
    assert s["gain"]["beyond_noise"] is True


@pytest.mark.slow  # a whole run, 7 s (issue 24)
def test_a_candidate_good_on_its_first_run_only_is_never_the_best(
    tmp_path: Path, home: Path
) -> None:
    task = quad_task(tmp_path / "q", FIRST_RUN_ONLY, extra="[search]\nseed = 0\n", budget=8)
    drive_here(home, "run", str(task), "--quiet")
    s = show(home)
    assert s["best_node"] == 0, [(n["id"], n["score"], n["n_evaluations"]) for n in s["nodes"]]


LATE_FIRST_RUN_ONLY = """\
import json, os, solver
late = int(os.environ["REVTREE_NODE"]) >= 6  # the baseline and early candidates: exact
f = (solver.X - 1.3) ** 2
if late:  # better than any honest score on its first run (seed 0) only
    f = f - 1.0 if os.environ["REVTREE_SEED"] == "0" else f + 5.0
os.write(3, json.dumps({"f": f}).encode())
"""


@pytest.mark.slow  # a whole run, 5 s (issue 24)
def test_a_late_candidate_good_on_its_first_run_only_is_never_the_best(
    tmp_path: Path, home: Path, store: Store
) -> None:
    extra = "[search]\nseed = 0\n[trust]\nverify_share = 1.0\n"
    task = quad_task(tmp_path / "q", LATE_FIRST_RUN_ONLY, extra=extra, budget=12)
    drive_here(home, "run", str(task), "--quiet")
    s = show(home)
    nodes = {n["id"]: n for n in s["nodes"]}
    events = store.events_since(s["run_id"], limit=100_000)
    # the evaluator was exact until then: the cheats' verification waited for the end
    assert any(e.kind == "verify" and "at the end" in e.message for e in events)
    cheats = {e.node_id for e in events if e.kind == "best"} & {i for i in nodes if i >= 6}
    assert cheats, [(n["id"], n["score"]) for n in s["nodes"]]  # one was the best a while
    assert s["best_node"] < 6 and s["best_score"] >= 0, (s["best_node"], s["best_score"])
    assert nodes[s["best_node"]]["n_evaluations"] > 1  # the reported best is verified
    # each cheat that was the best was re-run at the end, and fell behind it there
    assert all(nodes[i]["n_evaluations"] > 1 for i in cheats), nodes
    assert all(nodes[i]["score"] > s["best_score"] for i in cheats), nodes


X_FIRST_RUN_ONLY = """\
import json, os, solver
f = (solver.X - 1.3) ** 2
if solver.X == 1.0:  # good on its first run (seed 0) only; every other program: exact
    f = f - 1.0 if os.environ["REVTREE_SEED"] == "0" else f + 5.0
os.write(3, json.dumps({"f": f}).encode())
"""


class Writes:
    """A coder that writes ``X = x`` for each of ``xs`` in turn; once the last is
    reviewed, its endpoint drops every call (the run stops failed, resumable)."""

    def __init__(self, *xs: float) -> None:
        self.xs, self.reviews = list(xs), len(xs)

    def __call__(self, req: FakeRequest) -> str:
        if req.user == "ping":
            return "ok"
        if not self.reviews:
            raise ConnectionAbortedError("the endpoint went away")
        if "research lead" in req.system:
            return "HYPOTHESIS: move X towards the target\nPLAN:\n1. set X"
        if "review a change" in req.system:
            self.reviews -= 1
            return "VERDICT: accept\nREASONS: fine"
        return f"solver.py\n```python\nX = {self.xs.pop(0)}\n```\n"


@pytest.mark.slow  # two sessions of a run, 10 s (issue 24)
def test_a_resumed_run_verifies_the_best_an_earlier_session_deferred(
    tmp_path: Path, home: Path, store: Store
) -> None:
    extra = LLM + "[trust]\nverify_share = 1.0\n"
    task = quad_task(tmp_path / "q", X_FIRST_RUN_ONLY, extra=extra, budget=6)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    with FakeLLMServer(Writes(2.0, 1.0), port=port):  # an honest best, then a cheat
        out = drive_here(home, "run", str(task), "--base-url", url, "--quiet", check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    s = show(home)
    nodes = {n["id"]: n for n in s["nodes"] if n["score"] is not None}
    assert s["status"] == "failed" and len(nodes) == 3, s["reason"]  # no final checks
    cheat = s["best_node"]
    assert nodes[cheat]["score"] < 0 and nodes[cheat]["n_evaluations"] == 1, nodes
    honest = next(i for i in nodes if i not in (0, cheat))
    assert nodes[honest]["n_evaluations"] == 1  # deferred too
    with FakeLLMServer(Writes(*[2.5] * 9), port=port):  # no new best: none deferred
        drive_here(home, "resume", "last", "--quiet")
    s = show(home)
    nodes = {n["id"]: n for n in s["nodes"]}
    assert s["status"] == "completed" and s["best_node"] == honest, (s["best_node"], nodes)
    assert nodes[cheat]["n_evaluations"] > 1 and nodes[honest]["n_evaluations"] > 1
    assert s["best_score"] == pytest.approx(0.49)
    events = store.events_since(s["run_id"], limit=100_000)
    assert len([e for e in events if e.kind == "verify" and "at the end" in e.message]) == 1


EACH_BETTER_ONCE = """\
import json, os, solver
node = int(os.environ["REVTREE_NODE"])
f = (solver.X - 1.3) ** 2
if node >= 2:  # better than every node before it, on its first run (seed 0) only
    f = 1.0 - node / 100 if os.environ["REVTREE_SEED"] == "0" else f + 5.0
os.write(3, json.dumps({"f": f}).encode())
"""


@pytest.mark.slow  # a whole run, 7 s (issue 24)
def test_more_deferred_cheats_than_final_tries_are_all_found_out(
    tmp_path: Path, home: Path
) -> None:
    extra = "[search]\nseed = 0\n[trust]\nverify_share = 1.0\n"
    task = quad_task(tmp_path / "q", EACH_BETTER_ONCE, extra=extra, budget=13)
    drive_here(home, "run", str(task), "--quiet")
    s = show(home)
    nodes = {n["id"]: n for n in s["nodes"] if n["score"] is not None}
    cheats = [i for i in nodes if i >= 2]
    assert len(cheats) > FINAL_TRIES, nodes  # each a new best, each deferred
    assert s["best_node"] in (0, 1) and s["best_score"] >= 0, (s["best_node"], nodes)
    assert nodes[s["best_node"]]["n_evaluations"] > 1
    assert all(nodes[i]["n_evaluations"] > 1 for i in cheats), nodes  # each re-run at the end


# the baseline (X = 3.0) is the slowest and the worst, so that it is never the best while
# the run goes on and its repeats all wait for the end
BASELINE_LAST = (
    "import json, os, time, solver\nbase = solver.X == 3.0\ntime.sleep(0.8 if base else 0.3)\n"
    "os.write(3, json.dumps({'f': 100.0 if base else (solver.X - 1.3) ** 2}).encode())\n"
)


@pytest.mark.slow  # a whole run, about 8 s (issue 24)
def test_the_end_verifies_the_baseline_beside_the_best_where_two_slots_fit(
    tmp_path: Path, home: Path
) -> None:
    extra = "[search]\nseed = 0\nparallel = 2\n[trust]\nverify_share = 1.0\n"
    task = quad_task(tmp_path / "q", BASELINE_LAST, extra=extra, budget=12)
    drive_here(home, "run", str(task), "--quiet")
    best = show(home)["best_node"]
    spans = full_spans(home)
    ends = sorted(b for (n, r), (_, b) in spans.items() if n != 0 and r == 0)
    assert best != 0 and {(0, 1), (best, 1)} <= set(spans), spans
    (a0, a1), (b0, b1) = spans[(0, 1)], spans[(best, 1)]
    # the baseline, and the final best (deferred: seed 0), re-run once the budget let no
    # candidate start and a slot was free: beside the last candidate at the earliest
    assert min(a0, b0) >= ends[-2] - 0.05 and (0, 2) not in spans, spans
    assert a0 < b1 and b0 < a1, spans  # at once, not one after the other
    # the baseline's re-run took the slot the last but one candidate left (it used to wait
    # for the last one to end), unless the two ended at once
    assert a0 < ends[-1] or ends[-1] - ends[-2] < 0.05, spans


# the last candidate (node 11 of 12) is slow and bad: the best is known before it ends
LAST_SLOW = (
    "import json, os, time, solver\nlast = os.environ['REVTREE_NODE'] == '11'\n"
    "time.sleep(3.0 if last else 0.2)\n"
    "os.write(3, json.dumps({'f': 100.0 if last else (solver.X - 1.3) ** 2}).encode())\n"
)


@pytest.mark.slow  # a whole run, about 5 s (issue 24)
def test_the_final_best_is_re_run_beside_the_last_candidate_where_a_slot_is_free(
    tmp_path: Path, home: Path
) -> None:
    extra = "[search]\nseed = 0\nparallel = 2\n"
    task = quad_task(tmp_path / "q", LAST_SLOW, extra=extra, budget=12)
    drive_here(home, "run", str(task), "--quiet")
    best = show(home)["best_node"]
    spans = full_spans(home)
    assert best not in (0, 11) and (best, 1) in spans and (0, 1) in spans, spans
    # re-run in the slot the last but one candidate left, not after the last one ended
    assert spans[(best, 1)][1] < spans[(11, 0)][1] - 1.0, spans
    assert (best, 2) not in spans, spans  # the evaluator showed no noise: one re-run


# each run notes its node and repeat as it starts
IN_ORDER = (
    "import json, os, time, solver\n"
    "with open(os.path.join(os.environ['QUAD_DATA'], 'order'), 'a') as f:\n"
    "    f.write(os.environ['REVTREE_NODE'] + ' ' + os.environ['REVTREE_REPEAT'] + '\\n')\n"
    "time.sleep(0.2)\n"
    "os.write(3, json.dumps({'f': (solver.X - 1.3) ** 2}).encode())\n"
)


def in_order_run(
    tmp_path: Path,
    home: Path,
    store: Store,
    extra: str,
    budget: int,
    sandbox_seconds: float | None = None,
) -> tuple[list[str], list[Event]]:
    """A run of the quad task whose runs note their node and repeat as they start
    (``IN_ORDER``): those notes in order, and the run's events."""
    marks = tmp_path / "marks"
    marks.mkdir()
    task = quad_task(tmp_path / "q", IN_ORDER, extra=extra, budget=budget)
    if sandbox_seconds is not None:
        toml = task / "task.toml"
        limit = f"max_nodes = {budget}\nmax_sandbox_seconds = {sandbox_seconds}"
        toml.write_text(toml.read_text().replace(f"max_nodes = {budget}", limit))
    drive_here(home, "run", str(task), "--quiet", QUAD_DATA=str(marks))
    events = store.events_since(show(home)["run_id"], limit=100_000)
    return (marks / "order").read_text().split("\n"), events


@pytest.mark.slow  # a whole run, about 3 s (issue 24)
def test_at_parallel_1_the_next_runs_while_a_best_waits_to_verify_but_records_after(
    tmp_path: Path, home: Path, store: Store
) -> None:
    extra = "[search]\nseed = 0\n[trust]\nverify_share = 1.0\n"  # the baseline verified
    order, events = in_order_run(tmp_path, home, store, extra, budget=4)
    # node 1 ran in a slot the baseline's runs left (the first, as a rule: each run lets
    # its slot go before it is recorded), before the baseline's verification ended
    assert order[0] == "0 0" and order.index("1 0") < order.index("0 2"), order
    stored = [(e.node_id, e.data["repeat"]) for e in events if e.kind == "eval"]
    # but it was stored after the baseline's verification, as one at a time would
    assert stored.index((1, 0)) > max(stored.index((0, r)) for r in (1, 2)), stored


@pytest.mark.slow  # a whole run, about 3 s (issue 24)
def test_at_parallel_1_no_candidate_is_recorded_past_a_spent_sandbox_budget(
    tmp_path: Path, home: Path, store: Store
) -> None:
    _, events = in_order_run(tmp_path, home, store, "[search]\nseed = 0\n", 30, 1.0)
    spent, late = 0.0, []
    for e in (e for e in events if e.kind == "eval"):
        first = e.node_id != 0 and e.data["stage"] == "full" and e.data["repeat"] == 0
        if first and spent >= 1.0:  # the budget a slot taken one at a time would check
            late.append((e.node_id, round(spent, 3)))
        spent += e.data["duration"]
    assert spent >= 1.0 and not late, late


# the baseline's re-run (its first run left a mark) takes 15 s: a stop must not wait for it
RERUN_SLOW = """\
import json, os, pathlib, time, solver
marks = pathlib.Path(os.environ["QUAD_DATA"])
if solver.X == 3.0:
    if (marks / "once").exists():
        (marks / "rerun").write_text("")
        time.sleep(15)
    else:
        (marks / "once").write_text("")
        time.sleep(0.5)
else:
    time.sleep(0.3)
os.write(3, json.dumps({"f": 100.0 if solver.X == 3.0 else (solver.X - 1.3) ** 2}).encode())
"""


@pytest.mark.slow  # a whole run, stopped, then resumed: about 10 s
def test_a_stop_during_the_final_checks_beside_the_last_candidates_stops_at_once(
    tmp_path: Path, home: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    extra = "[search]\nseed = 0\nparallel = 2\n[trust]\nverify_share = 1.0\n"
    task = quad_task(tmp_path / "q", RERUN_SLOW, extra=extra, budget=12)
    env = cli_env(home, QUAD_DATA=str(marks))
    cmd = [sys.executable, "-m", "revtree", "run", str(task), "--quiet"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    db = home / "revtree.db"

    def searched() -> bool:  # the re-run began, and every candidate is done
        if not (marks / "rerun").exists():
            return False
        with sqlite3.connect(db) as conn:
            done = "select count(*) from nodes where status in ('succeeded', 'failed')"
            return conn.execute(done).fetchone()[0] >= 12

    try:
        wait_for(lambda: proc.poll() is not None or searched(), 60, "the candidates done")
        assert proc.poll() is None, proc.communicate()[0]
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=30)[0].decode()
        took = time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait()
    assert took < 8, (took, out)  # not the 15 s of the re-run it cancelled
    assert show(home)["status"] == "stopped", out
    (marks / "once").unlink()  # the resume's re-run is quick
    drive_here(home, "resume", "last", "--quiet", QUAD_DATA=str(marks))
    s = show(home)
    assert s["status"] == "completed" and s["best_node"] != 0, s["status"]


EXACT_SLOW = "import time\ntime.sleep(0.05)\n" + EXACT


@pytest.mark.slow  # a whole run at parallel 4, 6 s (issue 24)
def test_at_parallel_4_bests_found_at_once_measure_the_noise_once(
    tmp_path: Path, home: Path
) -> None:
    # no share: every new best is verified or deferred as it is found, four at a time
    extra = "[search]\nseed = 0\nparallel = 4\n[trust]\nverify_share = 1.0\n"
    task = quad_task(tmp_path / "q", EXACT_SLOW, extra=extra, budget=24)
    drive_here(home, "run", str(task), "--quiet")
    s = show(home)
    counts = {n["id"]: n["n_evaluations"] for n in s["nodes"] if n["n_evaluations"] > 1}
    # one verification measures the noise: one node's three runs (the baseline's, or a
    # best's found before the baseline was scored), or the baseline's second run and one
    # of the first best's; the bests found while it runs wait for it, see none, and wait
    # for the end, where the final best is re-run once (and the baseline, unless it was);
    # a best re-run beside the last candidates may be displaced after (one node more)
    measured = [i for i, n in counts.items() if n == 3]
    assert len(measured) <= 1 and max(counts.values()) <= 3, counts
    assert {0, s["best_node"]} <= set(counts) and len(counts) <= 4, counts
    assert measured or counts[0] == 2, counts
    assert all(n == 2 for i, n in counts.items() if i not in measured), counts
