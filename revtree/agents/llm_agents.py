"""The LLM agents: proposer, coder (with one repair round) and reviewer.

Each role's prompt comes from a template file (``revtree/agents/prompts/ROLE.md``, or
the task's own via ``[agents.ROLE] prompt``): the part above ``=== USER ===`` is the
system prompt, the part below the variable user message. The stable prefix between
them (task, goal, baseline code) is the same for every call of a run, so providers
cache it. Bad answers raise errors that say what was wrong; the orchestrator records
them on the node.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from revtree.agents.base import Proposal, Verdict
from revtree.agents.edits import apply_edits, parse_edits
from revtree.agents.llm.base import LLM, LLMError, Prompt, estimate_tokens
from revtree.agents.parsing import parse_proposal, parse_verdict
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
    """The stable part of every prompt of a run: the task and the baseline code."""
    head = [
        f"# Task: {spec.name}",
        spec.goal or "(no goal text given)",
        f"Score: {spec.evaluate.metric}, to {spec.evaluate.direction}.",
        f"Editable files (globs): {', '.join(spec.editable)}",
        f"Evaluator and its data (protected, never change): {', '.join(spec.protected) or '-'}",
        "",
        "# Baseline code",
    ]
    return "\n".join(head) + "\n" + render_files(baseline, budget_tokens)


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
    ) -> None:
        self.role, self.llm, self.spec = role, llm, spec
        self.max_tokens, self.temperature = max_tokens, temperature
        self.system, self.user = load_template(role, template, spec.root)

    def ask(self, ctx: Context, **values: str) -> str:
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
        prompt = Prompt(
            self.system.safe_substitute(base), ctx.prefix, self.user.safe_substitute(base)
        )
        return self._call(prompt)

    def _call(self, prompt: Prompt) -> str:
        reply = self.llm.complete(prompt, max_tokens=self.max_tokens, temperature=self.temperature)
        if reply.truncated:
            raise AnswerError(
                f"{self.role}: the answer was cut off at max_tokens "
                f"({self.max_tokens}); raise agents.{self.role}.max_tokens"
            )
        if not reply.text.strip():
            raise AnswerError(f"{self.role}: the model returned an empty answer")
        return reply.text


class LLMProposer(_Role):
    def propose(self, ctx: Context) -> Proposal:
        hypothesis, plan = parse_proposal(self.ask(ctx))
        return Proposal(hypothesis=hypothesis, plan=plan)


class LLMCoder(_Role):
    def __init__(self, *args: object, edit_format: str = "auto", **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.edit_format = edit_format
        _, self.repair = load_template("repair", None, self.spec.root)

    def code(self, ctx: Context, proposal: Proposal) -> dict[str, bytes | None]:
        """The changes for the plan; a failed apply gets one repair round."""
        answer = self.ask(
            ctx,
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
            again = Prompt(
                self.system.safe_substitute(edit_format_help=FORMAT_HELP[self.edit_format]),
                ctx.prefix,
                repair
                + "\n\nYour previous answer:\n"
                + answer[-6000:]
                + "\n\n"
                + self.repair.safe_substitute(error=str(first)),
            )
            try:
                return self._apply(self._call(again), ctx)
            except EditError as second:
                raise EditError(
                    f"{second} (after one repair round; first error: {first})"
                ) from second

    def _apply(self, answer: str, ctx: Context) -> dict[str, bytes | None]:
        edits = parse_edits(
            answer,
            allow_blocks=self.edit_format != "whole_file",
            allow_files=self.edit_format != "search_replace",
        )
        changes = apply_edits(edits, ctx.files, self.spec.editable)
        if not changes:
            raise EditError("the edits change nothing")
        return dict(changes)


class LLMReviewer(_Role):
    """Asks the model whether a change games the metric; the reasons (and the kind of
    hack it names) go into the verdict, which the orchestrator records on the node."""

    DIFF_TOKENS = 6000

    def review(self, ctx: Context, proposal: Proposal, diff: str) -> Verdict:
        text = self.ask(ctx, hypothesis=proposal.hypothesis, diff=self._fit(diff))
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
