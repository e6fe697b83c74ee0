"""LLM-driven runs: the real openai/anthropic SDKs against a fake server on 127.0.0.1,
with real git, SQL and sandboxes behind them."""

from __future__ import annotations

import re
import textwrap
import warnings
from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer, FakeReply, FakeRequest
from revtree.memory import NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.orchestrator.commands.report import summarize
from revtree.tasks import load_task
from revtree.tasks.spec import TaskSpec

EVALUATOR = """\
import json, os, model
err = sum((model.predict(x) - (3 * x + 2)) ** 2 for x in range(10))
os.write(3, json.dumps({"err": err}).encode())
"""


def make_task(root: Path, *, budget: int = 6, extra: str = "", reviewer: bool = False) -> Path:
    root.mkdir(parents=True)
    (root / "helpers.py").write_text("def transform(x):\n    return x + 1\n")
    (root / "model.py").write_text(
        "from helpers import transform\n\nSCALE = 1.0\n\n\ndef predict(x):\n"
        "    return transform(x) * SCALE\n"
    )
    (root / "ev.py").write_text(EVALUATOR)
    # the reviewer is on by default in LLM mode: always say which one a test wants
    review = f"\n[agents.reviewer]\nenabled = {'true' if reviewer else 'false'}\n"
    (root / "task.toml").write_text(
        textwrap.dedent(f"""\
        name = "fit"
        goal = "Make predict(x) match the hidden target."
        editable = ["model.py", "helpers.py"]
        protected = ["ev.py"]
        [evaluate]
        command = "python ev.py"
        metric = "err"
        direction = "minimize"
        timeout = 20
        [search]
        policy = "greedy"
        num_drafts = 1
        [budget]
        max_nodes = {budget}
        {extra}
        [agents]
        mode = "llm"
        model = "openai-compatible:fake-model"
        max_retries = 0
        timeout = 5
        [agents.prices]
        fake-model = {{ input = 1000.0, output = 1000.0, cached_input = 100.0 }}
        """)
        + review
    )
    return root


def role(req: FakeRequest) -> str:
    if "research lead" in req.system:
        return "proposer"
    if "review a change" in req.system:
        return "reviewer"
    return "repair" if "could not be applied" in req.user else "coder"


class Scientist:
    """A scripted model that really improves the task, across both files."""

    def __init__(self, tamper_at: int | None = None) -> None:
        self.coder_calls, self.tamper_at = 0, tamper_at

    def __call__(self, req: FakeRequest) -> FakeReply | str:
        r = role(req)
        if r == "proposer":
            return "HYPOTHESIS: fit the slope in helpers and the offset in model\nPLAN:\n1. edit"
        if r == "reviewer":
            # a hard-coded copy of the hidden target: no static rule sees it, only a review
            bad = "3 * x + 2" in req.user
            verdict = "reject" if bad else "accept"
            return f"VERDICT: {verdict}\nREASONS: {'hard-codes the target' if bad else 'fine'}"
        self.coder_calls += 1
        if self.coder_calls == self.tamper_at:
            return (
                "=== FILE: model.py ===\n```python\nfrom helpers import transform\n"
                "def predict(x):\n    return 3 * x + 2\n```\n"
            )
        slope = 3 - 1 / (self.coder_calls + 1)
        return (
            f"=== FILE: helpers.py ===\n```python\ndef transform(x):\n    return x * {slope}\n```\n"
            f"=== FILE: model.py ===\n```python\nfrom helpers import transform\n\nSCALE = 1.0\n\n\n"
            f"def predict(x):\n    return transform(x) * SCALE + 2\n```\n"
        )


def drive(store: Store, home: Path, task: Path, url: str) -> str:
    spec = load_task(task).with_overrides(agents={"base_url": url})
    run = create_run(store, spec, home)
    Orchestrator(store, run.id, home=home).drive()
    return run.id


@pytest.mark.slow  # 11 s of --quick under -n 2 (issue 24)
def test_llm_run_improves_across_two_files_rejects_tampering_and_stops_at_the_dollar_cap(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "t", budget=100, reviewer=True, extra="max_usd = 60.0")
    with FakeLLMServer(Scientist(tamper_at=2), cache_min_tokens=64) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    run = store.get_run(run_id)
    s = summarize(store, run, with_nodes=True)
    assert run.status is RunStatus.COMPLETED and "max_usd=60" in (run.reason or "")
    assert s["llm"]["usd"] <= 60.0
    assert s["best_score"] < s["baseline_score"]
    from revtree.memory import GitStore
    from revtree.orchestrator import RunPaths

    git = GitStore(RunPaths(home, run_id).repo)
    best = store.node(run_id, s["best_node"])
    root = store.node(run_id, 0)
    assert git.changed_paths(root.commit or "", best.commit or "") == ["helpers.py", "model.py"]
    rejected = [n for n in store.nodes(run_id) if n.status is NodeStatus.REJECTED]
    assert len(rejected) == 1 and "hard-codes the target" in (rejected[0].error or "")
    assert rejected[0].review == {
        "accepted": False,
        "reasons": ["llm review: hard-codes the target"],  # the LLM's, no static flag
    }
    assert not store.evaluations(run_id, rejected[0].id)
    calls = store.llm_calls(run_id)
    assert {c.role for c in calls} == {"proposer", "coder", "reviewer"}
    assert all(c.node_id is not None and c.cost_usd > 0 for c in calls)
    # the stable prefix is cached by the provider after the first call
    assert sum(c.cached_tokens for c in calls) > 0
    lessons = [n.lesson for n in store.nodes(run_id) if n.status.is_finished()]
    assert all(lessons) and any("vs parent" in (x or "") for x in lessons)


def test_memory_reaches_the_proposer(tmp_path: Path, home: Path, store: Store) -> None:
    seen: list[str] = []

    def answer(req: FakeRequest) -> FakeReply | str:
        if role(req) == "proposer":
            seen.append(req.user)
        return Scientist()(req)

    with FakeLLMServer(answer) as srv:
        drive(store, home, make_task(tmp_path / "t", budget=4), srv.openai_url)
    assert len(seen) >= 3  # three candidates (one refused as a near twin proposes again)
    assert "Best so far" in seen[-1] and "scored" in seen[-1]
    # the second was proposed while the first was evaluated (parallel 1, tickets.Chain):
    # its prompt shows the first in flight, with its hypothesis and no score
    assert "In flight" not in seen[0]
    flying = seen[1].split("In flight", 1)[1].split("\n\n", 1)[0]
    assert "node 1 (draft of node 0): fit the slope" in flying and "no score yet" in flying


BAD = {
    "empty text": (FakeReply(""), "empty answer"),
    "no code block": ("Sure, I would change the slope.", "no edits found"),
    "malformed blocks": (
        "model.py\n<<<<<<< SEARCH\nSCALE = 1.0\n>>>>>>> REPLACE\n",
        "malformed edit blocks",
    ),
    "edit to a protected file": (
        "ev.py\n<<<<<<< SEARCH\nimport json, model\n=======\nimport json\n>>>>>>> REPLACE\n",
        "'ev.py' is not editable",
    ),
    "cut off at max tokens": (
        FakeReply("model.py\n<<<<<<< SEARCH\nSC", finish_reason="length"),
        "cut off at max_tokens",
    ),
    "http 500": (FakeReply(status=500), "InternalServerError"),
    "hung connection": (FakeReply("late", delay=3.0), "APITimeoutError"),
    "invalid json": (FakeReply(raw=b"{not json"), "not valid JSON"),
    "wrong shape": (
        FakeReply(raw=b'{"id": "x", "object": "chat.completion", "choices": []}'),
        "has no choices",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.slow  # 7 s of --quick under -n 2 (issue 24)
def test_bad_model_output_is_a_recorded_specific_failure(
    tmp_path: Path, home: Path, store: Store, case: str
) -> None:
    bad, expected = BAD[case]

    def answer(req: FakeRequest) -> FakeReply | str:
        return Scientist()(req) if role(req) == "proposer" else bad

    extra = "[agents.coder]\nmax_tokens = 64\n" if "cut off" in case else ""
    task = make_task(tmp_path / "t", budget=2)
    if case == "hung connection":
        (task / "task.toml").write_text(
            (task / "task.toml").read_text().replace("timeout = 5", "timeout = 0.5")
        )
    with (task / "task.toml").open("a") as f:
        f.write(extra)
    with FakeLLMServer(answer) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    node = store.node(run_id, 1)
    assert store.get_run(run_id).status is RunStatus.COMPLETED  # the run went on
    assert node.status is NodeStatus.FAILED
    assert expected in (node.error or ""), node.error
    assert node.error_kind == "code"  # the step that failed is named


def test_rate_limit_is_retried_honouring_retry_after(
    tmp_path: Path, home: Path, store: Store
) -> None:
    state = {"n": 0}

    def answer(req: FakeRequest) -> FakeReply | str:
        state["n"] += 1
        if state["n"] == 1:
            return FakeReply(status=429, headers={"retry-after": "0.3"})
        return Scientist()(req)

    task = make_task(tmp_path / "t", budget=2)
    (task / "task.toml").write_text(
        (task / "task.toml").read_text().replace("max_retries = 0", "max_retries = 2")
    )
    with FakeLLMServer(answer) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    assert store.node(run_id, 1).status is NodeStatus.SUCCEEDED
    assert state["n"] >= 3  # 429, then the proposer again, then the coder
    calls = store.llm_calls(run_id)
    assert calls[0].role == "proposer" and calls[0].ok and calls[0].latency >= 0.3


def test_anthropic_sdk_with_cache_control(tmp_path: Path, home: Path, store: Store) -> None:
    task = make_task(tmp_path / "t", budget=3)
    text = (
        (task / "task.toml")
        .read_text()
        .replace("openai-compatible:fake-model", "anthropic:claude-fake")
        .replace("fake-model = {", "claude-fake = {")
    )
    (task / "task.toml").write_text(text)
    with FakeLLMServer(Scientist(), cache_min_tokens=64) as srv:
        run_id = drive(store, home, task, srv.anthropic_url)
        bodies = [r.body for r in srv.requests]
    assert all(r.api == "anthropic" for r in srv.requests)
    marked = [b for b in bodies if "cache_control" in b["system"][0]]
    assert marked and len(marked) == len(bodies)
    assert store.node(run_id, 1).status is NodeStatus.SUCCEEDED
    calls = store.llm_calls(run_id)
    assert any(c.cached_tokens > 0 for c in calls) and all(c.model == "claude-fake" for c in calls)


@pytest.mark.slow  # 7 s of --quick under -n 2 (issue 24)
def test_budget_max_tokens_stops_before_exceeding(tmp_path: Path, home: Path, store: Store) -> None:
    task = make_task(tmp_path / "t", budget=100, extra="max_tokens = 30000")
    with FakeLLMServer(Scientist()) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    run = store.get_run(run_id)
    assert "max_tokens=30000" in (run.reason or "")
    used = sum(c.input_tokens + c.output_tokens for c in store.llm_calls(run_id))
    assert 0 < used <= 30000
    assert re.search(r"\d+ used", run.reason or "")


def test_analyst_reads_failures_and_a_task_can_override_a_prompt(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "t", budget=2)
    (task / "my_proposer.md").write_text("CUSTOM RULES $metric\n=== USER ===\nparent $parent_id")
    with (task / "task.toml").open("a") as f:
        f.write('[agents.analyst]\nenabled = true\n[agents.proposer]\nprompt = "my_proposer.md"\n')

    def answer(req: FakeRequest) -> FakeReply | str:
        if "analyse one evaluation" in req.system:
            return "It crashed because predict divides by zero; guard the division."
        if "CUSTOM RULES err" in req.system:
            assert req.user.endswith("parent 0")
            return "HYPOTHESIS: divide\nPLAN: go"
        return "=== FILE: model.py ===\n```python\ndef predict(x):\n    return 1 / 0\n```\n"

    with FakeLLMServer(answer) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    node = store.node(run_id, 1)
    assert node.status is NodeStatus.FAILED and node.error_kind == "crash"
    assert "analysis: It crashed because predict divides by zero" in (node.lesson or "")
    assert {c.role for c in store.llm_calls(run_id)} == {"proposer", "coder", "analyst"}


def test_weighted_ensemble_picks_members_by_weight() -> None:
    from revtree.agents.llm import Ensemble, Prompt, ScriptedLLM

    cheap, strong = ScriptedLLM(["a"], model="cheap"), ScriptedLLM(["b"], model="strong")
    ens = Ensemble([cheap, strong], [3.0, 1.0], seed=1)
    picks = [
        ens.complete(Prompt("s", "p", "u"), max_tokens=10, temperature=0).text for _ in range(400)
    ]
    assert 0.65 < picks.count("a") / 400 < 0.85
    first = [Ensemble([cheap, strong], [3.0, 1.0], seed=1).pick().model for _ in range(1)]
    assert first == [Ensemble([cheap, strong], [3.0, 1.0], seed=1).pick().model]


@pytest.mark.slow
def test_cli_run_with_model_and_base_url(tmp_path: Path, home: Path) -> None:
    from .conftest import drive_here, revtree_here

    task = make_task(tmp_path / "t", budget=3)
    text = (task / "task.toml").read_text()
    (task / "task.toml").write_text(
        text.split("[agents]")[0] + "[agents.prices]\n"
        "fake-model = { input = 1000.0, output = 1000.0 }\n"
    )
    with FakeLLMServer(Scientist()) as srv:
        out = drive_here(
            home,
            "run",
            str(task),
            "--model",
            "openai-compatible:fake-model",
            "--base-url",
            srv.openai_url,
            "--budget-usd",
            "100",
        ).stdout
    assert "LLM" in out and "calls" in out and "$" in out
    shown = revtree_here(home, "show", "last", "--json", "--nodes").stdout
    import json

    data = json.loads(shown)
    assert data["llm"]["calls"] >= 4 and data["llm"]["by_role"]["coder"]["usd"] > 0
    assert data["nodes"][1]["usd"] > 0 and data["best_score"] < data["baseline_score"]


def test_agentic_policy_steers_and_falls_back_to_greedy(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "t", budget=6)
    text = (task / "task.toml").read_text().replace('policy = "greedy"', 'policy = "agentic"')
    (task / "task.toml").write_text(text)
    scientist, answers = (
        Scientist(),
        iter(
            [
                "ACTION: expand\nNODE: 0\nOPERATOR: improve\nREASON: start from the baseline",
                "ACTION: verify\nNODE: 1\nREASON: check the gain",
                "I think we should try harder.",
                "ACTION: expand\nNODE: 99\nOPERATOR: improve\nREASON: ?",
            ]
        ),
    )

    def answer(req: FakeRequest) -> FakeReply | str:
        if "steer an automated research search" in req.system:
            assert "Budget spent" in req.user and "Best nodes" in req.user
            return next(answers, "ACTION: restart\nREASON: new idea")
        return scientist(req)

    with FakeLLMServer(answer) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    events = [e.message for e in store.events_since(run_id) if e.kind == "select"]
    assert any("agentic: improve node 0" in m for m in events)
    assert any("agentic fell back to greedy: no usable ACTION" in m for m in events)
    assert any("node 99 does not exist" in m for m in events)
    assert any("agentic: restart from the root" in m for m in events)
    assert store.node(run_id, 1).n_evals >= 3  # verified with repeats
    assert "policy" in {c.role for c in store.llm_calls(run_id)}
    assert store.get_run(run_id).status is RunStatus.COMPLETED
    assert store.get_run(run_id).policy_state["fallbacks"] >= 2


@pytest.mark.slow  # a whole run: 3 s or more on 2 loaded cores
def test_edits_in_every_dialect_land_through_the_openai_sdk(
    tmp_path: Path, home: Path, store: Store
) -> None:
    from revtree.agents.llm.fake_server import DIALECTS, DialectCycle, current_file

    task = make_task(tmp_path / "t", budget=17)
    text = (task / "task.toml").read_text()
    (task / "task.toml").write_text(text.replace('["model.py", "helpers.py"]', '["model.py"]'))
    cycle, coder_calls = DialectCycle(), []

    def answer(req: FakeRequest) -> FakeReply | str:
        if role(req) == "proposer":
            return "**Hypothesis:** scale the prediction up\n\n**Plan:**\n1. raise SCALE"
        if role(req) == "reviewer":
            return "Verdict: accept\nReasons: a plain change"
        coder_calls.append(role(req))
        model = current_file(req, "model.py") or ""
        old = next(ln for ln in model.splitlines() if ln.startswith("SCALE = "))
        new = f"SCALE = {float(old.split('=')[1]) + 0.25 + len(coder_calls) / 1000:.4f}"
        return cycle.answer("model.py", model, old, new)

    with FakeLLMServer(answer) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    candidates = [n for n in store.nodes(run_id) if n.id > 0]
    landed = [n for n in candidates if n.error_kind not in ("code", "propose")]
    assert len(candidates) == 16 and set(cycle.used) == set(DIALECTS)
    assert len(landed) / len(candidates) >= 0.9, [n.error for n in candidates]
    assert coder_calls.count("repair") == 0, cycle.used  # every dialect landed at once
    assert all(
        (n.proposal or {}).get("hypothesis") == "scale the prediction up" for n in candidates
    )


def make_openevolve_folder(root: Path) -> Path:
    """A tiny OpenEvolve-format folder: maximise -(A - 3)^2 inside the EVOLVE-BLOCK."""
    root.mkdir(parents=True)
    (root / "initial_program.py").write_text(
        "# EVOLVE-BLOCK-START\nA = 0.0\n# EVOLVE-BLOCK-END\n\n\ndef value():\n    return A\n"
    )
    (root / "evaluator.py").write_text(
        "import importlib.util\n\n\ndef evaluate(program_path):\n"
        "    spec = importlib.util.spec_from_file_location('p', program_path)\n"
        "    p = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(p)\n"
        "    return {'combined_score': -((p.value() - 3.0) ** 2)}\n"
    )
    return root


def openevolve_spec(folder: Path, url: str, max_nodes: int, **agents: object) -> TaskSpec:
    """An OpenEvolve folder loaded (its mapping's warnings quiet) for a run at parallel 1
    in the local sandbox, the fake model at ``url`` answering every role, no reviewer;
    ``agents``: more ``[agents]`` keys."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        spec = load_task(folder)
    return spec.with_overrides(
        budget={"max_nodes": max_nodes},
        search={"parallel": 1},
        sandbox={"backend": "local"},
        agents={
            "mode": "llm",
            "model": "openai-compatible:fake-model",
            "base_url": url,
            "max_retries": 0,
            "reviewer": {"enabled": False},
            **agents,
        },
    )


class OneCallModel:
    """Answers as OpenEvolve's model does: a line of prose, then the diff, in one call."""

    def __init__(self) -> None:
        self.a = 0.0

    def __call__(self, req: FakeRequest) -> str:
        assert "HYPOTHESIS" in req.system and "research lead" not in req.system
        self.a += 1.0
        return (
            f"HYPOTHESIS: set A to {self.a:g}, closer to the optimum\n\n"
            "=== FILE: initial_program.py ===\n```python\n# EVOLVE-BLOCK-START\n"
            f"A = {self.a!r}\n# EVOLVE-BLOCK-END\n\n\ndef value():\n    return A\n```\n"
        )


@pytest.mark.parametrize("how", ["calls", "proposer disabled"])
def test_one_call_mode_on_an_openevolve_folder_makes_one_call_per_candidate(
    tmp_path: Path, home: Path, store: Store, how: str
) -> None:
    folder = make_openevolve_folder(tmp_path / "oe")
    one = {"calls": "one"} if how == "calls" else {"proposer": {"enabled": False}}
    model = OneCallModel()
    with FakeLLMServer(model) as srv:
        spec = openevolve_spec(folder, srv.openai_url, 5, **one)
        run = create_run(store, spec, home)
        Orchestrator(store, run.id, home=home).drive()
        n_requests = len(srv.requests)
    assert spec.agents.one_call
    candidates = [n for n in store.nodes(run.id) if n.parent_id is not None]
    assert candidates and all(n.status is NodeStatus.SUCCEEDED for n in candidates), [
        (n.status, n.error) for n in candidates
    ] + [e.message for e in store.events_since(run.id)]
    print(f"one-call mode: {n_requests / len(candidates):.2f} calls per candidate")
    assert n_requests / len(candidates) == 1.00
    assert {c.role for c in store.llm_calls(run.id)} == {"coder"}
    assert candidates[0].proposal is not None
    assert candidates[0].proposal["hypothesis"] == "set A to 1, closer to the optimum"
    assert store.get_run(run.id).status is RunStatus.COMPLETED


def test_disabling_a_role_is_validated_never_a_keyerror(tmp_path: Path) -> None:
    from revtree.errors import TaskSpecError

    spec = load_task(make_task(tmp_path / "t"))
    assert not spec.agents.one_call
    assert spec.with_overrides(agents={"proposer": {"enabled": False}}).agents.one_call
    with pytest.raises(TaskSpecError, match=r"the coder .* cannot be disabled"):
        spec.with_overrides(agents={"coder": {"enabled": False}})
    with pytest.raises(TaskSpecError, match=r"enable \[agents\.proposer\] or set agents\.calls"):
        spec.with_overrides(agents={"calls": "two", "proposer": {"enabled": False}})


# -- tool-using coders (issue 12) ---------------------------------------------------------
class ToolUser:
    """A scripted model on the synthetic 300-file repository whose coder must find the
    smoothing helper by ``search_code`` (its prompt no longer carries retrieved files),
    ``read_file`` it, and only then edit ``predict(x)`` with what it read. The first
    candidate tries to read the evaluator first; the second never finishes."""

    def __init__(self) -> None:
        self.proposals = 0

    def __call__(self, req: FakeRequest) -> FakeReply:
        from revtree.agents.llm.fake_server import tool_results

        if "propose" in req.tools:
            self.proposals += 1
            hyp = "use the smoothing helper" if self.proposals == 1 else "keep looking"
            return FakeReply(tool_calls=[("propose", {"hypothesis": hyp, "plan": "1. edit"})])
        assert "search_code" in req.tools, req.tools
        seen = [c for c in tool_results(req) if not c[2].startswith("refused")]
        if "Hypothesis: keep looking" in req.user:
            return FakeReply(tool_calls=[("list_files", {"glob": f"pkg_0{len(seen)}/*"})])
        if not tool_results(req):
            assert "--- lib/signal/smoothing.py" not in req.system + req.user
            return FakeReply(
                tool_calls=[("read_file", {"path": "evaluate.py", "start": 1, "end": 0})]
            )
        if not seen:
            query = {"query": "exponential moving average smoothing", "mode": "semantic"}
            return FakeReply(tool_calls=[("search_code", query)])
        path = next(ln for ln in seen[0][2].splitlines() if ln.startswith("1. ")).split()[1]
        if len(seen) == 1:
            return FakeReply(tool_calls=[("read_file", {"path": path, "start": 1, "end": 10})])
        name = seen[1][2].split("def ", 1)[1].split("(", 1)[0]
        module = path.removesuffix(".py").replace("/", ".")
        new = f"    from {module} import {name}\n\n    return x * 3.0 + 2 + 0 * len({name}(x))"
        edit = {"path": "zz_model.py", "search": "    return x * 1.0", "replace": new}
        return FakeReply(tool_calls=[("edit_file", edit), ("done", {"summary": "fit"})])


@pytest.mark.slow  # 6 s of --quick: a whole run (issue 24)
def test_a_tool_using_coder_searches_reads_and_edits_in_a_real_run(
    tmp_path: Path, home: Path, store: Store
) -> None:
    from revtree.agents.llm.base import estimate_tokens
    from revtree.orchestrator.commands.report import transcripts
    from tests.agents.test_context import SECRET, write_task

    task = write_task(tmp_path / "t", nodes=3)
    with FakeLLMServer(ToolUser()) as srv:
        spec = load_task(task).with_overrides(
            agents={"base_url": srv.openai_url, "model": "openai:gpt-fake", "max_steps": 4}
        )
        run = create_run(store, spec, home)
        Orchestrator(store, run.id, home=home).drive()
    assert store.get_run(run.id).status is RunStatus.COMPLETED
    one, two = store.node(run.id, 1), store.node(run.id, 2)
    assert one.status is NodeStatus.SUCCEEDED and one.score is not None and one.score < 1e-9
    assert two.status is NodeStatus.FAILED and two.error_kind == "code"
    assert "used its 4 steps (agents.max_steps)" in (two.error or "")
    # the transcript: one metered call per step, each tool call in the reply, its result
    # in the next call's stored prompt
    calls = [c for c in transcripts(store, run.id, 1)["calls"] if c["role"] == "coder"]
    replies = [c["response"] or "" for c in calls]
    assert [next(t for t in TOOLS if f'"{t}"' in r) for r in replies] == [
        "read_file",
        "search_code",
        "read_file",
        "edit_file",
    ]
    assert "protected evaluation data" in calls[1]["user"]
    assert "1. lib/signal/smoothing.py" in calls[2]["user"]
    assert "def exponential_moving_average(" in calls[3]["user"]
    assert all(c["input_tokens"] > 0 for c in calls)
    events = [e for e in store.events_since(run.id) if e.kind == "tools"]
    assert events[0].node_id == 1 and (events[0].data or {})["misuse"] == [
        "read_file: 'evaluate.py' is protected evaluation data: it is never shown"
    ]
    assert events[1].node_id == 2 and (events[1].data or {})["steps"] == 4
    prompts = [r.system + "\n" + r.user for r in srv.requests]
    assert all(SECRET not in p for p in prompts)
    coder = [p for r, p in zip(srv.requests, prompts, strict=True) if "search_code" in r.tools]
    assert len(coder) == 8
    tokens = estimate_tokens(prompts[0]) + sum(estimate_tokens(p) for p in coder[:4])
    assert tokens < 43_577  # whole-repository prompting, per candidate (benchmarks/context.py)


TOOLS = ("search_code", "read_file", "list_files", "edit_file", "done")
