"""The context source of the model roles: what a candidate's prompts show.

The context of a candidate (``revtree.agents.context``): the stable prefix (task, goal,
the editable files, a repository map: the same for every call of the run, so providers
cache it), the parent's files that differ from the baseline, the files search finds
for the goal, the hypothesis and the parent's failure, the parent's last evaluation,
and memory (lessons of finished nodes, and where earlier candidates found things).
What the budget leaves out, and what a candidate learnt, are ``context`` events.

``ContextSource`` is called with a ``Job`` (the job carries it, as it carries
``read()``: ``Job.context()``) and returns a frozen ``Context``, built once per node and
hypothesis and shared by the proposer, coder, reviewer and analyst of the node.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from revtree.agents.base import Context, Job
from revtree.agents.context import Learnt, RepoContext
from revtree.agents.llm.base import estimate_tokens
from revtree.agents.retrieval import make_embedder
from revtree.agents.roles import render_files
from revtree.memory.records import Node, NodeStatus
from revtree.memory.stages import GUARD, HOLDOUT
from revtree.tasks.spec import TaskSpec

if TYPE_CHECKING:
    from revtree.memory import Store
    from revtree.memory.gitstore import GitStore
    from revtree.orchestrator.mirror import Mirror

TAIL = 1500
RELATED_HEAD = (
    "\n\nOther files of the parent related to this candidate (found by search over the "
    "repository; the map above lists the rest):\n"
)
DRAFT = "draft"  # the operator whose prompt does not wait for its parent's score
BESIDE = "not known yet (it is being evaluated beside this proposal)"
CACHED = 256  # contexts kept (node, hypothesis, related), the oldest dropped first


class ContextSource:
    """The ``Context`` of each job, for one run: the repository's (``repo``: prefix,
    search index, what candidates learnt) and the candidate's own, cached."""

    def __init__(
        self,
        store: Store,
        spec: TaskSpec,
        git: GitStore,
        mirror: Mirror,
        cancel: threading.Event | None = None,
    ) -> None:
        """``cancel``: set as the run stops (a context waiting for its parent's score
        gives up)."""
        self.store, self.run_id, self.spec = store, mirror.run_id, spec
        self.git, self.mirror = git, mirror
        self.cancel = cancel or threading.Event()
        root = mirror.get(0)
        assert root.commit is not None
        self.baseline = git.read_files(root.commit)
        a = spec.agents
        self.repo = RepoContext(
            spec,
            self.baseline,
            embedder=make_embedder(a.embeddings_model, a.base_url, a.api_key_env),
            learnt=self._learnt(),
            record=self._context_event,
        )
        self._contexts: OrderedDict[tuple[int, str, bool], Context] = OrderedDict()
        self._lock = threading.Lock()
        self._on_wait: Callable[[str], None] = lambda ticket: None

    def tell_waits(self, to: Callable[[str], None]) -> None:
        """Tell ``to`` of each ticket whose prompt waits for its parent's score
        (``Chain.prepared``: the parent's outcome may be recorded)."""
        self._on_wait = to

    def __call__(self, job: Job, related: bool = True) -> Context:
        """What every role sees of this candidate, built once (at its proposal) and shared
        by the coder, reviewer and analyst of the same node; without ``related`` files
        for a coder that searches with tools."""
        node = job.node
        one_call = self.spec.agents.one_call
        hypothesis = "" if one_call else (node.proposal or {}).get("hypothesis", "")
        key = (node.id, hypothesis, related)  # the coder's also searches by the hypothesis
        with self._lock:
            cached = self._contexts.get(key)
        if cached is None:
            cached = self._build(job, hypothesis, related)
            with self._lock:
                self._contexts[key] = cached
                while len(self._contexts) > CACHED:
                    self._contexts.popitem(last=False)
        return cached

    def _build(self, job: Job, hypothesis: str, related: bool) -> Context:
        node, parent, files = job.node, job.parent, job.files
        commit = parent.commit
        assert commit is not None
        parent = self.mirror.get(parent.id)  # as it stands now (the job's may be older)
        if not parent.status.is_finished() and node.operator != DRAFT:
            # the prompt improves the parent by its score and evaluation: wait for them
            # (a draft, a fresh approach, goes on while the baseline is evaluated beside)
            if node.thread_id is not None and parent.id in self.mirror.driven:
                self._on_wait(node.thread_id)  # what it makes from here on sees that score
            parent = self.mirror.wait_finished(parent.id, self.cancel)
        changed = {p: d for p, d in files.items() if self.baseline.get(p) != d}
        with self.mirror.lock:  # the run's memory, kept as its nodes change
            memory = self.mirror.memory.render(
                parent.id, self.spec.agents.memory_tokens, node.operator, own=node.id
            )
        known = parent.status.is_finished()  # else a draft beside the baseline's evaluation
        parent_eval = self.evaluation(parent) if known else BESIDE
        budget = self.spec.agents.context_tokens
        shown = render_files(changed, budget // 2) if changed else ""
        trouble = self._trouble(parent, parent_eval) if known else ""
        query = "\n".join([self.spec.goal, hypothesis, trouble])
        left = budget - self.repo.builder.prefix_tokens - estimate_tokens(shown)
        found = self.repo.related(node.id, files, query, max(left, 0)) if related else None
        if found is not None and found.text:
            shown += RELATED_HEAD + found.text
        where = self.repo.memory(query)
        return Context(
            node_id=node.id,
            operator=node.operator,
            parent_id=parent.id,
            parent_score=str(parent.score_of(self.spec.maximize)) if known else BESIDE,
            prefix=self.repo.prefix,
            parent_files=shown.strip() or "(none: the parent is the baseline)",
            parent_eval=parent_eval,
            memory=memory + ("\n\n" + where if where else ""),
            others=self._others(node, commit),
            files=files,
        )

    def _others(self, node: Node, parent_commit: str) -> str:
        """A crossover's other parents: their hypothesis and score, and diff."""
        others = ""
        for other_id in node.extra_parents:
            other = self.mirror.get(other_id)
            hyp = (other.proposal or {}).get("hypothesis", "")
            others += f"Other parent: node {other_id}, score {other.score}: {hyp}\n"
            if other.commit:
                diff = self.git.diff(parent_commit, other.commit)
                others += f"Its diff against the parent:\n{diff[-4000:]}\n"
        return others

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

    def evaluation(self, node: Node) -> str:
        """The node's last evaluation in words (this attempt's, holdout and guard
        stages left out): the parent's in a context, the node's own for the analyst."""
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
