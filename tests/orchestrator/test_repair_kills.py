"""A ``revtree run`` killed (SIGKILL) while its coder repairs a refused answer: the
resume goes on with the repair round, as the live log's ``refused`` event kept it, not
with a fresh coder call and all its rounds again (LangGraph's checkpoints are written
only as a thread exits, so the graph state of the round died with the process).

The real CLI in a subprocess, the openai SDK against the fake server on 127.0.0.1 (in
this process, answering across the kill), real git and SQLite, the local sandbox."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer, FakeReply, FakeRequest
from tests.orchestrator.conftest import cli_env, revtree, revtree_here, wait_for
from tests.orchestrator.test_llm_run import make_task, role
from tests.orchestrator.test_retry_llm import GOOD

pytestmark = pytest.mark.slow(seconds=15)


class Repairing:
    """Node 1's first answer has no edit; its repair call waits for ``release`` the
    first time (the test kills the run then), and is answered with a good edit after."""

    def __init__(self) -> None:
        self.roles, self.held, self.release = list[str](), threading.Event(), threading.Event()
        self.repairs_seen: list[str] = []

    def __call__(self, req: FakeRequest) -> FakeReply | str:
        if req.user == "ping":
            return "ok"
        r = role(req)
        self.roles.append(r)
        if r == "proposer":
            return "HYPOTHESIS: scale the prediction\nPLAN:\n1. edit model.py"
        if r == "coder":
            return "I would rather not change anything today."  # no edit: refused
        self.repairs_seen.append(req.user)
        if not self.held.is_set():
            self.held.set()
            self.release.wait(30)
        return GOOD


def test_a_kill_during_a_repair_round_resumes_the_round(tmp_path: Path, home: Path) -> None:
    task = make_task(tmp_path / "t", budget=2)
    model = Repairing()
    with FakeLLMServer(model) as srv:
        cmd = [sys.executable, "-m", "revtree", "run", str(task)]
        cmd += ["--base-url", srv.openai_url, "--quiet"]
        proc = subprocess.Popen(
            cmd, env=cli_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            wait_for(lambda: proc.poll() is not None or model.held.is_set(), 90, "the repair")
            assert proc.poll() is None, proc.communicate()[0].decode()
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            proc.kill()
            model.release.set()
        before = list(model.roles)
        out = revtree(home, "resume", "last", "--quiet", timeout=180)
    assert before == ["proposer", "coder", "repair"], before
    after = model.roles[len(before) :]
    assert after == ["repair"], (after, out.stdout)  # the round, not a fresh coder call
    assert "I would rather not change anything today." in model.repairs_seen[-1]
    shown = json.loads(revtree_here(home, "show", "last", "--json", "--nodes").stdout)
    one = next(n for n in shown["nodes"] if n["id"] == 1)
    assert shown["status"] == "completed" and one["status"] == "succeeded", one
    log = revtree(home, "watch", "last").stdout  # (the run ended: its whole live log)
    assert "node 1: the coder's answer could not be applied (round 0)" in log, log
