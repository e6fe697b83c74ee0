"""Tool-using coders: the ``ToolBox`` over the synthetic 300-file repository (search,
read, list, run in a real local sandbox), every kind of misuse refused with a message
the model reads, and the ``ToolCoder`` loop driven by a scripted model."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from revtree.agents.base import Proposal
from revtree.agents.llm import ScriptedLLM
from revtree.agents.llm.base import Prompt, ToolCall
from revtree.agents.llm.fake_server import FakeRequest, tool_results
from revtree.agents.retrieval import Index
from revtree.agents.roles import Context, LLMCoder
from revtree.agents.structured import Structured
from revtree.agents.toolcoder import StepBudgetExceeded, ToolCoder
from revtree.agents.tools import ToolBox, archive, hidden_paths
from revtree.errors import EditError
from revtree.sandboxes.base import ExecRequest, ExecResult, Limits
from revtree.sandboxes.local import LocalSandbox
from revtree.tasks.spec import TaskSpec
from tests.agents.test_retrieval import as_bytes, spec_for, synthetic_repo

SPEC = spec_for()


@pytest.fixture(scope="module")
def repo() -> dict[str, bytes]:
    return as_bytes(synthetic_repo())


@pytest.fixture(scope="module")
def index(repo: dict[str, bytes]) -> Index:
    return Index({p: d for p, d in repo.items() if p != "evaluate.py"})


def local_runner(tmp: Path) -> object:
    sandbox = LocalSandbox(tmp)

    def run(command: str, tree: Mapping[str, bytes]) -> ExecResult:
        return sandbox.execute(ExecRequest(archive(tree), command, Limits(timeout=5)))

    return run


def box_for(repo: dict[str, bytes], index: Index, runner: object = None, runs: int = 2) -> ToolBox:
    return ToolBox(
        repo,
        editable=SPEC.editable,
        hidden=hidden_paths(SPEC),
        index=index,
        runner=runner,  # type: ignore[arg-type]
        max_runs=runs,
    )


def call(box: ToolBox, name: str, **args: object) -> tuple[bool, str]:
    out = box.call(ToolCall(name, args))
    return out.ok, out.text


def test_search_finds_the_function_by_keyword_and_says_when_semantic_is_off(
    repo: dict[str, bytes], index: Index
) -> None:
    box = box_for(repo, index)
    ok, text = call(box, "search_code", query="great-circle distance", mode="keyword")
    assert ok and text.splitlines()[1].startswith("1. lib/geo/sphere.py")
    assert "haversine" in text and "Great-circle distance" in text
    ok, text = call(box, "search_code", query="great-circle distance", mode="semantic")
    assert ok and text.startswith("(semantic search is not configured here")
    ok, text = call(box, "search_code", query="secret evaluation data", mode="keyword")
    assert "evaluate.py" not in text and "DATA = " not in text


def test_read_and_list_show_line_numbers_and_never_hidden_files(
    repo: dict[str, bytes], index: Index
) -> None:
    box = box_for(repo, index)
    ok, text = call(box, "read_file", path="zz_model.py", start=7, end=9)
    assert ok and text.splitlines()[0] == "zz_model.py, lines 7-9 of 12:"
    assert (
        "    6  def predict(x):" not in text
        and "    8      return x * 1.0" in text
        and "[lines 10-12 not shown]" in text
    )
    ok, text = call(box, "read_file", path="./zz_model.py", start=1, end=0)
    assert ok and "lines 1-12 of 12" in text and box.read == ["zz_model.py"]
    big = next(p for p in sorted(repo) if p.startswith("pkg_"))
    ok, text = call(box, "read_file", path=big, start=1, end=0)
    assert ok and "lines 1-" in text and "not shown]" in text and "characters cut" not in text
    ok, text = call(box, "list_files", glob="lib/geo/*")
    assert ok and text == "1 files match 'lib/geo/*':\nlib/geo/sphere.py"
    ok, text = call(box, "list_files", glob="*.py")
    assert ok and "zz_model.py" in text and "evaluate.py" not in text


@pytest.mark.parametrize(
    ("name", "args", "why"),
    [
        ("grep", {"pattern": "x"}, "no tool 'grep'"),
        ("read_file", {"path": "evaluate.py", "start": 1, "end": 0}, "protected evaluation data"),
        ("read_file", {"path": "lib/../evaluate.py", "start": 1, "end": 0}, "protected"),
        ("read_file", {"path": "../secrets.txt", "start": 1, "end": 0}, "outside the repository"),
        ("read_file", {"path": "/etc/passwd", "start": 1, "end": 0}, "outside the repository"),
        ("read_file", {"path": "nope.py", "start": 1, "end": 0}, "no file 'nope.py'"),
        ("read_file", {"path": "zz_model.py", "start": "one", "end": 0}, "must be a int"),
        ("read_file", {"path": "zz_model.py", "start": 99, "end": 0}, "past its end"),
        ("read_file", {"start": 1, "end": 0}, "'path' is missing"),
        ("read_file", {"_invalid": "{path: zz"}, "not a JSON object"),
        ("search_code", {"query": "x", "mode": "fuzzy"}, "mode must be"),
        ("run", {"command": "ls"}, "no tool 'run'"),  # no sandbox given: not offered
    ],
)
def test_misuse_is_refused_with_a_message_and_recorded(
    repo: dict[str, bytes], index: Index, name: str, args: dict[str, object], why: str
) -> None:
    box = box_for(repo, index)
    ok, text = call(box, name, **args)
    assert not ok and text.startswith("refused: ") and why in text
    assert box.misuse and why in box.misuse[-1]
    assert "secret evaluation data" not in text


def test_run_checks_the_edited_tree_without_the_evaluator_and_is_capped(
    repo: dict[str, bytes], index: Index, tmp_path: Path
) -> None:
    box = box_for(repo, index, local_runner(tmp_path), runs=2)
    edit = ToolCall("edit_file", {})
    from revtree.agents.edits import Edit

    out = box.edit(edit, [Edit("zz_model.py", "    return x * 1.0", "    return x * 3.0 + 2")])
    assert out.ok and out.text == "applied: zz_model.py changed"
    ok, text = call(box, "run", command="python -c 'import zz_model; print(zz_model.predict(2))'")
    assert ok and text.startswith("exit code 0") and "8.0" in text and "run 1 of 2" in text
    ok, text = call(box, "run", command="cat evaluate.py; find . -type f | wc -l")
    assert ok and "No such file" in text and "299" in text
    ok, text = call(box, "run", command="true")
    assert not ok and "the 2 runs of this candidate are spent" in text
    assert set(box.changes) == {"zz_model.py"}
    refused = box.edit(edit, [Edit("evaluate.py", None, "print(0)\n")])
    assert not refused.ok and "not editable" in refused.text


# -- the loop ---------------------------------------------------------------------------
def coder(llm: ScriptedLLM, spec: TaskSpec = SPEC) -> LLMCoder:
    return LLMCoder("coder", llm, spec, 2000, 0.0, structured=Structured("tools"))


def context(repo: dict[str, bytes]) -> Context:
    return Context(1, "improve", 0, "9.0", "PREFIX", "(none)", "", "", files=repo)


def calls_of(prompt: Prompt) -> list[tuple[str, dict[str, object], str]]:
    return tool_results(FakeRequest("openai", "m", prompt.system, prompt.user, "", {}))


class Searcher:
    """Finds the smoothing helper by search, reads it, then uses it in predict(x), with
    the misuse of ``misuse`` (calls) made first."""

    def __init__(self, *misuse: ToolCall) -> None:
        self.misuse = list(misuse)

    def __call__(self, prompt: Prompt) -> list[ToolCall]:
        seen = [c for c in calls_of(prompt) if not c[2].startswith("refused")]
        if self.misuse:
            return [self.misuse.pop(0)]
        if not any(n == "search_code" for n, _, _ in seen):
            return [
                ToolCall("search_code", {"query": "exponential moving average", "mode": "keyword"})
            ]
        found = next(r for n, _, r in seen if n == "search_code")
        path = found.splitlines()[1].split()[1]  # "1. PATH  [symbols]"
        if not any(n == "read_file" for n, _, _ in seen):
            return [ToolCall("read_file", {"path": path, "start": 1, "end": 12})]
        read = next(r for n, _, r in seen if n == "read_file")
        name = read.split("def ", 1)[1].split("(", 1)[0]
        module = path.removesuffix(".py").replace("/", ".")
        new = f"    from {module} import {name}\n    return x * 3.0 + 2 + 0 * len({name}(x))"
        return [
            ToolCall(
                "edit_file", {"path": "zz_model.py", "search": "    return x * 1.0", "replace": new}
            ),
            ToolCall("done", {"summary": "fit the line, using the helper"}),
        ]


def test_the_coder_searches_reads_then_edits_and_each_result_reaches_the_next_prompt(
    repo: dict[str, bytes], index: Index
) -> None:
    llm = ScriptedLLM(Searcher())
    loop = ToolCoder(coder(llm), box_for(repo, index), max_steps=6)
    changes = loop.work(context(repo), Proposal(hypothesis="smooth", plan="1. use the EMA helper"))
    new = (changes["zz_model.py"] or b"").decode()
    assert "from lib.signal.smoothing import exponential_moving_average" in new
    assert len(llm.prompts) == 3 and [s.splitlines()[1].split("(")[0] for s in loop.steps] == [
        "You called search_code",
        "You called read_file",
        "You called edit_file",
    ]
    first, second, third = llm.prompts
    assert first.structure is not None and [t.name for t in first.structure.tools] == [
        "search_code",
        "read_file",
        "list_files",
        "edit_file",
        "write_file",
        "done",
    ]
    assert "Your work so far" not in first.user and "at most 6 steps" in first.system
    assert "1. lib/signal/smoothing.py" in second.user and "step 2 of 6" in second.user
    assert "    4  def exponential_moving_average(" in third.user
    assert loop.box.read == ["lib/signal/smoothing.py"] and not loop.box.misuse


def test_misuse_goes_back_to_the_model_and_the_work_goes_on(
    repo: dict[str, bytes], index: Index
) -> None:
    bad = [
        ToolCall("grep", {"pattern": "predict"}),
        ToolCall("read_file", {"path": "evaluate.py", "start": 1, "end": 0}),
        ToolCall("read_file", {"path": "../../etc/passwd", "start": 1, "end": 0}),
        ToolCall("edit_file", {"path": "zz_model.py", "search": 3}),
        ToolCall("done", {"summary": "nothing yet"}),
    ]
    llm = ScriptedLLM(Searcher(*bad))
    loop = ToolCoder(coder(llm), box_for(repo, index), max_steps=10)
    loop.work(context(repo), Proposal(hypothesis="smooth", plan="-"))
    assert len(loop.box.misuse) == 5 and len(llm.prompts) == 8
    shown = calls_of(llm.prompts[5])
    assert [r.split(":")[0] for _, _, r in shown] == ["refused"] * 5
    assert "no tool 'grep'; the tools are ['search_code'" in shown[0][2]
    assert "protected evaluation data" in shown[1][2] and "outside the repository" in shown[2][2]
    assert "'search' is a int, not a string" in shown[3][2]
    assert "no edit has applied yet" in shown[4][2]
    assert all("secret evaluation data" not in p.user for p in llm.prompts)


def test_done_with_a_refused_call_does_not_finish(repo: dict[str, bytes], index: Index) -> None:
    bad_edit = ToolCall("edit_file", {"path": "zz_model.py", "search": "nope", "replace": "x"})
    llm = ScriptedLLM([[bad_edit, ToolCall("done", {"summary": "s"})], "no edits here"])
    loop = ToolCoder(coder(llm), box_for(repo, index), max_steps=4)
    with pytest.raises(EditError, match="finished without an edit that applies"):
        loop.work(context(repo), Proposal(hypothesis="h", plan="-"))
    assert "not finished: a call of this step was refused" in llm.prompts[1].user


def test_a_step_budget_exceeded_is_a_clear_edit_error(repo: dict[str, bytes], index: Index) -> None:
    looking = [ToolCall("list_files", {"glob": f"pkg_{i:02d}/*"}) for i in range(9)]
    llm = ScriptedLLM([[c] for c in looking])
    loop = ToolCoder(coder(llm), box_for(repo, index), max_steps=3)
    with pytest.raises(StepBudgetExceeded, match=r"used its 3 steps \(agents.max_steps\)"):
        loop.work(context(repo), Proposal(hypothesis="h", plan="-"))
    assert len(llm.prompts) == 3 and isinstance(StepBudgetExceeded("x"), EditError)


def test_repeating_a_refused_call_ends_the_work_early(repo: dict[str, bytes], index: Index) -> None:
    llm = ScriptedLLM([[ToolCall("write_file", {"path": "evaluate.py", "content": "x"})]])
    loop = ToolCoder(coder(llm), box_for(repo, index), max_steps=8)
    with pytest.raises(EditError, match=r"repeated a refused call.*'evaluate\.py' is not editable"):
        loop.work(context(repo), Proposal(hypothesis="h", plan="-"))
    assert len(llm.prompts) == 2


def test_a_final_answer_in_text_is_applied(repo: dict[str, bytes], index: Index) -> None:
    block = "<<<<<<< SEARCH\n    return x * 1.0\n=======\n    return x * 3.0\n>>>>>>> REPLACE\n"
    text = "zz_model.py\n" + block
    llm = ScriptedLLM([[ToolCall("list_files", {"glob": "zz*"})], text])
    changes = ToolCoder(coder(llm), box_for(repo, index), 4).work(
        context(repo), Proposal(hypothesis="h", plan="-")
    )
    assert b"return x * 3.0" in (changes["zz_model.py"] or b"")


def test_tools_are_a_coder_setting() -> None:
    assert spec_for().agents.coder.tools is None and spec_for().agents.max_steps == 12
    assert spec_for(coder={"tools": "off"}, max_steps=3).agents.max_steps == 3
    with pytest.raises(ValueError, match="only the coder works with tools"):
        spec_for(reviewer={"tools": "on"})
    with pytest.raises(ValueError, match="tools"):
        spec_for(coder={"tools": "sometimes"})
