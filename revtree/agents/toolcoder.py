"""The coder's tool loop: a tool-using coder works in steps of tool calls (search,
read, run, edit, done) until it is done or its step budget is spent."""

from __future__ import annotations

import json
from collections.abc import Sequence

from revtree.agents.base import Proposal
from revtree.agents.llm.base import Completion, Prompt, Structure, ToolCall
from revtree.agents.roles import Context, LLMCoder
from revtree.agents.structured import edits_of
from revtree.agents.tools import DONE, RUN, Outcome, ToolBox
from revtree.errors import EditError


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
        self.edit_tools = coder.format.tools
        self.offered = box.tools + self.edit_tools + (DONE,)
        self.steps: list[str] = []

    def work(self, ctx: Context, proposal: Proposal) -> dict[str, bytes | None]:
        c, s = self.coder, Structure("tools", self.coder.role, self.offered)
        values = {
            "hypothesis": proposal.hypothesis,
            "plan": proposal.plan or "-",
            "edit_format_help": c.format.help,
        }
        first = c.prompt(ctx, s, values)
        run = ", check with run" if RUN in self.offered else ""
        system = first.system + "\n\n" + WORK_RULES.format(run=run, steps=self.max_steps)
        last_refused: tuple[str, ...] = ()
        for step in range(1, self.max_steps + 1):
            user = first.user + (self._history(step) if self.steps else "")
            reply = c.call(Prompt(system, ctx.prefix, user, structure=s))
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
                    fmt = self.coder.format
                    edits = edits_of([call], self.edit_tools, fmt.tools, fmt.edit_of)
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
            edits = self.coder.format.parse(reply.text)
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
