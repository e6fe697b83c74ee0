"""The model roles as agents: proposer, coder, reviewer, analyst, and the policy's model.

Each is its own object behind the agent protocol of ``revtree.agents.base``, built by
``wiring`` with what it uses: the run's ``Models`` (``llm_models``: clients, meter,
model choice, structure switches), and for the coder the repository context (what
candidates learnt) and the sandbox its tools run checks in. Every call reads the
candidate's context from its job (``Job.context()``, from ``contexts.ContextSource``).

Two calls per candidate (the proposer's hypothesis, then the coder's edits), or one
(``agents.calls = "one"``, OpenEvolve's way): the coder's one answer states the
hypothesis and carries the edits; ``OneCallProposer`` makes that call through the coder,
which keeps the answer for its code step and applies it (with the usual repair round).
A node resumed between the two steps has lost the answer, so its code step asks the
coder again. Errors of the model endpoint (``LLMUnreachable``) pass through unchanged.

Tools (``agents.coder.tools``; two-call mode): the coder works in steps with a
``ToolBox`` over the parent's files (hidden files left out), the run's search index,
and the run's sandbox for ``run`` checks. Its prompt then carries no retrieved files
(it searches); each step is a metered call, and a ``tools`` event says which tools it
called and which calls were refused. A server that refuses tools turns them off for
the rest of the run (plain edits instead).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from revtree.agents.base import Change, Job, Proposal, Refusal, Verdict
from revtree.agents.context import RepoContext
from revtree.agents.llm import Completion, Prompt
from revtree.agents.llm.base import StructureRefused
from revtree.agents.roles import LLMAnalyst, LLMProposer, LLMReviewer, OneCallCoder, hypothesis_of
from revtree.agents.toolcoder import ToolCoder
from revtree.agents.tools import Runner, ToolBox, archive, hidden_paths
from revtree.memory.records import Node
from revtree.orchestrator.llm_models import Models
from revtree.sandboxes.base import ExecRequest, ExecResult, Limits

if TYPE_CHECKING:
    from revtree.sandboxes import Sandbox

Changes = dict[str, bytes | None]


class ProposerAgent:
    """The proposer (two-call mode): a hypothesis and a plan for the candidate."""

    def __init__(self, models: Models) -> None:
        self.models = models

    def propose(self, job: Job) -> Proposal:
        role = self.models.role(LLMProposer, "proposer", job.node)
        return role.propose(job.context())


class CoderAgent:
    """The coder: the changes for a proposal (plain edits, or in steps with tools), one
    repair round for an answer whose edits cannot be applied, and in one-call mode the
    answer that also states the hypothesis (``answer``)."""

    repairs = 1  # one repair round for an answer whose edits cannot be applied

    def __init__(
        self, models: Models, repo: RepoContext, sandbox: Sandbox, cancel: threading.Event
    ) -> None:
        self.models, self.spec, self.repo = models, models.spec, repo
        self.sandbox, self.cancel = sandbox, cancel
        self._answers: dict[tuple[int, int], Completion] = {}  # one-call, (node, attempt)
        self._lock = threading.Lock()
        self._tools_off = False  # the server refused tools: plain edits from then on

    def answer(self, job: Job) -> Proposal:
        """One call for the hypothesis and the edits (one-call mode): the hypothesis now,
        the answer kept for the code step of the same node and attempt."""
        node = job.node
        answer = self._coder(node).ask_all(job.context(), self.spec.agents.proposer.prompt)
        with self._lock:
            self._answers[node.id, node.attempt] = answer
        return Proposal(hypothesis=hypothesis_of(answer))

    def code(self, job: Job, proposal: Proposal, refusal: Refusal | None = None) -> Changes:
        node = job.node
        coder = self._coder(node)
        if refusal is not None:  # a repair round: the refused answer and its error
            changes = coder.repair(job.context(), proposal, refusal)
        else:
            with self._lock:
                answer = self._answers.pop((node.id, node.attempt), None)
                coder.given(answer)
            if answer is None and self._tools_on():
                return self._work(job, coder, proposal)
            changes = coder.code(job.context(), proposal)
        self.repo.learn(node.id, proposal.hypothesis, job.context().files, changes)
        return changes

    def _tools_on(self) -> bool:
        """Whether the coder works with tools (see ``Role.tools``)."""
        setting = self.spec.agents.coder.tools or "auto"
        if self.spec.agents.one_call or self._tools_off or setting == "off":
            return False
        return setting == "on" or self.models.structured["coder"].kind == "tools"

    def _work(self, job: Job, coder: OneCallCoder, proposal: Proposal) -> Changes:
        """The coder's changes, made in steps with tools; a ``tools`` event sums them up."""
        a, ctx, node = self.spec.agents, job.context(related=False), job.node
        box = ToolBox(
            ctx.files,
            editable=self.spec.editable,
            hidden=hidden_paths(self.spec),
            index=self.repo.index,
            runner=self._runner(node) if a.max_runs else None,
            max_runs=a.max_runs,
        )
        loop = ToolCoder(coder, box, a.max_steps)
        try:
            changes: Changes = loop.work(ctx, proposal)
        except StructureRefused as e:
            self._tools_off = True
            switch, why = self.models.structured["coder"], f"tools refused: {e}"
            if switch.kind == "off":  # no structure to switch off: said here
                self.models.refused("coder", why)
            switch.refuse(why)
            return self.code(job, proposal)
        finally:
            self._tools_event(node, loop)
        self.repo.saw(node.id, box.read)
        self.repo.learn(node.id, proposal.hypothesis, ctx.files, changes)
        return changes

    def _tools_event(self, node: Node, loop: ToolCoder) -> None:
        box = loop.box
        used = ", ".join(f"{name} x{n}" for name, n in box.used.items()) or "no tools"
        refused = f"; {len(box.misuse)} refused: " + " | ".join(box.misuse) if box.misuse else ""
        self.models.say(
            "tools",
            f"node {node.id}: the coder worked in {len(loop.steps)} steps: {used}{refused}"[:2000],
            node.id,
            {
                "steps": len(loop.steps),
                "used": dict(box.used),
                "misuse": box.misuse,
                "runs": box.runs,
            },
        )

    def _runner(self, node: Node) -> Runner:
        """``run(command)`` for the node's tool box: the tree, as a fresh workspace of the
        run's sandbox (no protected files: the box has none), under ``agents.run_timeout``."""
        sb = self.spec.sandbox
        limits = Limits(self.spec.agents.run_timeout, sb.memory, sb.cpu_seconds, sb.output_cap)
        labels = {"revtree.step": "tool", "revtree.node": str(node.id)}

        def run(command: str, tree: Mapping[str, bytes]) -> ExecResult:
            request = ExecRequest(archive(tree), command, limits, dict(sb.env), labels)
            return self.sandbox.execute(request, self.cancel)

        return run

    def _coder(self, node: Node) -> OneCallCoder:
        edit_format = self.spec.agents.edit_format
        return self.models.role(OneCallCoder, "coder", node, edit_format=edit_format)


class OneCallProposer:
    """The proposer of one-call mode: the coder's one answer states the hypothesis."""

    def __init__(self, coder: CoderAgent) -> None:
        self.coder = coder

    def propose(self, job: Job) -> Proposal:
        return self.coder.answer(job)


class ReviewerAgent:
    """The model's review of a change: does it game the metric (``LLMReviewer``)."""

    def __init__(self, models: Models) -> None:
        self.models = models

    def review(self, job: Job, proposal: Proposal, change: Change) -> Verdict:
        role = self.models.role(LLMReviewer, "reviewer", job.node)
        return role.review(job.context(), proposal, change.diff)


class AnalystAgent:
    """A short analysis of a node's failed evaluation, for later proposals;
    ``evaluation(node)``: the evaluation in words (``ContextSource.evaluation``)."""

    def __init__(self, models: Models, evaluation: Callable[[Node], str]) -> None:
        self.models, self.evaluation = models, evaluation

    def analyse(self, job: Job) -> str | None:
        node = job.node
        if node.parent_id is None:
            return None
        hypothesis = (node.proposal or {}).get("hypothesis", "")
        analyst = self.models.role(LLMAnalyst, "analyst", node)
        return analyst.analyse(job.context(), hypothesis, self.evaluation(node))


POLICY_RULES = (
    "You steer an automated research search over a tree of code revisions. Each step "
    "you pick which node to expand next and how, to reach the best score within the "
    "budget: exploit strong nodes, debug promising failures, verify a surprising score "
    "before building on it, restart from the root when a line of work is exhausted."
)


class PolicyModel:
    """The agentic policy's model: one metered call per question, on the proposer's
    model (the coder's in one-call mode), after the run's stable prefix."""

    def __init__(self, models: Models, prefix: str) -> None:
        self.models, self.prefix = models, prefix

    def ask(self, summary: str) -> str:
        clients = self.models.clients
        llm = self.models.meter.bind("policy", None, clients.get("proposer") or clients["coder"])
        prompt = Prompt(POLICY_RULES, self.prefix, summary)
        return llm.complete(prompt, max_tokens=400, temperature=0.2).text
