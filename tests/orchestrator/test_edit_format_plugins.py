"""An edit format of one's own, named from a task file's ``[agents] edit_format``, runs a
whole LLM task through the real CLI against the fake model server on 127.0.0.1: by
import path (``module:Class``, the module in the task folder on PYTHONPATH; the model
answers in the format's text form) and by the name of an entry point of a throwaway
installed package (the model answers by the format's own tool). Neither touches a file
of the package; a misspelt name is refused at load in one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from revtree.agents.formats import BUILTIN, make_format
from revtree.agents.formats.base import EditFormat
from revtree.agents.llm.fake_server import FakeLLMServer, FakeReply, FakeRequest
from revtree.memory import GitStore, Store
from revtree.orchestrator import RunPaths
from revtree.tasks.names import EDIT_FORMATS
from revtree.tasks.plugins import FORMAT_MEMBERS
from tests.orchestrator.test_llm_run import make_task, role
from tests.orchestrator.test_policy_plugins import finished, install, package_files, run_task

# Whole files between <put path="..."> and </put>, or by a put_file(path, text) call:
# a form no built-in parser reads, so a landed edit proves the format's parser ran.
TOY = """\
import re

from revtree.agents.edits import Edit
from revtree.agents.formats.base import EditFormat
from revtree.agents.llm.base import Tool
from revtree.errors import EditError

PUT = Tool(
    "put_file",
    "Put a file's whole new text.",
    {
        "type": "object",
        "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
        "required": ["path", "text"],
        "additionalProperties": False,
    },
    many=True,
)
TAG = re.compile(r'<put path="([^"]+)">\\n(.*?)</put>', re.S)


class Tagged(EditFormat):
    name = "tagged"
    help = 'TOY-FORMAT: write each changed file as <put path="FILE">, its new text, </put>.'
    tools = (PUT,)
    tools_help = "TOY-FORMAT: call put_file(path, text) once for each changed file."

    def parse(self, answer):
        found = TAG.findall(answer)
        if not found:
            raise EditError("no <put> element")
        return [Edit(p, None, body, index=i) for i, (p, body) in enumerate(found, 1)]

    def edit_of(self, call, index):
        return Edit(str(call.arguments["path"]), None, str(call.arguments["text"]), index=index)


class Broken:
    name = "broken"
    help = "no parser"
"""
FIT = "def transform(x):\n    return 3 * x + 2\n"  # err 0 with model.py unchanged


class ToyModel:
    """Answers the coder only in the toy format (asserting its help reached the prompt
    and no built-in format's did), by a put_file call where the request offers it."""

    def __init__(self) -> None:
        self.coder_calls: list[FakeRequest] = []

    def __call__(self, req: FakeRequest) -> FakeReply | str:
        if req.user == "ping":
            return "ok"
        if role(req) == "proposer":
            return "HYPOTHESIS: fit the slope and offset in helpers\nPLAN:\n1. edit"
        self.coder_calls.append(req)
        assert "TOY-FORMAT" in req.system and "SEARCH/REPLACE" not in req.system, req.system
        if req.tools:
            assert "put_file" in req.tools and "edit_file" not in req.tools, req.tools
            return FakeReply(tool_calls=[("put_file", {"path": "helpers.py", "text": FIT})])
        return f'Here it is.\n<put path="helpers.py">\n{FIT}</put>\n'


def llm_task(root: Path, url: str, edit_format: str, structured: str = "off") -> Path:
    task = make_task(root, budget=3)
    toml = task / "task.toml"
    agents = f'mode = "llm"\nedit_format = "{edit_format}"\nstructured = "{structured}"\n'
    toml.write_text(toml.read_text().replace('mode = "llm"\n', agents + f'base_url = "{url}"\n'))
    return task


def landed(home: Path) -> None:
    """The run completed and its best candidate is the toy format's edit of helpers.py."""
    finished(home)
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    try:
        (run,) = store.list_runs()
        best = min((n for n in store.nodes(run.id) if n.score is not None), key=lambda n: n.score)
        assert best.id != 0 and best.score == 0.0, best
        git = GitStore(RunPaths(home, run.id).repo)
        assert git.read(best.commit or "", "helpers.py") == FIT.encode()
    finally:
        store.close()


@pytest.mark.slow  # a whole run in a subprocess
def test_an_edit_format_by_import_path_runs_a_whole_task(tmp_path: Path, home: Path) -> None:
    before = package_files()
    model = ToyModel()
    with FakeLLMServer(model) as srv:
        task = llm_task(tmp_path / "t", srv.openai_url, "toyformat:Tagged")
        (task / "toyformat.py").write_text(TOY)
        run_task(home, task, task)
    assert model.coder_calls and not any(r.tools for r in model.coder_calls)  # text answers
    landed(home)
    assert package_files() == before


@pytest.mark.slow  # a whole run in a subprocess
def test_an_edit_format_from_an_installed_entry_point_answers_by_its_tool(
    tmp_path: Path, home: Path
) -> None:
    before = package_files()
    site = install(
        tmp_path / "site", "toyfmt", TOY, "[revtree.edit_formats]\ntagged = toyfmt:Tagged\n"
    )
    model = ToyModel()
    with FakeLLMServer(model) as srv:
        task = llm_task(tmp_path / "t", srv.openai_url, "tagged", structured="tools")
        run_task(home, task, site)
    assert model.coder_calls and all(r.tools for r in model.coder_calls)  # typed answers
    landed(home)
    assert package_files() == before


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("serach_replace", "unknown edit format 'serach_replace': expected one of 'auto'"),
        ("toyformat:Tagd", "module 'toyformat' has no attribute 'Tagd'"),
        ("toyformat:Broken", "'toyformat:Broken' lacks (or mistypes) tools, parse, edit_of"),
    ],
    ids=["misspelt-name", "missing-attribute", "not-a-format"],
)
def test_an_edit_format_that_does_not_resolve_is_refused_at_load(
    tmp_path: Path, home: Path, name: str, says: str
) -> None:
    task = llm_task(tmp_path / "t", "http://127.0.0.1:9/v1", name)
    (task / "toyformat.py").write_text(TOY)
    proc = run_task(home, task, task, check=False)
    assert proc.returncode == 2, proc
    lines = [line for line in proc.stderr.splitlines() if "key 'agents.edit_format'" in line]
    assert len(lines) == 1 and says in lines[0], proc.stderr
    if name == "serach_replace":
        assert "(did you mean 'search_replace'?)" in lines[0]
    assert "Traceback" not in proc.stderr and not (home / "revtree.db").exists()


def test_built_ins_are_the_task_names_and_have_every_member() -> None:
    assert set(BUILTIN) == set(EDIT_FORMATS)
    assert set(FORMAT_MEMBERS) == {"name", "help", "tools", "parse", "edit_of"}
    for name in EDIT_FORMATS:
        fmt = make_format(name)
        assert isinstance(fmt, EditFormat) and fmt.name == name and fmt.help and fmt.tools
        assert all(hasattr(EditFormat, m) for m in FORMAT_MEMBERS)
