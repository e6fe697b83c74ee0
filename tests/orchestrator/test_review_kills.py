"""A model review beside an evaluation, and a ``revtree run`` killed (SIGKILL) around it:
the verdict is SQL's, not the process's. A rejection given before the kill still keeps
the candidate from the scores after ``resume``; a review lost in flight is asked again
before the candidate is recorded; an acceptance already given is not asked again.

Real CLI subprocesses in the namespace sandbox (bwrap), the openai SDK against the fake
server on 127.0.0.1 (in this process, answering across the kill), real git and SQLite.
Each reviewer call is counted by the change it reads (the coder's slope, or the
tampered copy of the hidden target)."""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer, FakeReply, FakeRequest
from tests.orchestrator.conftest import cli_env, revtree, revtree_here, wait_for
from tests.orchestrator.test_llm_run import Scientist, make_task, role

pytestmark = [pytest.mark.bwrap, pytest.mark.slow(seconds=20)]
TAMPERED = "tampered"
# the evaluator of test_llm_run, which holds a tampered candidate (err 0) for HOLD s
EVALUATOR = """\
import json, os, time, model
err = sum((model.predict(x) - (3 * x + 2)) ** 2 for x in range(10))
if err == 0 and os.environ.get("HOLD"):
    time.sleep(float(os.environ["HOLD"]))
os.write(3, json.dumps({"err": err}).encode())
"""
# "auto", which $REVTREE_SANDBOX forces: a run in bwrap may be resumed in the local
# sandbox (on a machine without it), where no review runs beside an evaluation
SANDBOX = '[sandbox]\nbackend = "auto"\npass_env = ["HOLD"]\n'


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    from revtree.sandboxes.bwrap import usable

    if (why := usable()) is not None:
        pytest.skip(why)


def change_of(req: FakeRequest) -> str:
    """Which change a reviewer reads: the coder's slope, or the tampered one."""
    if re.search(r"^\+\s*return 3 \* x \+ 2$", req.user, re.M):
        return TAMPERED
    slope = re.search(r"^\+\s*return x \* ([0-9.]+)$", req.user, re.M)  # the diff's line
    return slope.group(1) if slope else "?"


class Reviewed:
    """The Scientist (its second change tampered), counting reviewer calls by change; the first
    review of the tampered change waits for ``release`` where ``hold`` is set."""

    def __init__(self, hold: bool) -> None:
        self.model, self.hold = Scientist(tamper_at=2), hold
        self.calls: Counter[str] = Counter()
        self.answered: set[str] = set()
        self.held, self.release = threading.Event(), threading.Event()

    def __call__(self, req: FakeRequest) -> FakeReply | str:
        if role(req) != "reviewer":
            return self.model(req)
        change = change_of(req)
        self.calls[change] += 1
        if change == TAMPERED and self.hold and self.calls[change] == 1:
            self.held.set()
            self.release.wait(30)
        reply = self.model(req)
        self.answered.add(change)
        return reply


def task_at(tmp_path: Path) -> Path:
    task = make_task(tmp_path / "t", budget=5, reviewer=True, extra=SANDBOX)
    (task / "ev.py").write_text(EVALUATOR)
    return task


def show(home: Path) -> dict:
    return json.loads(revtree_here(home, "show", "last", "--json", "--nodes").stdout)


def node(db: Path, node_id: int) -> tuple[str, str | None]:
    """A node's status and stored review, as SQL holds them now (("", None): none yet)."""
    with sqlite3.connect(db) as conn:
        sql = "select status, review from nodes where id = ?"
        row = conn.execute(sql, (node_id,)).fetchone()
    return ("", None) if row is None else (row[0], row[1])


def evaluations(db: Path) -> list[tuple[int, int]]:
    """(node, repeat) of each evaluation stored."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("select node_id, repeat from evaluations").fetchall()
    return [(int(a), int(b)) for a, b in rows]


def evaluating(db: Path) -> int | None:
    """The candidate being evaluated (one at a time: parallel 1), if any."""
    with sqlite3.connect(db) as conn:
        sql = "select id from nodes where status = 'evaluating' and id > 0"
        row = conn.execute(sql).fetchone()
    return None if row is None else int(row[0])


def started(home: Path, task: Path, url: str, **env: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "revtree", "run", str(task), "--base-url", url, "--quiet"]
    env = cli_env(home, REVTREE_SANDBOX="bwrap", **env)
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def kill(proc: subprocess.Popen[bytes]) -> None:
    assert proc.poll() is None, proc.communicate()[0].decode()  # still running
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


@pytest.mark.parametrize("resumed_in", ["bwrap", "local"])
def test_a_rejection_given_beside_an_evaluation_outlives_a_kill(
    tmp_path: Path, home: Path, resumed_in: str
) -> None:
    """Killed while the tampered node is still being evaluated, its reviewer's
    rejection given, and the next node's acceptance given while it waits its turn: the
    resume (in bwrap, or in the local sandbox, where reviews come first) records the
    tampered node rejected without evaluating or reviewing it again, and does not ask
    the next one's reviewer again."""
    task, db = task_at(tmp_path), home / "revtree.db"
    model = Reviewed(hold=False)
    with FakeLLMServer(model) as srv:
        proc = started(home, task, srv.openai_url, HOLD="15")
        tampered: list[int] = []
        try:

            def given() -> bool:  # the rejection answered, the next reviewed and waiting
                if proc.poll() is not None:
                    return True
                if TAMPERED not in model.answered:
                    return False
                if not tampered and (now := evaluating(db)) is not None:
                    tampered.append(now)
                return bool(tampered) and node(db, tampered[0] + 1)[1] is not None

            wait_for(given, 90, "the rejection and the next node's review")
            time.sleep(0.5)  # (a process that kept the verdict in memory only: it is lost)
            assert node(db, tampered[0])[0] == "evaluating"  # still: HOLD is 15 s
            kill(proc)
        finally:
            proc.kill()
        out = revtree(home, "resume", "last", "--quiet", timeout=180, REVTREE_SANDBOX=resumed_in)
    ran = [e for e in evaluations(db) if e[0] == tampered[0]]
    s = show(home)
    assert s["status"] == "completed", out.stdout + out.stderr
    bad = next(n for n in s["nodes"] if n["id"] == tampered[0])
    assert bad["status"] == "rejected" and bad["score"] is None, bad
    assert "hard-codes the target" in bad["error"]
    assert s["best_node"] != tampered[0]
    assert not ran  # its evaluation was killed, and not run again
    assert "?" not in model.calls and model.calls[TAMPERED] == 1, model.calls  # stored
    assert max(model.calls.values()) == 1, model.calls  # no acceptance asked for twice


def test_a_review_lost_in_flight_is_asked_again_before_the_node_is_recorded(
    tmp_path: Path, home: Path
) -> None:
    """Killed while the reviewer still reads the tampered node (its evaluation under
    way): the resume reviews it again before recording it, and it is rejected."""
    task, db = task_at(tmp_path), home / "revtree.db"
    model = Reviewed(hold=True)
    with FakeLLMServer(model) as srv:
        proc = started(home, task, srv.openai_url)  # (no HOLD: it evaluates at once)
        try:
            wait_for(lambda: proc.poll() is not None or model.held.is_set(), 90, "the review")
            tampered = wait_for(
                lambda: proc.poll() is not None or evaluating(db),
                30,
                "the tampered node evaluating beside its review",
            )
            kill(proc)
        finally:
            proc.kill()
            model.release.set()
        out = revtree(home, "resume", "last", "--quiet", timeout=180, REVTREE_SANDBOX="bwrap")
    s = show(home)
    assert s["status"] == "completed", out.stdout + out.stderr
    bad = next(n for n in s["nodes"] if n["id"] == tampered)
    assert bad["status"] == "rejected" and bad["score"] is None, bad
    assert s["best_node"] != tampered
    assert model.calls[TAMPERED] == 2, model.calls  # lost with the process: asked again
