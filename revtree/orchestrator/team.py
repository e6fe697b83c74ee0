"""Wiring of the LLM agents: models per role, metered, and the context each call sees.

The context of a candidate: the stable prefix (task, goal, baseline code: the same for
every call of the run, so providers cache it), the parent's files that differ from
the baseline, the parent's last evaluation, and memory (lessons of finished nodes).

Two calls per candidate (the proposer's hypothesis, then the coder's edits), or one
(``agents.calls = "one"``, OpenEvolve's way): the coder's one answer states the
hypothesis and carries the edits; the proposal step makes that call and keeps the
answer for the code step, which applies it (with the usual repair round). A node
resumed between the two steps has lost the answer, so its code step asks the coder
again. Errors of the model endpoint (``LLMUnreachable``) pass through unchanged.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from string import Template
from typing import TYPE_CHECKING, Any

from revtree.agents.base import Proposal, Verdict
from revtree.agents.evaluator import HOLDOUT
from revtree.agents.knobs import derive_seed
from revtree.agents.lessons import render_memory
from revtree.agents.llm import LLM, Ensemble, LLMError, Prompt, detect_model, make_llm
from revtree.agents.llm_agents import (
    FORMAT_HELP,
    Context,
    LLMAnalyst,
    LLMCoder,
    LLMProposer,
    LLMReviewer,
    load_template,
    render_files,
    task_prefix,
)
from revtree.memory.records import Node
from revtree.orchestrator.meter import Meter
from revtree.tasks.spec import Role, TaskSpec

if TYPE_CHECKING:
    from revtree.orchestrator.runner import Orchestrator

TAIL = 1500
ROLES = ("proposer", "coder", "reviewer", "analyst")


def uses_llm(spec: TaskSpec) -> bool:
    """Whether LLM agents drive this task (see ``[agents] mode``)."""
    a = spec.agents
    if a.mode != "auto":
        return a.mode == "llm"
    roles = (a.proposer, a.coder)
    return bool(a.model or any(r.model or r.ensemble for r in roles) or detect_model())


class Team:
    """Proposer, coder and reviewer on metered models, for one run."""

    def __init__(self, orch: Orchestrator) -> None:
        self.orch, self.spec = orch, orch.spec
        self.meter = Meter(orch.store, orch.run_id, orch.spec)
        self.one_call = self.spec.agents.one_call
        roles = ("coder", "reviewer", "analyst") if self.one_call else ROLES
        self.models = {
            name: self._model(name, getattr(self.spec.agents, name))
            for name in roles
            if getattr(self.spec.agents, name).enabled
        }
        self._answers: dict[tuple[int, int], str] = {}  # one-call answers, (node, attempt)
        root = orch.nodes[0]
        assert root.commit is not None
        self.baseline = orch.git.read_files(root.commit)
        self.prefix = task_prefix(self.spec, self.baseline, self.spec.agents.context_tokens)
        self._contexts: OrderedDict[int, Context] = OrderedDict()
        self._lock = threading.Lock()

    def _model(self, name: str, role: Role) -> LLM:
        a = self.spec.agents
        kw: dict[str, Any] = {
            "base_url": a.base_url,
            "api_key_env": a.api_key_env,
            "timeout": a.timeout,
            "max_retries": a.max_retries,
            "stream": a.stream,
        }
        if role.ensemble:
            members = [make_llm(m.model, **kw) for m in role.ensemble]
            seed = derive_seed(self.spec.search.seed, "ensemble", name)
            return Ensemble(members, [m.weight for m in role.ensemble], seed)
        model = role.model or a.model or detect_model()
        if model is None:
            raise LLMError(
                f"no model for the {name}: set agents.model, agents.{name}.model, "
                "--model, or OPENAI_API_KEY / ANTHROPIC_API_KEY"
            )
        return make_llm(model, **kw)

    def _role(self, cls: type[Any], name: str, node: Node, **kw: Any) -> Any:
        a, role = self.spec.agents, getattr(self.spec.agents, name)
        llm = self.meter.bind(name, node.id, self.models[name], node.attempt)
        return cls(
            name,
            llm,
            self.spec,
            role.max_tokens or a.max_tokens,
            a.temperature if role.temperature is None else role.temperature,
            role.prompt,
            **kw,
        )

    # -- the context ----------------------------------------------------------------
    def context(self, node: Node) -> Context:
        """What every role sees of this candidate, built once (at its proposal) and shared
        by the coder, reviewer and analyst of the same node."""
        with self._lock:
            cached = self._contexts.get(node.id)
        if cached is None:
            cached = self._build_context(node)
            with self._lock:
                self._contexts[node.id] = cached
                while len(self._contexts) > 256:
                    self._contexts.popitem(last=False)
        return cached

    def _build_context(self, node: Node) -> Context:
        orch = self.orch
        assert node.parent_id is not None
        parent = orch.nodes[node.parent_id]
        assert parent.commit is not None
        files = orch.git.read_files(parent.commit)
        changed = {p: d for p, d in files.items() if self.baseline.get(p) != d}
        others = ""
        for other_id in node.extra_parents:
            other = orch.nodes[other_id]
            hyp = (other.proposal or {}).get("hypothesis", "")
            others += f"Other parent: node {other_id}, score {other.score}: {hyp}\n"
            if other.commit:
                diff = orch.git.diff(parent.commit, other.commit)
                others += f"Its diff against the parent:\n{diff[-4000:]}\n"
        with orch.lock:
            snapshot = dict(orch.nodes)
        memory = render_memory(
            snapshot, parent.id, self.spec.maximize, self.spec.agents.memory_tokens, node.operator
        )
        return Context(
            node_id=node.id,
            operator=node.operator,
            parent_id=parent.id,
            parent_score=str(parent.score_of(self.spec.maximize)),
            prefix=self.prefix,
            parent_files=render_files(changed, self.spec.agents.context_tokens // 2)
            if changed
            else "(none: the parent is the baseline)",
            parent_eval=self._evaluation(parent),
            memory=memory,
            others=others,
            files=files,
        )

    def _evaluation(self, node: Node) -> str:
        evals = [  # this attempt's only: an earlier one (see ``retry``) is history
            e
            for e in self.orch.store.evaluations(self.orch.run_id, node.id)
            if e.stage != HOLDOUT and e.attempt == node.attempt
        ]
        if not evals:
            return "(not evaluated yet)" if not node.error else f"failed: {node.error}"
        last = evals[-1]
        out = [
            f"stage {last.stage}, repeat {last.repeat}: "
            + ("ok" if last.ok else f"FAILED ({last.error_kind}): {last.error}")
        ]
        if last.metrics:
            out.append("metrics: " + json.dumps(last.metrics)[:TAIL])
        if last.stdout_tail.strip():
            out.append("stdout (tail):\n" + last.stdout_tail[-TAIL:])
        if last.stderr_tail.strip():
            out.append("stderr (tail):\n" + last.stderr_tail[-TAIL:])
        return "\n".join(out)

    # -- the roles --------------------------------------------------------------------
    def propose(self, node: Node) -> Proposal:
        if self.one_call:
            coder = self._coder(node)
            answer = coder.ask_all(self.context(node), self.spec.agents.proposer.prompt)
            with self._lock:
                self._answers[node.id, node.attempt] = answer
            return Proposal(hypothesis=hypothesis_of(answer))
        proposal: Proposal = self._role(LLMProposer, "proposer", node).propose(self.context(node))
        return proposal

    def code(self, node: Node, proposal: Proposal) -> dict[str, bytes | None]:
        coder = self._coder(node)
        with self._lock:
            coder.answer = self._answers.pop((node.id, node.attempt), None)
        changes: dict[str, bytes | None] = coder.code(self.context(node), proposal)
        return changes

    def _coder(self, node: Node) -> OneCallCoder:
        coder: OneCallCoder = self._role(
            OneCallCoder, "coder", node, edit_format=self.spec.agents.edit_format
        )
        return coder

    def review(self, node: Node, proposal: Proposal, diff: str) -> Verdict | None:
        if "reviewer" not in self.models:
            return None
        verdict: Verdict = self._role(LLMReviewer, "reviewer", node).review(
            self.context(node), proposal, diff
        )
        return verdict

    def analyse(self, node: Node) -> str | None:
        """A short analysis of the node's evaluation, for later proposals (analyst role)."""
        if "analyst" not in self.models:
            return None
        hypothesis = (node.proposal or {}).get("hypothesis", "")
        analyst = self._role(LLMAnalyst, "analyst", node)
        ctx = self.context(node) if node.parent_id is not None else None
        if ctx is None:
            return None
        text: str = analyst.analyse(ctx, hypothesis, self._evaluation(node))
        return text

    def ask_policy(self, summary: str) -> str:
        """One metered call for the agentic policy (on the proposer's model, or the
        coder's in one-call mode)."""
        llm = self.meter.bind("policy", None, self.models.get("proposer") or self.models["coder"])
        prompt = Prompt(POLICY_RULES, self.prefix, summary)
        return llm.complete(prompt, max_tokens=400, temperature=0.2).text


POLICY_RULES = (
    "You steer an automated research search over a tree of code revisions. Each step "
    "you pick which node to expand next and how, to reach the best score within the "
    "budget: exploit strong nodes, debug promising failures, verify a surprising score "
    "before building on it, restart from the root when a line of work is exhausted."
)


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
    """The coder; in one-call mode, also the proposer. ``answer``, when set, is used as
    the coder's first answer instead of a call (it came with the hypothesis)."""

    answer: str | None = None

    def ask_all(self, ctx: Context, proposer_template: str | None) -> str:
        """One call for the hypothesis and the edits: the coder's rules and the
        proposer's view of the candidate (parent, evaluation, memory)."""
        _, situation = load_template("proposer", proposer_template, self.spec.root)
        self.user = Template(situation.template + "\n\n" + ONE_CALL_ASK)
        system = Template(self.system.template + "\n\n" + ONE_CALL_RULES)
        self.system = system
        return self.ask(ctx, edit_format_help=FORMAT_HELP[self.edit_format])

    def ask(self, ctx: Context, **values: str) -> str:
        answer, self.answer = self.answer, None
        return answer if answer is not None else super().ask(ctx, **values)


def hypothesis_of(answer: str) -> str:
    """The hypothesis a one-call answer states: its HYPOTHESIS line, else its first line
    of prose, else a placeholder."""
    text = REASONING.sub("", answer)
    found = HYPOTHESIS.search(text)
    if found:
        return found.group(1).strip().strip("*").strip()[:500]
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(NOT_PROSE) and not line.startswith("#"):
            return line[:300]
    return "(the answer states no hypothesis)"
