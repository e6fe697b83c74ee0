"""``revtree retry`` of a candidate whose coder's answers were refused, through the real
CLI, the openai SDK against the fake server on 127.0.0.1, real git and SQLite.

A thread's LangGraph checkpoint is written as it exits, and LangGraph keeps a thread's
state from one run to the next: a retry that starts the thread over must not hand the
new attempt the last attempt's refused answer (its coder would be asked to repair an
answer it never gave, with no repair round left)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer, FakeReply, FakeRequest
from tests.orchestrator.conftest import drive_here, revtree_here
from tests.orchestrator.test_llm_run import make_task, role

pytestmark = pytest.mark.slow(seconds=15)
GOOD = (
    "=== FILE: model.py ===\n```python\nfrom helpers import transform\n\nSCALE = 1.0\n\n\n"
    "def predict(x):\n    return transform(x) * 3\n```\n"
)


class Sloppy:
    """Proposes; codes nothing readable until ``fixed``; logs each call's role."""

    def __init__(self) -> None:
        self.fixed, self.roles = False, list[str]()

    def __call__(self, req: FakeRequest) -> FakeReply | str:
        if req.user == "ping":  # the check that the model answers, before a run
            return "ok"
        self.roles.append(role(req))
        if self.roles[-1] == "proposer":
            return "HYPOTHESIS: scale the prediction\nPLAN:\n1. edit model.py"
        return GOOD if self.fixed else "I would rather not change anything today."


def node_1(home: Path) -> dict:
    shown = json.loads(revtree_here(home, "show", "last", "--json", "--nodes").stdout)
    return next(n for n in shown["nodes"] if n["id"] == 1)


def test_a_second_retry_starts_with_a_fresh_coder_call_not_the_last_refusal(
    tmp_path: Path, home: Path
) -> None:
    task = make_task(tmp_path / "t", budget=2)
    model = Sloppy()
    with FakeLLMServer(model) as srv:
        drive_here(home, "run", str(task), "--base-url", srv.openai_url, "--quiet", check=False)
        first = node_1(home)
        assert first["status"] == "failed" and first["error_kind"] == "code", first
        assert model.roles == ["proposer", "coder", "repair"]  # one repair round, refused
        drive_here(home, "retry", "last", "1", check=False)  # attempt 2: refused again
        assert node_1(home)["status"] == "failed" and model.roles[3:] == ["coder", "repair"]
        model.fixed, model.roles = True, []
        out = drive_here(home, "retry", "last", "1")  # attempt 3: the coder now answers
    assert model.roles == ["coder"], (model.roles, out.stdout)  # not a repair of attempt 2
    assert node_1(home)["status"] == "succeeded" and "attempt 3: scored" in out.stdout
