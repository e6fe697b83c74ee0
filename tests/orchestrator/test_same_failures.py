"""A run whose candidates keep failing for a reason that is not theirs stops ``failed``
(``[trust] same_failures`` in a row, same step, same error class), resumable; failures of
the candidates' own code never stop it.

The model is the fake server on 127.0.0.1 behind the real openai SDK; the runs go
through the CLI's commands in-process (``drive_here``), with real git, SQL and
sandboxes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from revtree.agents.llm.base import LLMError, StreamStalled
from revtree.agents.llm.fake_server import FakeLLMServer, FakeReply, FakeRequest
from revtree.agents.structured import AnswerError
from revtree.errors import (
    EditError,
    EditRefused,
    EditUnreadable,
    SandboxError,
)
from revtree.memory import NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.orchestrator.trust import Failure, SameFailures, foreign_failure
from revtree.tasks import load_task
from tests.orchestrator.conftest import drive_here, revtree_here

EVALUATOR = """\
import json, os, solver
node = os.environ["REVTREE_NODE"]
if node != "0" and os.environ.get("FAIL") == "crash":
    raise SystemExit(3)
if node != "0" and os.environ.get("FAIL") == "hang":
    import time; time.sleep(60)
os.write(3, json.dumps({"f": solver.X ** 2}).encode())
"""
REMINDER = "gives no verdict that can be read"  # the reviewer's second ask says it


def make_task(
    root: Path, *, budget: int, agents: str, env: str = "", timeout: float = 20, trust: str = ""
) -> Path:
    root.mkdir(parents=True)
    (root / "solver.py").write_text("X = 3.0\n")
    (root / "ev.py").write_text(EVALUATOR)
    (root / "task.toml").write_text(
        textwrap.dedent(f"""\
        name = "quad"
        goal = "Make X small."
        editable = ["solver.py"]
        protected = ["ev.py"]
        [evaluate]
        command = "python ev.py"
        metric = "f"
        direction = "minimize"
        timeout = {timeout}
        [sandbox]
        env = {{ {env} }}
        [search]
        policy = "greedy"
        num_drafts = 1
        [trust]
        verify_repeats = 1
        {trust}
        [budget]
        max_nodes = {budget}
        """)
        + agents
    )
    return root


LLM = """
[agents]
mode = "llm"
model = "openai-compatible:fake-model"
max_retries = 0
timeout = 5
[agents.reviewer]
enabled = {reviewer}
"""


KNOB = """
[[knobs]]
name = "X"
type = "float"
low = -5
high = 5
file = "solver.py"
"""


class Model:
    """A scripted model whose faults a test switches on and off between runs."""

    def __init__(self, propose_fails: int = 0, reviewer_broken: bool = False) -> None:
        self.propose_fails, self.reviewer_broken = propose_fails, reviewer_broken
        self.coder_calls = 0

    def __call__(self, req: FakeRequest) -> FakeReply | str:
        if "research lead" in req.system:
            if self.propose_fails > 0:
                self.propose_fails -= 1
                return FakeReply(status=400, message="this model does not accept the request")
            return "HYPOTHESIS: move X towards zero\nPLAN:\n1. set X"
        if "review a change" in req.system:
            if self.reviewer_broken:
                return "I have looked at the change and it seems reasonable overall."
            return "VERDICT: accept\nKIND: none\nREASONS: fine"
        self.coder_calls += 1
        x = 3.0 / (self.coder_calls + 1)
        return f"=== FILE: solver.py ===\n```python\nX = {x}\n```\n"


def show(home: Path) -> dict:
    return json.loads(revtree_here(home, "show", "last", "--json", "--nodes").stdout)


def failed_run(home: Path, task: Path, url: str) -> tuple[dict, str]:
    out = drive_here(home, "run", str(task), "--base-url", url, check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    return show(home), out.stdout + out.stderr


# -- through the CLI --------------------------------------------------------------------
@pytest.mark.slow
def test_a_model_that_fails_every_proposal_stops_the_run_after_k_and_resume_completes(
    tmp_path: Path, home: Path
) -> None:
    task = make_task(tmp_path / "t", budget=8, agents=LLM.format(reviewer="false"))
    model = Model(propose_fails=100)
    with FakeLLMServer(model) as srv:
        s, printed = failed_run(home, task, srv.openai_url)
        run_id = s["run_id"]
        assert s["status"] == "failed", s["reason"]
        reason = s["reason"]
        assert "4 candidates in a row" in reason and "failed in propose with LLMError" in reason
        assert "the model's failure" in reason
        assert "does not accept the request" in reason  # an example message
        assert "`revtree resume" in reason  # the command that continues it
        failed = [n for n in s["nodes"] if n["id"] != 0]
        assert [n["status"] for n in failed] == ["failed"] * 4  # K candidates, not the budget
        assert "stopping: 4 candidates in a row" in printed  # the live log said it
        assert "LLMError" in revtree_here(home, "show", run_id).stdout  # and show says why
        # the streak starts anew on resume: one more failure does not stop it again
        model.propose_fails = 1
        drive_here(home, "resume", run_id, "--quiet")
    s = show(home)
    assert s["status"] == "completed", s["reason"]
    assert s["n_nodes"] == 8 and s["best_score"] < s["baseline_score"]


@pytest.mark.slow
def test_a_reviewer_that_never_gives_a_verdict_is_reminded_then_stops_the_run(
    tmp_path: Path, home: Path
) -> None:
    task = make_task(tmp_path / "t", budget=7, agents=LLM.format(reviewer="true"))
    model = Model(reviewer_broken=True)
    with FakeLLMServer(model) as srv:
        s, printed = failed_run(home, task, srv.openai_url)
        reviews = [r for r in srv.requests if "review a change" in r.system]
        assert len(reviews) == 8  # each of the 4 candidates: the review, then the reminder
        assert [REMINDER in r.user for r in reviews] == [False, True] * 4
        assert s["status"] == "failed"
        assert "failed in review with AnswerError: the reviewer's failure" in s["reason"]
        assert "even when reminded" in s["reason"]
        assert "failing  stopping: 4 candidates in a row" in printed
        failed = [n for n in s["nodes"] if n["id"] != 0]
        assert [n["status"] for n in failed] == ["failed"] * 4  # the reviewer's, not rejected
        assert all(n["error_kind"] == "review" for n in failed)
        model.reviewer_broken = False
        drive_here(home, "resume", "last", "--quiet")
    s = show(home)
    assert s["status"] == "completed", s["reason"]
    assert s["n_nodes"] == 7 and s["best_score"] < s["baseline_score"]


def test_a_reviewer_that_answers_when_reminded_accepts_the_candidate(
    tmp_path: Path, home: Path, store: Store
) -> None:
    asked: list[str] = []

    def model(req: FakeRequest) -> FakeReply | str:
        if "review a change" in req.system:
            asked.append(req.user)
            return "VERDICT: accept\nREASONS: fine" if REMINDER in req.user else "Seems fine."
        return Model()(req)

    task = make_task(tmp_path / "t", budget=2, agents=LLM.format(reviewer="true"))
    with FakeLLMServer(model) as srv:
        spec = load_task(task).with_overrides(agents={"base_url": srv.openai_url})
        run = create_run(store, spec, home)
        Orchestrator(store, run.id, home=home).drive()
    assert len(asked) == 2 and "Seems fine." in asked[1]  # the first answer is shown back
    assert store.node(run.id, 1).status is NodeStatus.SUCCEEDED


# -- the candidates' own failures never stop a run ---------------------------------------
@pytest.mark.parametrize("fail", ["crash", "hang"])
@pytest.mark.slow  # 8 s of --quick under -n 2 (issue 24)
def test_candidates_whose_code_crashes_or_times_out_never_stop_the_run(
    tmp_path: Path, home: Path, store: Store, fail: str
) -> None:
    task = make_task(
        tmp_path / "t",
        budget=5,
        agents=KNOB,
        env=f'FAIL = "{fail}"',
        timeout=1.5,
        trust="same_failures = 2",
    )
    run = create_run(store, load_task(task), home)
    Orchestrator(store, run.id, home=home).drive()
    assert store.get_run(run.id).status is RunStatus.COMPLETED
    nodes = store.nodes(run.id)[1:]
    assert len(nodes) == 4
    kinds = {n.error_kind for n in nodes}
    assert kinds == {"crash" if fail == "crash" else "timeout"}, [n.error for n in nodes]


# -- the rules ---------------------------------------------------------------------------
def test_failures_are_classified_by_type_and_step_never_by_message() -> None:
    model = foreign_failure(LLMError("fake-model: BadRequestError: 400"), "propose")
    assert model is not None and model.key == ("propose", "LLMError")
    assert "model's" in model.whose and "400" in model.example
    assert (f := foreign_failure(StreamStalled("stalled"), "code")) and f.cls == "StreamStalled"
    review = foreign_failure(AnswerError("reviewer: no verdict"), "review")
    assert review is not None and "reviewer's" in review.whose
    parser = foreign_failure(AnswerError("coder: empty answer"), "code")
    assert parser is not None and "parser's" in parser.whose
    unread = foreign_failure(EditUnreadable("no edits found"), "code")
    assert unread is not None and "parser's" in unread.whose
    sandbox = foreign_failure(SandboxError("image missing"), "evaluate")
    assert sandbox is not None and "sandbox's" in sandbox.whose
    # the candidate's: an edit that was read and does not apply, its command's timeout,
    # and whatever else (a bug is not the model's), whatever its message says
    for own in (
        EditError("the model's answer: LLMError"),
        EditRefused("SEARCH not found", "answer"),
        ValueError("LLMError: sandbox failed"),
    ):
        assert foreign_failure(own, "code") is None, own


def test_only_k_alike_in_a_row_stop_and_anything_else_ends_the_streak() -> None:
    def f(step: str, cls: str) -> Failure:
        return Failure(step, cls, "the model's", "boom")

    same = SameFailures(3)
    assert same.add(1, f("propose", "LLMError")) is None
    assert same.add(2, f("propose", "LLMError")) is None
    assert same.add(3, None) is None  # a crash, a timeout, a success, a rejection
    assert same.add(4, f("propose", "LLMError")) is None
    assert same.add(5, f("propose", "LLMError")) is None
    assert same.add(6, f("review", "LLMError")) is None  # another step
    assert same.add(7, f("review", "AnswerError")) is None  # another class
    assert same.add(8, f("review", "AnswerError")) is None
    reason = same.add(9, f("review", "AnswerError"))
    assert reason is not None and "nodes 7, 8, 9" in reason and "review with AnswerError" in reason
    mixed = SameFailures(2)
    for i in range(20):
        assert mixed.add(i, f("propose", ("LLMError", "AnswerError")[i % 2])) is None
    off = SameFailures(0)
    assert all(off.add(i, f("code", "LLMError")) is None for i in range(20))
