"""The LLM roles: proposer, coder (with one repair round), reviewer and analyst.

Each role's prompt comes from a template file (``revtree/agents/prompts/ROLE.md``, or
the task's own via ``[agents.ROLE] prompt``): the part above ``=== USER ===`` is the
system prompt, the part below the variable user message. The stable prefix between
them (task, goal, baseline code) is the same for every call of a run, so providers
cache it. Bad answers raise errors that say what was wrong; the orchestrator records
them on the node.

The tools the roles are offered and the reading of their calls (structured answers)
are in :mod:`revtree.agents.structured`; the coder's tool loop is
:class:`revtree.agents.toolcoder.ToolCoder`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from string import Template

from revtree.agents.base import Context, Proposal, Refusal, Verdict
from revtree.agents.context import ContextBuilder
from revtree.agents.edits import apply_edits
from revtree.agents.formats import EditFormat, make_format
from revtree.agents.llm.base import (
    LLM,
    Completion,
    LLMError,
    Prompt,
    Structure,
    StructureRefused,
    Tool,
    estimate_tokens,
)
from revtree.agents.parsing import parse_proposal, parse_verdict
from revtree.agents.structured import (
    PROPOSE,
    TOOLS_HELP,
    VERDICT,
    AnswerError,
    Structured,
    call_named,
    edits_of,
    structure_help,
)
from revtree.errors import EditError, EditRefused, EditUnreadable
from revtree.tasks.spec import TaskSpec

PROMPTS = Path(__file__).parent / "prompts"
OPERATORS = {
    "draft": "write a fresh approach to the goal, starting from the baseline",
    "improve": "improve the parent further",
    "debug": "the parent failed: find and fix the cause, keeping its idea",
    "crossover": "combine the strengths of the parent and the other parents shown",
    "tune": "adjust the parent's parameters",
}


@functools.lru_cache(maxsize=64)
def load_template(role: str, override: str | None, root: str) -> tuple[Template, Template]:
    path = Path(root) / override if override else PROMPTS / f"{role}.md"
    if override and not path.resolve().is_relative_to(Path(root).resolve()):
        # a link out of the task folder (the task's loader refuses other paths)
        raise LLMError(f"the {role} prompt template {override} leads out of the task folder")
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
    tools_help = TOOLS_HELP  # in a structured answer's rules, for ${edit_format_help}

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
        return self.structured_call(lambda s: self.prompt(ctx, s, values), tools)

    def structured_call(
        self, build: Callable[[Structure | None], Prompt], tools: tuple[Tool, ...]
    ) -> Completion:
        """The answer to ``build(structure)``; on a refusal, to ``build(None)``."""
        kind = self.structured.kind if tools else "off"
        if kind != "off":
            try:
                return self.call(build(Structure(kind, self.role, tools)))
            except StructureRefused as e:
                self.structured.refuse(str(e))
        return self.call(build(None))

    def prompt(self, ctx: Context, s: Structure | None, values: Mapping[str, str]) -> Prompt:
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
        rules = self.system.safe_substitute({**values, "edit_format_help": self.tools_help})
        return rules + "\n\n" + structure_help(s)

    def call(self, prompt: Prompt) -> Completion:
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
    def __init__(
        self, *args: object, edit_format: str | EditFormat = "auto", **kwargs: object
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.format = make_format(edit_format) if isinstance(edit_format, str) else edit_format
        self.tools_help = self.format.tools_help
        _, self.repair_template = load_template("repair", None, self.spec.root)

    def tools(self, hypothesis: bool = False) -> tuple[Tool, ...]:
        """The coder's tools: the edit tools of its edit format, and ``propose`` when the
        answer also states the hypothesis (one-call mode)."""
        return ((PROPOSE,) if hypothesis else ()) + self.format.tools

    def code(self, ctx: Context, proposal: Proposal) -> dict[str, bytes | None]:
        """The changes for the plan. An answer that cannot be applied raises
        ``EditRefused`` carrying it: the pipeline's repair edge hands it to ``repair``."""
        answer = self.reply(
            ctx,
            self.tools(),
            hypothesis=proposal.hypothesis,
            plan=proposal.plan or "-",
            edit_format_help=self.format.help,
        )
        try:
            return self._apply(answer, ctx)
        except EditError as e:
            refused = EditUnreadable if isinstance(e, EditUnreadable) else EditRefused
            raise refused(str(e), answer.text) from e

    def repair(self, ctx: Context, proposal: Proposal, refusal: Refusal) -> dict[str, bytes | None]:
        """One repair round: the refused answer and its error, shown back to the model."""
        repair = self.user.safe_substitute(
            hypothesis=proposal.hypothesis,
            plan=proposal.plan or "-",
            parent_files=ctx.parent_files,
            editable=", ".join(self.spec.editable),
        )
        user = (
            repair
            + "\n\nYour previous answer:\n"
            + refusal.answer[-6000:]
            + "\n\n"
            + self.repair_template.safe_substitute(error=refusal.error)
        )
        values = {"edit_format_help": self.format.help}
        again = self.structured_call(
            lambda s: Prompt(self._system(s, values), ctx.prefix, user, structure=s),
            self.tools(),
        )
        rounds = "one repair round" if refusal.round == 0 else f"{refusal.round + 1} repair rounds"
        try:
            return self._apply(again, ctx)
        except EditError as second:
            refused = EditUnreadable if isinstance(second, EditUnreadable) else EditRefused
            raise refused(
                f"{second} (after {rounds}; first error: {refusal.first or refusal.error})",
                again.text,
            ) from second

    def _apply(self, answer: Completion, ctx: Context) -> dict[str, bytes | None]:
        """The changes of an answer: its edit calls, else the edits written in its text
        (each read by the edit format); either way applied by ``apply_edits`` (editable
        globs, EVOLVE-BLOCK regions)."""
        if answer.calls and self.format.tools:
            offered = self.tools(hypothesis=True)
            edits = edits_of(answer.calls, offered, self.format.tools, self.format.edit_of)
        else:  # a format with no tools: a one-call answer's edits are in its prose
            try:
                edits = self.format.parse(answer.prose if answer.calls else answer.text)
            except EditError as e:  # nothing could be read (as against: read, not applied)
                raise EditUnreadable(str(e), answer.text) from e
        changes = apply_edits(edits, ctx.files, self.spec.editable)
        if not changes:
            raise EditError("the edits change nothing")
        return dict(changes)


REVIEW_REMINDER = (
    "That answer gives no verdict that can be read. Answer again in exactly "
    "this form, the first line being the verdict:\nVERDICT: accept or reject\n"
    "KIND: none, hard-coding, evaluator-data, special-casing, scoring-channel or "
    "tampering\nREASONS: one or two sentences"
)


class LLMReviewer(_Role):
    """Asks the model whether a change games the metric; the reasons (and the kind of
    hack it names) go into the verdict, which the orchestrator records on the node.

    An answer with no verdict that can be read is asked again once, with the answer and
    a reminder of the form (``REVIEW_REMINDER``); a second such answer raises
    ``AnswerError``: the reviewer's failure, never a rejection of the candidate."""

    DIFF_TOKENS = 6000

    def review(self, ctx: Context, proposal: Proposal, diff: str) -> Verdict:
        values = {"hypothesis": proposal.hypothesis, "diff": self._fit(diff)}
        reply = self.reply(ctx, (VERDICT,), **values)
        verdict = self._verdict(reply)
        if verdict is None:
            shown = (reply.prose or reply.text)[-2000:]
            again = f"\n\nYour previous answer:\n{shown}\n\n{REVIEW_REMINDER}"

            def build(s: Structure | None) -> Prompt:
                p = self.prompt(ctx, s, values)
                return Prompt(p.system, p.prefix, p.user + again, s)

            reply = self.structured_call(build, (VERDICT,))
            verdict = self._verdict(reply)
        if verdict is None:
            text = reply.prose or reply.text
            raise AnswerError(
                f"reviewer: no 'VERDICT: accept|reject' line, even when reminded of the form, "
                f"in {text[:120]!r}"
            )
        return verdict

    def _verdict(self, reply: Completion) -> Verdict | None:
        """The verdict of an answer: its ``verdict`` call, else its text; None if none."""
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
            return None
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


ONE_CALL_RULES = (
    "You also choose the change yourself: from the parent, its evaluation and what "
    "earlier rounds learnt, pick ONE concrete, testable change that should improve the "
    "score. Never change the evaluator, hard-code answers or detect the test data.\n"
    "Begin your answer with one line 'HYPOTHESIS: what you change and why it improves "
    "the score', then write the edits."
)
ONE_CALL_ASK = "State your HYPOTHESIS in one line, then write the edits now."
REASONING = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
HYPOTHESIS = re.compile(r"^\W*hypothesis\W*?[:\-]\**\s*(.+)$", re.I | re.M)
NOT_PROSE = ("```", "<<<<<<<", "=======", ">>>>>>>", "=== FILE", "--- ", "+++ ", "@@")


class OneCallCoder(LLMCoder):
    """The coder; in one-call mode, also the proposer. ``answer``, when given, is used
    as the coder's first answer instead of a call (it came with the hypothesis)."""

    answer: Completion | None = None

    def given(self, answer: Completion | None) -> None:
        """Use ``answer`` (the one-call answer kept since the propose step) as the next
        reply; None: the next reply is a call."""
        self.answer = answer

    def ask_all(self, ctx: Context, proposer_template: str | None) -> Completion:
        """One call for the hypothesis and the edits: the coder's rules and the
        proposer's view of the candidate (parent, evaluation, memory)."""
        _, situation = load_template("proposer", proposer_template, self.spec.root)
        self.user = Template(situation.template + "\n\n" + ONE_CALL_ASK)
        system = Template(self.system.template + "\n\n" + ONE_CALL_RULES)
        self.system = system
        tools = self.tools(hypothesis=True)
        return self.reply(ctx, tools, edit_format_help=self.format.help)

    def reply(self, ctx: Context, tools: tuple[Tool, ...] = (), **values: str) -> Completion:
        answer, self.answer = self.answer, None
        return answer if answer is not None else super().reply(ctx, tools, **values)


def hypothesis_of(answer: Completion) -> str:
    """The hypothesis a one-call answer states: its ``propose`` call's, else its
    HYPOTHESIS line, else its first line of prose, else a placeholder."""
    call = call_named(answer, PROPOSE.name)
    typed = call.arguments.get("hypothesis") if call else None
    if isinstance(typed, str) and typed.strip():
        return typed.strip()[:500]
    text = REASONING.sub("", answer.prose if answer.calls else answer.text)
    found = HYPOTHESIS.search(text)
    if found:
        return found.group(1).strip().strip("*").strip()[:500]
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(NOT_PROSE) and not line.startswith("#"):
            return line[:300]
    return "(the answer states no hypothesis)"
