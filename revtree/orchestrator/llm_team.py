"""Wiring of the LLM agents: models per role, metered, and the context each call sees.

The context of a candidate (``revtree.agents.context``): the stable prefix (task, goal,
the editable files, a repository map: the same for every call of the run, so providers
cache it), the parent's files that differ from the baseline, the files search finds
for the goal, the hypothesis and the parent's failure, the parent's last evaluation,
and memory (lessons of finished nodes, and where earlier candidates found things).
What the budget leaves out, and what a candidate learnt, are ``context`` events.

Two calls per candidate (the proposer's hypothesis, then the coder's edits), or one
(``agents.calls = "one"``, OpenEvolve's way): the coder's one answer states the
hypothesis and carries the edits; the proposal step makes that call and keeps the
answer for the code step, which applies it (with the usual repair round). A node
resumed between the two steps has lost the answer, so its code step asks the coder
again. Errors of the model endpoint (``LLMUnreachable``) pass through unchanged.

Structured answers (``agents.structured``, per role): the roles on one model share one
``Structured`` switch; a server's refusal turns it off for the rest of the run and is
recorded once, as a warning event.

Tools (``agents.coder.tools``; two-call mode): the coder works in steps with a
``ToolBox`` over the parent's files (hidden files left out), the run's search index,
and the run's sandbox for ``run`` checks. Its prompt then carries no retrieved files
(it searches); each step is a metered call, and a ``tools`` event says which tools it
called and which calls were refused. A server that refuses tools turns them off for
the rest of the run (plain edits instead).
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from revtree.agents.base import Change, Job, Proposal, Refusal, Verdict
from revtree.agents.context import Learnt, RepoContext
from revtree.agents.knobs import derive_seed
from revtree.agents.lessons import render_memory
from revtree.agents.llm import (
    LLM,
    Completion,
    Ensemble,
    LLMError,
    Prompt,
    detect_model,
    make_llm,
    split_model,
)
from revtree.agents.llm.base import StructureRefused, estimate_tokens
from revtree.agents.llm.meter import Meter
from revtree.agents.retrieval import make_embedder
from revtree.agents.roles import (
    Context,
    LLMAnalyst,
    LLMProposer,
    LLMReviewer,
    OneCallCoder,
    hypothesis_of,
    render_files,
)
from revtree.agents.structured import Structured, structured_kind
from revtree.agents.toolcoder import ToolCoder
from revtree.agents.tools import Runner, ToolBox, archive, hidden_paths
from revtree.memory.records import Node, NodeStatus
from revtree.memory.stages import GUARD, HOLDOUT
from revtree.orchestrator.model_choice import ModelChoice, Setting
from revtree.sandboxes.base import ExecRequest, ExecResult, Limits
from revtree.tasks.spec import Role, TaskSpec

if TYPE_CHECKING:
    from revtree.memory import Store
    from revtree.memory.gitstore import GitStore
    from revtree.orchestrator.mirror import Mirror
    from revtree.sandboxes import Sandbox

TAIL = 1500
RELATED_HEAD = (
    "\n\nOther files of the parent related to this candidate (found by search over the "
    "repository; the map above lists the rest):\n"
)
ROLES = ("proposer", "coder", "reviewer", "analyst")


def role_models(spec: TaskSpec) -> dict[str, LLM]:
    """The model client of each enabled role (not the proposer in one-call mode), as a
    run builds them: raises ``LLMError`` for a model that cannot be called (no key, no
    base URL, an unknown provider), before any call is made."""
    a = spec.agents
    roles = ("coder", "reviewer", "analyst") if a.one_call else ROLES
    return {
        name: role_model(spec, name, getattr(a, name)) for name in roles if getattr(a, name).enabled
    }


def role_model(spec: TaskSpec, name: str, role: Role) -> LLM:
    a = spec.agents
    kw: dict[str, Any] = {
        "base_url": a.base_url,
        "api_key_env": a.api_key_env,
        "timeout": a.timeout,
        "max_retries": a.max_retries,
        "stream": a.stream,
    }
    if role.ensemble:
        members = [make_llm(m.model, **kw) for m in role.ensemble]
        seed = derive_seed(spec.search.seed, "ensemble", name)
        return Ensemble(members, [m.weight for m in role.ensemble], seed)
    model = role.model or a.model or detect_model()
    if model is None:
        raise LLMError(
            f"no model for the {name}: set agents.model, agents.{name}.model, "
            "--model, or OPENAI_API_KEY / ANTHROPIC_API_KEY"
        )
    return make_llm(model, **kw)


class Team:
    """Proposer, coder, reviewer and analyst on metered models, for one run: the agent
    protocol of ``revtree.agents.base`` (``propose(job)``, ``code(job, …)``, …), each
    call with the context this module builds for the job's node."""

    repairs = 1  # one repair round for an answer whose edits cannot be applied

    def __init__(
        self,
        store: Store,
        spec: TaskSpec,
        git: GitStore,
        mirror: Mirror,
        sandbox: Sandbox,
        cancel: threading.Event,
    ) -> None:
        self.store, self.run_id, self.spec = store, mirror.run_id, spec
        self.git, self.mirror, self.sandbox, self.cancel = git, mirror, sandbox, cancel
        self.meter = Meter(store, self.run_id, spec)
        self.one_call = self.spec.agents.one_call
        self.models = role_models(spec)
        self.structured = self._structured()
        setting = Setting.of(spec.agents, spec.search.seed, spec.maximize)
        self.choice = ModelChoice(
            store, setting, self.run_id, mirror.nodes, self.models, self.meter.by_node
        )
        self._answers: dict[tuple[int, int], Completion] = {}  # one-call, (node, attempt)
        root = mirror.get(0)
        assert root.commit is not None
        self.baseline = git.read_files(root.commit)
        a = self.spec.agents
        self.repo = RepoContext(
            self.spec,
            self.baseline,
            embedder=make_embedder(a.embeddings_model, a.base_url, a.api_key_env),
            learnt=self._learnt(),
            record=self._context_event,
        )
        self.prefix = self.repo.prefix
        self._contexts: OrderedDict[tuple[int, str, bool], Context] = OrderedDict()
        self._lock = threading.Lock()
        self._tools_off = False  # the server refused tools: plain edits from then on

    def _models_of(self, role: Role) -> list[str]:
        if role.ensemble:
            return [m.model for m in role.ensemble]
        model = role.model or self.spec.agents.model or detect_model()
        return [model] if model else []

    def _structured(self) -> dict[str, Structured]:
        """Each role's structure switch, one per model (roles on a model share it)."""
        a, out, shared = self.spec.agents, {}, dict[tuple[str, ...], Structured]()
        for name in self.models:
            role = getattr(a, name)
            models = self._models_of(role)
            kind = structured_kind(
                role.structured or a.structured, [split_model(m)[0] for m in models]
            )
            key = (kind, *models)
            if key not in shared:
                shared[key] = Structured(kind, functools.partial(self._refused, models))
            out[name] = shared[key]
        return out

    def _refused(self, models: list[str], why: str) -> None:
        self.store.add_event(
            self.run_id,
            "warning",
            f"{', '.join(models)}: structured answers refused; plain text from now on ({why})",
            None,
            {"models": models, "structured": "off"},
        )

    def _role(self, cls: type[Any], name: str, node: Node, **kw: Any) -> Any:
        a, role = self.spec.agents, getattr(self.spec.agents, name)
        model = self.choice.llm(name, node, self.models[name])
        llm = self.meter.bind(name, node.id, model, node.attempt)
        return cls(
            name,
            llm,
            self.spec,
            role.max_tokens or a.max_tokens,
            a.temperature if role.temperature is None else role.temperature,
            role.prompt,
            structured=self.structured[name],
            **kw,
        )

    # -- the context ----------------------------------------------------------------
    def context(self, node: Node, related: bool = True) -> Context:
        """What every role sees of this candidate, built once (at its proposal) and shared
        by the coder, reviewer and analyst of the same node; without ``related`` files
        for a coder that searches with tools."""
        hypothesis = "" if self.one_call else (node.proposal or {}).get("hypothesis", "")
        key = (node.id, hypothesis, related)  # the coder's also searches by the hypothesis
        with self._lock:
            cached = self._contexts.get(key)
        if cached is None:
            cached = self._build_context(node, hypothesis, related)
            with self._lock:
                self._contexts[key] = cached
                while len(self._contexts) > 256:
                    self._contexts.popitem(last=False)
        return cached

    def _build_context(self, node: Node, hypothesis: str = "", related: bool = True) -> Context:
        parent = self.mirror.parent(node)
        assert parent.commit is not None
        files = self.git.read_files(parent.commit)
        changed = {p: d for p, d in files.items() if self.baseline.get(p) != d}
        others = ""
        for other_id in node.extra_parents:
            other = self.mirror.get(other_id)
            hyp = (other.proposal or {}).get("hypothesis", "")
            others += f"Other parent: node {other_id}, score {other.score}: {hyp}\n"
            if other.commit:
                diff = self.git.diff(parent.commit, other.commit)
                others += f"Its diff against the parent:\n{diff[-4000:]}\n"
        snapshot = self.mirror.copy()
        memory = render_memory(
            snapshot, parent.id, self.spec.maximize, self.spec.agents.memory_tokens, node.operator
        )
        parent_eval = self._evaluation(parent)
        budget = self.spec.agents.context_tokens
        shown = render_files(changed, budget // 2) if changed else ""
        query = "\n".join([self.spec.goal, hypothesis, self._trouble(parent, parent_eval)])
        left = budget - self.repo.builder.prefix_tokens - estimate_tokens(shown)
        found = self.repo.related(node.id, files, query, max(left, 0)) if related else None
        if found is not None and found.text:
            shown += RELATED_HEAD + found.text
        where = self.repo.memory(query)
        return Context(
            node_id=node.id,
            operator=node.operator,
            parent_id=parent.id,
            parent_score=str(parent.score_of(self.spec.maximize)),
            prefix=self.prefix,
            parent_files=shown.strip() or "(none: the parent is the baseline)",
            parent_eval=parent_eval,
            memory=memory + ("\n\n" + where if where else ""),
            others=others,
            files=files,
        )

    def _trouble(self, parent: Node, evaluation: str) -> str:
        """What retrieval searches by besides the goal and the hypothesis: the parent's
        failure (its error and evaluation), or, when it succeeded, its hypothesis."""
        if parent.status is NodeStatus.SUCCEEDED:
            return (parent.proposal or {}).get("hypothesis", "")
        return f"{parent.error or ''}\n{evaluation}"

    def _context_event(
        self, message: str, node_id: int | None, data: dict[str, Any] | None
    ) -> None:
        self.store.add_event(self.run_id, "context", message, node_id, data)

    def _learnt(self) -> list[Learnt]:
        """What earlier candidates of this run learnt about the repository (from the
        live log, so a resumed run keeps it)."""
        out, after = [], 0
        while batch := self.store.events_since(self.run_id, after):
            after = batch[-1].seq
            out += [
                Learnt.from_json(e.node_id or 0, e.data["learnt"])
                for e in batch
                if e.kind == "context" and e.data and "learnt" in e.data
            ]
        return out

    def _evaluation(self, node: Node) -> str:
        evals = [  # this attempt's only: an earlier one (see ``retry``) is history
            e
            for e in self.store.evaluations(self.run_id, node.id)
            if e.stage not in (HOLDOUT, GUARD) and e.attempt == node.attempt
        ]
        if not evals:
            return "(not evaluated yet)" if not node.error else f"failed: {node.error}"
        last = evals[-1]
        out = [
            f"stage {last.stage}, repeat {last.repeat}: "
            + ("ok" if last.ok else f"FAILED ({last.error_kind}): {last.error}")
        ]
        metrics = {k: v for k, v in last.metrics.items() if k != "artifacts"}
        if metrics:  # artifacts are in the stdout tail, as sections (OpenEvolve's feedback)
            out.append("metrics: " + json.dumps(metrics)[:TAIL])
        if last.stdout_tail.strip():
            out.append("stdout (tail):\n" + last.stdout_tail[-TAIL:])
        if last.stderr_tail.strip():
            out.append("stderr (tail):\n" + last.stderr_tail[-TAIL:])
        return "\n".join(out)

    # -- the agent protocol -------------------------------------------------------------
    def propose(self, job: Job) -> Proposal:
        node = job.node
        if self.one_call:
            coder = self._coder(node)
            answer = coder.ask_all(self.context(node), self.spec.agents.proposer.prompt)
            with self._lock:
                self._answers[node.id, node.attempt] = answer
            return Proposal(hypothesis=hypothesis_of(answer))
        proposal: Proposal = self._role(LLMProposer, "proposer", node).propose(self.context(node))
        return proposal

    def observe(self, node: Node) -> None:
        """The models read what finished nodes taught from the memory in the context; the
        bandits (``model_choice``) reward the model that made the node."""
        if node.parent_id is not None:
            self.choice.observe(node, self.mirror.get(node.parent_id))

    def rebuild(self, nodes: Iterable[Node]) -> None:
        """Nothing to rebuild: the memory is read from SQL at each context."""

    def code(
        self, job: Job, proposal: Proposal, refusal: Refusal | None = None
    ) -> dict[str, bytes | None]:
        node = job.node
        coder = self._coder(node)
        if refusal is not None:  # a repair round: the refused answer and its error
            changes = coder.repair(self.context(node), proposal, refusal)
        else:
            with self._lock:
                answer = self._answers.pop((node.id, node.attempt), None)
                coder.given(answer)
            if answer is None and self._tools_on():
                return self._work(node, coder, proposal)
            changes = coder.code(self.context(node), proposal)
        self.repo.learn(node.id, proposal.hypothesis, self.context(node).files, changes)
        return changes

    def _tools_on(self) -> bool:
        """Whether the coder works with tools (see ``Role.tools``)."""
        setting = self.spec.agents.coder.tools or "auto"
        if self.one_call or self._tools_off or setting == "off":
            return False
        return setting == "on" or self.structured["coder"].kind == "tools"

    def _work(self, node: Node, coder: OneCallCoder, proposal: Proposal) -> dict[str, bytes | None]:
        """The coder's changes, made in steps with tools; a ``tools`` event sums them up."""
        a, ctx = self.spec.agents, self.context(node, related=False)
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
            changes: dict[str, bytes | None] = loop.work(ctx, proposal)
        except StructureRefused as e:
            self._tools_off = True
            switch, why = self.structured["coder"], f"tools refused: {e}"
            if switch.kind == "off":  # no structure to switch off: said here
                self._refused(self._models_of(a.coder), why)
            switch.refuse(why)
            return self.code(Job(node, self.mirror.parent(node), lambda: ctx.files), proposal)
        finally:
            self._tools_event(node, loop)
        self.repo.shown[node.id] = box.read
        self.repo.learn(node.id, proposal.hypothesis, ctx.files, changes)
        return changes

    def _tools_event(self, node: Node, loop: ToolCoder) -> None:
        box = loop.box
        used = ", ".join(f"{name} x{n}" for name, n in box.used.items()) or "no tools"
        refused = f"; {len(box.misuse)} refused: " + " | ".join(box.misuse) if box.misuse else ""
        self.store.add_event(
            self.run_id,
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
        coder: OneCallCoder = self._role(
            OneCallCoder, "coder", node, edit_format=self.spec.agents.edit_format
        )
        return coder

    def review(self, job: Job, proposal: Proposal, change: Change) -> Verdict | None:
        if "reviewer" not in self.models:
            return None
        verdict: Verdict = self._role(LLMReviewer, "reviewer", job.node).review(
            self.context(job.node), proposal, change.diff
        )
        return verdict

    def analyse(self, job: Job) -> str | None:
        """A short analysis of the node's evaluation, for later proposals (analyst role)."""
        if "analyst" not in self.models:
            return None
        node = job.node
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
