"""Structured replies: tool calls and json_schema through the real openai and anthropic
SDKs against the fake server on 127.0.0.1, driving real runs; typed edits refused
exactly like text ones; the fallback to text when a server refuses the structure."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from revtree.agents.base import Proposal, Refusal
from revtree.agents.llm import ScriptedLLM
from revtree.agents.llm.base import Structure, ToolCall
from revtree.agents.llm.fake_server import (
    FakeLLMServer,
    FakeReply,
    FakeRequest,
    StreamingFakeLLMServer,
    current_file,
)
from revtree.agents.llm.meter import unpack
from revtree.agents.llm.scripted import Answer
from revtree.agents.roles import Context, LLMCoder
from revtree.agents.structured import (
    EDIT_FILE,
    PROPOSE,
    WRITE_FILE,
    Structured,
    structured_kind,
)
from revtree.errors import EditError, EditRefused
from revtree.memory import NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task
from tests.orchestrator.test_llm_run import Scientist, make_task, role


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("REVTREE_HOME", str(h))
    monkeypatch.delenv("REVTREE_DB", raising=False)
    return h


@pytest.fixture
def store(home: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{home / 'revtree.db'}")
    yield s
    s.close()


def task_for(
    root: Path, model: str, *, budget: int = 3, extra: str = "", review: bool = True
) -> Path:
    task = make_task(root, budget=budget, reviewer=review)
    name = model.split(":", 1)[1]
    text = (task / "task.toml").read_text()
    text = text.replace("openai-compatible:fake-model", model).replace(
        "fake-model = {", f"{name} = {{"
    )
    (task / "task.toml").write_text(text.replace("[agents]\n", f"[agents]\n{extra}", 1))
    return task


def drive(store: Store, home: Path, task: Path, url: str, **agents: Any) -> str:
    spec = load_task(task).with_overrides(agents={"base_url": url, **agents})
    run = create_run(store, spec, home)
    Orchestrator(store, run.id, home=home).drive()
    return run.id


def answer(req: FakeRequest, fields: dict[str, Any]) -> FakeReply:
    """``fields`` (tool name -> arguments, or a list of them) in the form the request
    asks for: a JSON object of its schema, or tool calls."""
    if req.schema is not None:
        keys = req.schema["properties"]
        return FakeReply(json.dumps({k: fields.get(k, []) for k in keys}))
    assert req.tools, "a structured request was expected"
    calls = [
        (name, args)
        for name, value in fields.items()
        for args in (value if isinstance(value, list) else [value])
    ]
    return FakeReply(tool_calls=calls)


class Typed:
    """A model that really improves the fit task, answering only in typed calls: the
    proposer's ``propose``, the coder's ``write_file`` and ``edit_file``, the reviewer's
    ``verdict``."""

    def __init__(self) -> None:
        self.coder_calls = 0

    def __call__(self, req: FakeRequest) -> FakeReply:
        r = role(req)
        if r == "proposer":
            plan = "1. scale in helpers\n2. offset in model"
            return answer(
                req, {"propose": {"hypothesis": "typed: fit slope and offset", "plan": plan}}
            )
        if r == "reviewer":
            return answer(
                req, {"verdict": {"verdict": "accept", "kind": "none", "reasons": "typed ok"}}
            )
        self.coder_calls += 1
        slope = 3 - 1 / (self.coder_calls + 1)
        edits: dict[str, Any] = {
            "write_file": [
                {"path": "helpers.py", "content": f"def transform(x):\n    return x * {slope}\n"}
            ]
        }
        if "SCALE + 2" not in (current_file(req, "model.py") or ""):
            edits["edit_file"] = [
                {
                    "path": "model.py",
                    "search": "    return transform(x) * SCALE\n",
                    "replace": "    return transform(x) * SCALE + 2\n",
                }
            ]
        return answer(req, edits)


def assert_landed(store: Store, run_id: str) -> None:
    run = store.get_run(run_id)
    nodes = store.nodes(run_id)[1:]
    assert run.status is RunStatus.COMPLETED and nodes
    assert all(n.status is NodeStatus.SUCCEEDED for n in nodes), [n.error for n in nodes]
    assert all(
        n.proposal and n.proposal["hypothesis"] == "typed: fit slope and offset" for n in nodes
    )
    assert all(n.review == {"accepted": True, "reasons": ["llm review: typed ok"]} for n in nodes)
    root = store.node(run_id, 0)
    assert min(n.score or 1e9 for n in nodes) < (root.score or 0)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_tool_calls_drive_a_run(
    tmp_path: Path, home: Path, store: Store, stream: bool
) -> None:
    task = task_for(tmp_path / "t", "openai:gpt-fake")  # auto: tools for openai:
    server = StreamingFakeLLMServer if stream else FakeLLMServer
    with server(Typed()) as srv:
        # the one-call edit path: the tool-using coder loop has its own tests (test_tools)
        run_id = drive(store, home, task, srv.openai_url, stream=stream, coder={"tools": "off"})
    assert_landed(store, run_id)
    bodies = [r.body for r in srv.requests]
    assert all(bool(b.get("stream")) is stream and "response_format" not in b for b in bodies)
    by_role = {role(r): r.body for r in srv.requests}
    assert by_role["proposer"]["tool_choice"] == {
        "type": "function",
        "function": {"name": "propose"},
    }
    assert by_role["coder"]["tool_choice"] == "required"
    assert [t["function"]["name"] for t in by_role["coder"]["tools"]] == ["edit_file", "write_file"]
    assert "edit_file(path, search, replace)" in by_role["coder"]["messages"][0]["content"]
    # the transcript keeps the typed calls as JSON text
    coder = next(c for c in store.llm_calls(run_id) if c.role == "coder")
    assert '"tool_calls"' in (unpack(coder.response) or "") and '"write_file"' in (
        unpack(coder.response) or ""
    )


def test_openai_json_schema_drives_a_run(tmp_path: Path, home: Path, store: Store) -> None:
    task = task_for(tmp_path / "t", "openai:gpt-fake", extra='structured = "json_schema"\n')
    with FakeLLMServer(Typed()) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    assert_landed(store, run_id)
    assert all("tools" not in r.body for r in srv.requests)
    coder = next(r for r in srv.requests if role(r) == "coder")
    fmt = coder.body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert coder.schema is not None and set(coder.schema["required"]) == {"edit_file", "write_file"}
    assert coder.schema["properties"]["edit_file"]["items"]["additionalProperties"] is False


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_use_drives_a_run(
    tmp_path: Path, home: Path, store: Store, stream: bool
) -> None:
    task = task_for(tmp_path / "t", "anthropic:claude-fake")
    server = StreamingFakeLLMServer if stream else FakeLLMServer
    with server(Typed()) as srv:
        run_id = drive(store, home, task, srv.anthropic_url, stream=stream)
    assert_landed(store, run_id)
    assert all(r.api == "anthropic" for r in srv.requests)
    by_role = {role(r): r.body for r in srv.requests}
    assert by_role["reviewer"]["tool_choice"] == {"type": "tool", "name": "verdict"}
    assert by_role["coder"]["tool_choice"] == {"type": "any"}
    assert "input_schema" in by_role["coder"]["tools"][0]


def test_a_typed_edit_out_of_scope_fails_the_node_like_a_text_one(
    tmp_path: Path, home: Path, store: Store
) -> None:
    def tamper(req: FakeRequest) -> FakeReply:
        if role(req) == "proposer":
            return Typed()(req)
        return answer(req, {"write_file": [{"path": "ev.py", "content": "print(0)\n"}]})

    task = task_for(tmp_path / "t", "openai:gpt-fake", budget=2)
    with FakeLLMServer(tamper) as srv:
        run_id = drive(store, home, task, srv.openai_url, coder={"tools": "off"})
    node = store.node(run_id, 1)
    assert node.status is NodeStatus.FAILED and node.error_kind == "code"
    assert "'ev.py' is not editable" in (node.error or "") and "after one repair round" in (
        node.error or ""
    )
    assert [role(r) for r in srv.requests] == ["proposer", "coder", "repair"]
    assert not store.evaluations(run_id, 1)


FILES = {
    "model.py": b"# EVOLVE-BLOCK-START\nSCALE = 1.0\n# EVOLVE-BLOCK-END\nOFFSET = 0\n",
    "helpers.py": b"def transform(x):\n    return x + 1\n",
    "ev.py": b"import json\n",
}
OUT_OF_SCOPE: dict[str, tuple[ToolCall, str]] = {  # an edit typed, and as text
    "not editable": (
        ToolCall("edit_file", {"path": "ev.py", "search": "import json\n", "replace": "\n"}),
        "ev.py\n<<<<<<< SEARCH\nimport json\n=======\n\n>>>>>>> REPLACE\n",
    ),
    "outside the block": (
        ToolCall(
            "edit_file", {"path": "model.py", "search": "OFFSET = 0\n", "replace": "OFFSET = 2\n"}
        ),
        "model.py\n<<<<<<< SEARCH\nOFFSET = 0\n=======\nOFFSET = 2\n>>>>>>> REPLACE\n",
    ),
    "rewrite outside the block": (
        ToolCall("write_file", {"path": "model.py", "content": "SCALE = 3.0\n"}),
        "=== FILE: model.py ===\n```python\nSCALE = 3.0\n```\n",
    ),
    "escaping path": (
        ToolCall("write_file", {"path": "../x.py", "content": "x = 1\n"}),
        "=== FILE: ../x.py ===\n```python\nx = 1\n```\n",
    ),
}


def coder(tmp_path: Path, llm: ScriptedLLM) -> tuple[LLMCoder, Context]:
    spec = load_task(make_task(tmp_path / "t"))
    ctx = Context(1, "improve", 0, "1.0", "prefix", "(none)", "-", "-", files=FILES)
    return LLMCoder("coder", llm, spec, 1024, 0.0, structured=Structured("tools")), ctx


def code_with_repair(c: LLMCoder, ctx: Context, proposal: Proposal) -> dict[str, bytes | None]:
    """The coder's answer and, when it is refused, the one repair round the pipeline's
    ``code -> code`` edge gives it."""
    try:
        return c.code(ctx, proposal)
    except EditRefused as e:
        return c.repair(ctx, proposal, Refusal(str(e), e.answer))


@pytest.mark.parametrize("case", sorted(OUT_OF_SCOPE))
def test_typed_and_text_edits_are_refused_alike(tmp_path: Path, case: str) -> None:
    typed, text = OUT_OF_SCOPE[case]
    replies: tuple[Answer, Answer] = ([typed], text)
    errors = []
    for i, reply in enumerate(replies):
        llm = ScriptedLLM([reply])
        c, ctx = coder(tmp_path / str(i), llm)
        with pytest.raises(EditError) as refused:
            code_with_repair(c, ctx, Proposal("h"))
        errors.append(str(refused.value))
        assert llm.prompts[0].structure is not None
    assert errors[0] == errors[1]
    assert "(after one repair round; first error:" in errors[0]


def test_typed_edits_land_inside_the_block_and_bad_calls_get_the_repair_round(
    tmp_path: Path,
) -> None:
    good = ToolCall(
        "edit_file", {"path": "model.py", "search": "SCALE = 1.0\n", "replace": "SCALE = 2.0\n"}
    )
    llm = ScriptedLLM([[ToolCall("edit_file", {"path": "model.py"})], [good]])
    c, ctx = coder(tmp_path, llm)
    changes = code_with_repair(c, ctx, Proposal("h"))
    assert changes == {"model.py": FILES["model.py"].replace(b"1.0", b"2.0")}
    repair = llm.prompts[1]
    assert "the argument 'search' is missing" in repair.user and repair.structure is not None
    assert '"tool_calls"' in repair.user  # the previous answer, shown as its JSON


@pytest.mark.slow  # a whole run, 3.3 s (issue 24)
def test_a_server_that_refuses_tools_gets_text_for_the_rest_of_the_run(
    tmp_path: Path, home: Path, store: Store
) -> None:
    scientist = Scientist()

    def local(req: FakeRequest) -> FakeReply | str:
        if req.tools or req.schema:
            return FakeReply(status=400, message="tools are not supported by this server")
        return scientist(req)

    task = task_for(
        tmp_path / "t", "openai:gpt-fake", budget=4, extra='structured = "tools"\n', review=False
    )
    with FakeLLMServer(local) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    nodes = store.nodes(run_id)[1:]
    assert len(nodes) == 3 and all(n.status is NodeStatus.SUCCEEDED for n in nodes)
    assert [bool(r.tools) for r in srv.requests][:2] == [True, False]  # once, then text
    assert sum(bool(r.tools) for r in srv.requests) == 1
    warnings = [e for e in store.events_since(run_id) if "structured answers refused" in e.message]
    assert len(warnings) == 1 and warnings[0].kind == "warning"
    assert "tools are not supported" in warnings[0].message
    refused = store.llm_calls(run_id)[0]
    assert not refused.ok and "refused the structured request" in (refused.error or "")


def test_auto_is_text_for_local_servers_and_a_role_can_opt_in(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "t", budget=2)  # openai-compatible: text by default
    with (task / "task.toml").open("a") as f:
        f.write('[agents.coder]\nstructured = "tools"\n')
    with FakeLLMServer(Scientist()) as srv:  # writes prose even when offered tools
        run_id = drive(store, home, task, srv.openai_url)
    assert store.node(run_id, 1).status is NodeStatus.SUCCEEDED
    offered = {role(r): bool(r.tools) for r in srv.requests}
    assert offered == {"proposer": False, "coder": True}


def test_structured_kind_and_json_answers() -> None:
    assert structured_kind("auto", ["openai", "anthropic"]) == "tools"
    assert structured_kind("auto", ["openai", "openai-compatible"]) == "off"
    assert structured_kind("json_schema", ["openai-compatible"]) == "json_schema"
    s = Structure("json_schema", "coder", (PROPOSE, EDIT_FILE, WRITE_FILE))
    assert s.schema()["required"] == ["propose", "edit_file", "write_file"]
    both = {"propose": {"hypothesis": "h", "plan": ""}, "edit_file": [{"path": "a"}]}
    calls = s.decode(json.dumps({**both, "write_file": []}))
    assert [c.name for c in calls] == ["propose", "edit_file"]
    assert s.decode("not json") == () and s.decode("[1]") == ()


def test_one_call_mode_takes_the_hypothesis_from_the_propose_call(
    tmp_path: Path, home: Path, store: Store
) -> None:
    typed = Typed()

    def one_call(req: FakeRequest) -> FakeReply:
        assert req.tools == ["propose", "edit_file", "write_file"]
        reply = typed(req)
        hypothesis = {"hypothesis": "one call: fit slope and offset", "plan": ""}
        return FakeReply(tool_calls=[("propose", hypothesis), *reply.tool_calls])

    task = task_for(tmp_path / "t", "openai:gpt-fake", budget=3, review=False)
    with (task / "task.toml").open("a") as f:
        f.write("[agents.proposer]\nenabled = false\n")
    with FakeLLMServer(one_call) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    nodes = store.nodes(run_id)[1:]
    assert len(srv.requests) == len(nodes) == 2
    assert all(n.status is NodeStatus.SUCCEEDED for n in nodes), [n.error for n in nodes]
    assert all(n.proposal and n.proposal["hypothesis"].startswith("one call") for n in nodes)
