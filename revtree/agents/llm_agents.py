"""The LLM agents: proposer, coder (with one repair round) and reviewer.

Each role's prompt comes from a template file (``revtree/agents/prompts/ROLE.md``, or
the task's own via ``[agents.ROLE] prompt``): the part above ``=== USER ===`` is the
system prompt, the part below the variable user message. The stable prefix between
them (task, goal, baseline code) is the same for every call of a run, so providers
cache it. Bad answers raise errors that say what was wrong; the orchestrator records
them on the node.

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

import functools
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from revtree.agents.base import Proposal, Verdict
from revtree.agents.context import ContextBuilder
from revtree.agents.edits import Edit, apply_edits, parse_edits
from revtree.agents.llm.base import (
    LLM,
    Completion,
    LLMError,
    Prompt,
    Structure,
    StructureRefused,
    Tool,
    ToolCall,
    estimate_tokens,
)
from revtree.agents.parsing import parse_proposal, parse_verdict
from revtree.agents.tools import DONE, RUN, Outcome, ToolBox
from revtree.errors import EditError
from revtree.tasks.spec import TaskSpec

PROMPTS = Path(__file__).parent / "prompts"
OPERATORS = {
    "draft": "write a fresh approach to the goal, starting from the baseline",
    "improve": "improve the parent further",
    "debug": "the parent failed: find and fix the cause, keeping its idea",
    "crossover": "combine the strengths of the parent and the other parents shown",
    "tune": "adjust the parent's parameters",
}
FORMAT_HELP = {
    "search_replace": (
        "Write each change as a SEARCH/REPLACE block: the file path alone on a line, then\n"
        "<<<<<<< SEARCH\nexact, contiguous lines copied from the current file\n=======\n"
        "the lines to put instead\n>>>>>>> REPLACE\n"
        "Use several blocks for several places or files. Keep SEARCH parts short but unique."
    ),
    "whole_file": (
        "Write each changed file whole: a line '=== FILE: path/to/file ===' then the complete\n"
        "new content in one fenced code block (```)."
    ),
}
FORMAT_HELP["auto"] = (
    FORMAT_HELP["search_replace"] + "\nFor a file you rewrite entirely you "
    "may instead use the whole-file form:\n" + FORMAT_HELP["whole_file"]
)


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
EDIT_TOOLS = {
    "search_replace": (EDIT_FILE,),
    "whole_file": (WRITE_FILE,),
    "auto": (EDIT_FILE, WRITE_FILE),
}
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


def edits_of(calls: Sequence[ToolCall], offered: Sequence[Tool]) -> list[Edit]:
    """The edits of a structured answer (other calls offered, like ``propose``, are
    skipped); a call of a tool not offered, or with bad arguments, is an EditError."""
    names, edits = {t.name for t in offered}, []
    for i, c in enumerate(calls, 1):
        if c.name not in names:
            raise EditError(f"call {i}: no tool {c.name!r}; the tools are {sorted(names)}")
        if c.name == EDIT_FILE.name:
            path, search, replace = _strings(c, i, "path", "search", "replace")
            edits.append(Edit(path.strip(), search, replace, index=i))
        elif c.name == WRITE_FILE.name:
            path, content = _strings(c, i, "path", "content")
            edits.append(Edit(path.strip(), None, content, index=i))
    if not edits:
        raise EditError("the answer makes no edit_file or write_file call")
    return edits


def call_named(reply: Completion, name: str) -> ToolCall | None:
    """The first call of the tool ``name`` in an answer."""
    return next((c for c in reply.calls if c.name == name), None)


@dataclass(frozen=True)
class Context:
    """What the agents see of one candidate; built by the orchestrator."""

    node_id: int
    operator: str
    parent_id: int
    parent_score: str
    prefix: str  # stable: task, goal, baseline files
    parent_files: str  # files that differ from the baseline, in full
    parent_eval: str
    memory: str
    others: str = ""
    files: Mapping[str, bytes] = field(default_factory=dict)  # the parent's files


@functools.lru_cache(maxsize=64)
def load_template(role: str, override: str | None, root: str) -> tuple[Template, Template]:
    path = Path(root) / override if override else PROMPTS / f"{role}.md"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise LLMError(f"cannot read the {role} prompt template {path}: {e}") from e
    system, sep, user = text.partition("=== USER ===")
    if not sep and role != "repair":
        raise LLMError(f"prompt template {path} has no '=== USER ===' line")
    return Template(system.strip()), Template((user if sep else system).strip())


def task_prefix(spec: TaskSpec, baseline: Mapping[str, bytes], budget_tokens: int) -> str:
    """The stable part of every prompt of a run: the task, the editable files, then a
    repository map, within ``budget_tokens`` (see ``revtree.agents.context``; protected
    files never shown). A run's agents get it from ``RepoContext``, with retrieval."""
    return ContextBuilder(
        spec, baseline, budget_tokens, map_share=spec.agents.repo_map_share
    ).prefix


def render_files(files: Mapping[str, bytes], budget_tokens: int) -> str:
    out, left = [], budget_tokens * 4
    for path, data in sorted(files.items()):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            out.append(f"--- {path} (binary, {len(data)} bytes) ---")
            continue
        if len(text) > left:
            text = text[: max(left, 0)] + "\n[... truncated ...]"
        left -= len(text)
        out.append(f"--- {path} ---\n{text}")
    return "\n".join(out) or "(none)"


class _Role:
    def __init__(
        self,
        role: str,
        llm: LLM,
        spec: TaskSpec,
        max_tokens: int,
        temperature: float,
        template: str | None = None,
        structured: Structured | None = None,
    ) -> None:
        self.role, self.llm, self.spec = role, llm, spec
        self.max_tokens, self.temperature = max_tokens, temperature
        self.system, self.user = load_template(role, template, spec.root)
        self.structured = structured or Structured("off")

    def ask(self, ctx: Context, **values: str) -> str:
        """A plain-text answer."""
        return self.reply(ctx, (), **values).text

    def reply(self, ctx: Context, tools: tuple[Tool, ...] = (), **values: str) -> Completion:
        """The answer, structured as calls of ``tools`` where this role's model is asked
        for structure (else, or where the server refuses it, text)."""
        return self.structured_call(lambda s: self._prompt(ctx, s, values), tools)

    def structured_call(
        self, build: Callable[[Structure | None], Prompt], tools: tuple[Tool, ...]
    ) -> Completion:
        """The answer to ``build(structure)``; on a refusal, to ``build(None)``."""
        kind = self.structured.kind if tools else "off"
        if kind != "off":
            try:
                return self._call(build(Structure(kind, self.role, tools)))
            except StructureRefused as e:
                self.structured.refuse(str(e))
        return self._call(build(None))

    def _prompt(self, ctx: Context, s: Structure | None, values: Mapping[str, str]) -> Prompt:
        base = {
            "operator": ctx.operator,
            "operator_help": OPERATORS.get(ctx.operator, ""),
            "parent_id": str(ctx.parent_id),
            "parent_score": ctx.parent_score,
            "parent_files": ctx.parent_files,
            "parent_eval": ctx.parent_eval,
            "memory": ctx.memory,
            "others": ctx.others,
            "metric": self.spec.evaluate.metric,
            "direction": self.spec.evaluate.direction,
            "editable": ", ".join(self.spec.editable),
        }
        base.update(values)
        return Prompt(
            self._system(s, base), ctx.prefix, self.user.safe_substitute(base), structure=s
        )

    def _system(self, s: Structure | None, values: dict[str, str]) -> str:
        """The role's rules, for a structured answer with the tools' help instead of the
        edit format's and the instruction to answer by the structure."""
        if s is None:
            return self.system.safe_substitute(values)
        rules = self.system.safe_substitute({**values, "edit_format_help": TOOLS_HELP})
        return rules + "\n\n" + structure_help(s)

    def _call(self, prompt: Prompt) -> Completion:
        reply = self.llm.complete(prompt, max_tokens=self.max_tokens, temperature=self.temperature)
        if reply.truncated:
            raise AnswerError(
                f"{self.role}: the answer was cut off at max_tokens "
                f"({self.max_tokens}); raise agents.{self.role}.max_tokens"
            )
        if not reply.calls and not reply.text.strip():
            raise AnswerError(f"{self.role}: the model returned an empty answer")
        return reply


class LLMProposer(_Role):
    def propose(self, ctx: Context) -> Proposal:
        reply = self.reply(ctx, (PROPOSE,))
        call = call_named(reply, PROPOSE.name)
        hypothesis = call.arguments.get("hypothesis") if call else None
        if isinstance(hypothesis, str) and hypothesis.strip():
            plan = call.arguments.get("plan") if call else None
            return Proposal(hypothesis=hypothesis.strip()[:500], plan=str(plan or "").strip())
        if reply.calls and not reply.prose.strip():
            raise AnswerError(
                f"proposer: no 'propose' call with a hypothesis in {reply.text[:200]!r}"
            )
        text_hyp, text_plan = parse_proposal(reply.prose or reply.text)
        return Proposal(hypothesis=text_hyp, plan=text_plan)


class LLMCoder(_Role):
    def __init__(self, *args: object, edit_format: str = "auto", **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.edit_format = edit_format
        _, self.repair = load_template("repair", None, self.spec.root)

    def tools(self, hypothesis: bool = False) -> tuple[Tool, ...]:
        """The coder's tools: the edit tools of its edit format, and ``propose`` when the
        answer also states the hypothesis (one-call mode)."""
        return ((PROPOSE,) if hypothesis else ()) + EDIT_TOOLS[self.edit_format]

    def code(self, ctx: Context, proposal: Proposal) -> dict[str, bytes | None]:
        """The changes for the plan; a failed apply gets one repair round."""
        answer = self.reply(
            ctx,
            self.tools(),
            hypothesis=proposal.hypothesis,
            plan=proposal.plan or "-",
            edit_format_help=FORMAT_HELP[self.edit_format],
        )
        try:
            return self._apply(answer, ctx)
        except EditError as first:
            repair = self.user.safe_substitute(
                hypothesis=proposal.hypothesis,
                plan=proposal.plan or "-",
                parent_files=ctx.parent_files,
                editable=", ".join(self.spec.editable),
            )
            user = (
                repair
                + "\n\nYour previous answer:\n"
                + answer.text[-6000:]
                + "\n\n"
                + self.repair.safe_substitute(error=str(first))
            )
            values = {"edit_format_help": FORMAT_HELP[self.edit_format]}
            again = self.structured_call(
                lambda s: Prompt(self._system(s, values), ctx.prefix, user, structure=s),
                self.tools(),
            )
            try:
                return self._apply(again, ctx)
            except EditError as second:
                raise EditError(
                    f"{second} (after one repair round; first error: {first})"
                ) from second

    def _apply(self, answer: Completion, ctx: Context) -> dict[str, bytes | None]:
        """The changes of an answer: its edit calls, else the edits written in its text;
        either way applied by ``apply_edits`` (editable globs, EVOLVE-BLOCK regions)."""
        if answer.calls:
            edits = edits_of(answer.calls, self.tools(hypothesis=True))
        else:
            edits = parse_edits(
                answer.text,
                allow_blocks=self.edit_format != "whole_file",
                allow_files=self.edit_format != "search_replace",
            )
        changes = apply_edits(edits, ctx.files, self.spec.editable)
        if not changes:
            raise EditError("the edits change nothing")
        return dict(changes)


class StepBudgetExceeded(EditError):
    """The coder's tool loop used its steps (``agents.max_steps``) without finishing."""


WORK_RULES = (
    "You work in steps, with tools. Each answer calls tools; their results come back in "
    "the next message, under 'Your work so far'. Find what you need with search_code, "
    "read_file and list_files{run}, make the changes with the edit tools (each applies "
    "at once: read_file then shows the edited file), then call done. A step of edit "
    "calls only ends the work as done does: to check an edit, call read_file or run in "
    "the same step, after it. You have at most {steps} steps: do not read what the "
    "prompt already shows."
)
HISTORY_HEAD = "\n\n# Your work so far (this is step {step} of {steps})\n"
HISTORY_CHARS = 60_000  # older results are shortened beyond this
SHORT_RESULT = 300


class ToolCoder:
    """The coder's tool loop (mini-swe-agent's, on typed tool calls): each step is one
    metered call offered the ``ToolBox``'s tools, the edit tools and ``done``; the calls
    are carried out in order and their results given back in the next step's prompt
    (so each call's stored prompt shows what the model had seen). It ends when the
    model calls ``done`` (refused alone before any edit), makes a step of edit calls
    only, or answers without calls (edits written in its text are applied); not in a
    step where a call was refused.
    With no change applied it fails; a step that repeats the last step's refused calls
    fails; after ``max_steps`` steps it fails with ``StepBudgetExceeded``; each error
    names the last refusal."""

    def __init__(self, coder: LLMCoder, box: ToolBox, max_steps: int) -> None:
        self.coder, self.box, self.max_steps = coder, box, max_steps
        self.edit_tools = EDIT_TOOLS[coder.edit_format]
        self.offered = box.tools + self.edit_tools + (DONE,)
        self.steps: list[str] = []

    def work(self, ctx: Context, proposal: Proposal) -> dict[str, bytes | None]:
        c, s = self.coder, Structure("tools", self.coder.role, self.offered)
        values = {
            "hypothesis": proposal.hypothesis,
            "plan": proposal.plan or "-",
            "edit_format_help": FORMAT_HELP[c.edit_format],
        }
        first = c._prompt(ctx, s, values)
        run = ", check with run" if RUN in self.offered else ""
        system = first.system + "\n\n" + WORK_RULES.format(run=run, steps=self.max_steps)
        last_refused: tuple[str, ...] = ()
        for step in range(1, self.max_steps + 1):
            user = first.user + (self._history(step) if self.steps else "")
            reply = c._call(Prompt(system, ctx.prefix, user, structure=s))
            outcomes, finished = self._act(reply)
            self.steps.append(_step_text(len(self.steps) + 1, reply, outcomes))
            refused = tuple(_key(o.call) for o in outcomes if not o.ok)
            if refused and refused == last_refused and all(not o.ok for o in outcomes):
                raise EditError(f"the coder repeated a refused call{self._last()}")
            last_refused = refused
            if finished:
                if not self.box.changes:
                    raise EditError(
                        f"the coder finished without an edit that applies{self._last()}"
                    )
                return dict(self.box.changes)
        raise StepBudgetExceeded(
            f"the coder used its {self.max_steps} steps (agents.max_steps) without "
            f"finishing ({len(self.box.changes)} files edited so far; tools called: "
            f"{dict(self.box.used)}){self._last()}"
        )

    def _last(self) -> str:
        return f"; last refusal: {self.box.misuse[-1]}" if self.box.misuse else ""

    def _act(self, reply: Completion) -> tuple[list[Outcome], bool]:
        """The outcomes of a step's calls, and whether the work is finished."""
        if not reply.calls:
            return [self._final(reply)], True
        names = [t.name for t in self.offered]
        edit_names = {t.name for t in self.edit_tools}
        outcomes, done = [], False
        for call in reply.calls:
            if call.name == DONE.name and not self.box.changes and len(reply.calls) == 1:
                why = "no edit has applied yet: make the edits, then call done"
                outcomes.append(self.box.refuse(call, why))
            elif call.name == DONE.name:
                done = True
                outcomes.append(Outcome(call, "finishing"))
            elif call.name in edit_names:
                try:
                    edits = edits_of([call], self.edit_tools)
                except EditError as e:
                    outcomes.append(self.box.refuse(call, str(e)))
                    continue
                outcomes.append(self.box.edit(call, edits))
            elif call.name in names:
                outcomes.append(self.box.call(call))
            else:
                outcomes.append(
                    self.box.refuse(call, f"no tool {call.name!r}; the tools are {names}")
                )
        if all(c.name in edit_names for c in reply.calls):
            done = True  # a step of edits only ends the work
        if done and not all(o.ok for o in outcomes):
            outcomes = [
                Outcome(
                    o.call, "not finished: a call of this step was refused; fix it, then call done"
                )
                if o.call.name == DONE.name
                else o
                for o in outcomes
            ]
            done = False
        return outcomes, done

    def _final(self, reply: Completion) -> Outcome:
        """A final answer without calls: the edits written in its text, applied."""
        call = ToolCall("answer", {})
        try:
            edits = parse_edits(
                reply.text,
                allow_blocks=self.coder.edit_format != "whole_file",
                allow_files=self.coder.edit_format != "search_replace",
            )
        except EditError:
            return Outcome(call, "a final answer without edits")
        outcome = self.box.edit(call, edits)
        if not outcome.ok:
            raise EditError(outcome.text)
        return outcome

    def _history(self, step: int) -> str:
        """The steps so far; beyond ``HISTORY_CHARS`` the oldest results are shortened
        (the model can call the tool again)."""
        steps = list(self.steps)
        for i in range(len(steps) - 1):
            if sum(map(len, steps)) <= HISTORY_CHARS:
                break
            if len(steps[i]) > SHORT_RESULT:
                steps[i] = (
                    steps[i][:SHORT_RESULT] + "\n[... shortened; call the tool again to see it]"
                )
        head = HISTORY_HEAD.format(step=step, steps=self.max_steps)
        return head + "\n\n".join(steps)


def _key(call: ToolCall) -> str:
    return call.name + json.dumps(dict(call.arguments), sort_keys=True, default=str)


def _step_text(step: int, reply: Completion, outcomes: Sequence[Outcome]) -> str:
    """One step as the next prompt shows it: what the model wrote, each call and its
    result."""
    out = [f"## Step {step}"]
    if reply.prose.strip() and reply.calls:
        out.append("You wrote: " + reply.prose.strip()[:1000])
    for o in outcomes:
        args = json.dumps(dict(o.call.arguments), ensure_ascii=False)
        out.append(f"You called {o.call.name}({args[:2000]})\nResult:\n{o.text}")
    return "\n".join(out)


class LLMReviewer(_Role):
    """Asks the model whether a change games the metric; the reasons (and the kind of
    hack it names) go into the verdict, which the orchestrator records on the node."""

    DIFF_TOKENS = 6000

    def review(self, ctx: Context, proposal: Proposal, diff: str) -> Verdict:
        reply = self.reply(ctx, (VERDICT,), hypothesis=proposal.hypothesis, diff=self._fit(diff))
        call = call_named(reply, VERDICT.name)
        typed = parse_verdict(json.dumps(dict(call.arguments))) if call else None
        if call is not None and typed is not None:
            label = str(call.arguments.get("kind") or "none").lower()
            why = typed[1][:500] or "(no reasons given)"
            head = "llm review" if label == "none" else f"llm review ({label})"
            return Verdict(typed[0], (f"{head}: {why}",))
        text = reply.prose or reply.text
        verdict = parse_verdict(text)
        if verdict is None:
            raise AnswerError(f"reviewer: no 'VERDICT: accept|reject' line in {text[:120]!r}")
        accepted, loose = verdict
        kind = re.search(r"KIND:\s*\**\s*([\w-]+)", text, re.I)
        reasons = re.search(r"REASONS:\s*(.+)", text, re.S | re.I)
        why = (reasons.group(1).strip() if reasons else loose or text.strip())[:500]
        label = kind.group(1).lower() if kind else "none"
        head = "llm review" if label == "none" else f"llm review ({label})"
        return Verdict(accepted, (f"{head}: {why}",))

    def _fit(self, diff: str) -> str:
        """The diff within the token budget: whole if it fits, else without its context
        lines (the added and removed lines are what the review is about), then cut."""
        if estimate_tokens(diff) <= self.DIFF_TOKENS:
            return diff
        keep = [ln for ln in diff.splitlines() if not ln.startswith(" ")]
        compact = "\n".join(keep) + "\n"
        if estimate_tokens(compact) <= self.DIFF_TOKENS:
            return "[context lines left out]\n" + compact
        return "[context lines left out; cut]\n" + compact[: 4 * self.DIFF_TOKENS]


class LLMAnalyst(_Role):
    def analyse(self, ctx: Context, hypothesis: str, evaluation: str) -> str:
        text = self.ask(ctx, hypothesis=hypothesis, evaluation=evaluation)
        return " ".join(text.split())[:600]
