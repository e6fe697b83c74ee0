"""Structured answers: the tools the LLM roles are offered, and reading their calls.

Structured answers (``Structured``, per role): the proposer calls ``propose(hypothesis,
plan)``, the coder ``edit_file(path, search, replace)`` / ``write_file(path, content)``
(and ``propose`` in one-call mode), the reviewer ``verdict(verdict, kind, reasons)``, as
tool calls or as one JSON object. Typed edits go through ``apply_edits`` like parsed
ones: the editable globs and EVOLVE-BLOCK regions are enforced alike, and a bad call
gets the same repair round. An answer without calls (a model that wrote prose anyway)
is parsed as text. A server that refuses the structure switches the role's model to
plain text for the rest of the run, once, through ``Structured.refuse``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from revtree.agents.edits import Edit
from revtree.agents.llm.base import Completion, LLMError, Structure, Tool, ToolCall
from revtree.errors import EditError


class AnswerError(LLMError, ValueError):
    """The model answered, but not in the form asked for."""


def _object(**props: str | list[str]) -> dict[str, object]:
    """A strict JSON schema of string fields: ``name=description`` or ``name=[enum]``."""
    properties = {
        k: {"type": "string", "enum": v}
        if isinstance(v, list)
        else {"type": "string", "description": v}
        for k, v in props.items()
    }
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


PROPOSE = Tool(
    "propose",
    "State the change to try: the hypothesis and the plan.",
    _object(
        hypothesis="One sentence: what you change and why it improves the score.",
        plan="Numbered steps a programmer can follow.",
    ),
)
EDIT_FILE = Tool(
    "edit_file",
    "Replace the exact, contiguous lines `search`, copied verbatim from the current file "
    "(short but unique), with `replace`. An empty `search` creates a new file.",
    _object(
        path="The file's path, relative to the project.",
        search="The lines to find, copied from the file.",
        replace="The lines to put instead.",
    ),
    many=True,
)
WRITE_FILE = Tool(
    "write_file",
    "Write a file whole: its complete new content, nothing left out.",
    _object(
        path="The file's path, relative to the project.",
        content="The complete new content.",
    ),
    many=True,
)
VERDICT = Tool(
    "verdict",
    "Give the review's verdict.",
    _object(
        verdict=["accept", "reject"],
        kind=[
            "none",
            "hard-coding",
            "evaluator-data",
            "special-casing",
            "scoring-channel",
            "tampering",
        ],
        reasons="One or two sentences, naming the file and line that decide it.",
    ),
)
TOOLS_HELP = (
    "Make each change with a call of the edit tools: edit_file(path, search, replace) "
    "replaces exact, contiguous lines copied from the current file (keep `search` short "
    "but unique), write_file(path, content) writes a whole file. Use several calls for "
    "several places or files."
)


class Structured:
    """How a role's model is asked for structured answers: ``kind`` is "tools",
    "json_schema" or "off". Shared by the roles on one model for a run; ``refuse``
    switches it off for good (once: ``on_refused`` hears of the first refusal only)."""

    def __init__(self, kind: str, on_refused: Callable[[str], None] | None = None) -> None:
        self.kind, self.on_refused = kind, on_refused
        self._lock = threading.Lock()

    def refuse(self, reason: str) -> None:
        with self._lock:
            first, self.kind = self.kind != "off", "off"
        if first and self.on_refused is not None:
            self.on_refused(reason)


def structured_kind(setting: str, providers: Sequence[str]) -> str:
    """The kind of structure a role asks for: its setting, where "auto" is tools when
    every model of the role is an ``openai:`` or ``anthropic:`` one, else off (local
    servers often have no tool support)."""
    if setting != "auto":
        return setting
    return "tools" if providers and all(p in ("openai", "anthropic") for p in providers) else "off"


def structure_help(s: Structure) -> str:
    """The instruction appended to a role's rules when it is asked for structure."""
    if s.kind == "tools":
        names = ", ".join(t.signature() for t in s.tools)
        return (
            f"Answer by calling the tools ({names}); their fields take the place of any "
            "written form described above."
        )
    keys = ", ".join(f"{t.name!r}" for t in s.tools)
    return (
        f"Answer with one JSON object with the keys {keys}, as the response schema says; "
        "its fields take the place of any written form described above."
    )


def _strings(call: ToolCall, index: int, *names: str) -> list[str]:
    """The string arguments ``names`` of a call, or an EditError naming the call."""
    values = []
    for name in names:
        value = call.arguments.get(name)
        if not isinstance(value, str):
            got = "missing" if value is None else f"a {type(value).__name__}, not a string"
            raise EditError(f"call {index} ({call.name}): the argument {name!r} is {got}")
        values.append(value)
    return values


def read_edit_call(call: ToolCall, index: int) -> Edit:
    """The edit of a call of the built-in ``edit_file`` or ``write_file``, the
    ``index``-th call of the answer; an EditError for bad arguments or another tool."""
    if call.name == EDIT_FILE.name:
        path, search, replace = _strings(call, index, "path", "search", "replace")
        return Edit(path.strip(), search, replace, index=index)
    if call.name == WRITE_FILE.name:
        path, content = _strings(call, index, "path", "content")
        return Edit(path.strip(), None, content, index=index)
    raise EditError(f"call {index} ({call.name}): not an edit tool")


def edits_of(
    calls: Sequence[ToolCall],
    offered: Sequence[Tool],
    edit_tools: Sequence[Tool] = (EDIT_FILE, WRITE_FILE),
    read: Callable[[ToolCall, int], Edit] = read_edit_call,
) -> list[Edit]:
    """The edits of a structured answer: its calls of ``edit_tools``, each read by
    ``read`` (an edit format's ``edit_of``); other calls offered, like ``propose``, are
    skipped. A call of a tool not offered, or with bad arguments, is an EditError."""
    names, editing, edits = {t.name for t in offered}, {t.name for t in edit_tools}, []
    for i, c in enumerate(calls, 1):
        if c.name not in names:
            raise EditError(f"call {i}: no tool {c.name!r}; the tools are {sorted(names)}")
        if c.name in editing:
            edits.append(read(c, i))
    if not edits:
        wanted = " or ".join(t.name for t in edit_tools if t.name in names) or "edit tool"
        raise EditError(f"the answer makes no {wanted} call")
    return edits


def call_named(reply: Completion, name: str) -> ToolCall | None:
    """The first call of the tool ``name`` in an answer."""
    return next((c for c in reply.calls if c.name == name), None)
