"""The agent protocol, one for offline and LLM agents alike.

Every agent takes a ``Job`` (the candidate's node, its parent, the parent's files, and
for the model roles the candidate's ``Context``) and returns a record: a ``Proposal``,
the changes, a ``Verdict``, an analysis. Agents receive what they need (a sandbox, an
LLM) when they are built, by ``revtree.orchestrator.wiring``; they never build their
dependencies or touch the Store. The pipeline calls them the same way whatever drives
the run (``Agents``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from revtree.memory.records import Node


@dataclass(frozen=True)
class Proposal:
    """What to try: a hypothesis in words and, for knob tuning, the values to set."""

    hypothesis: str
    knobs: dict[str, Any] = field(default_factory=dict)
    plan: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"hypothesis": self.hypothesis, "knobs": self.knobs, "plan": self.plan}


@dataclass(frozen=True)
class Verdict:
    """The reviewer's decision, with its reasons."""

    accepted: bool
    reasons: tuple[str, ...] = ()
    stored: bool = True  # an acceptance worth recording on the node (a model's, a user's)


@dataclass(frozen=True)
class Change:
    """A candidate's change against its parent, as a reviewer reads it."""

    paths: tuple[str, ...]
    diff: str


@dataclass(frozen=True)
class Refusal:
    """Why a coder's answer could not be applied, with the answer: what a repair round
    (an edge of the pipeline graph) hands the coder back."""

    error: str
    answer: str = ""
    round: int = 0  # repair rounds already spent on this candidate
    first: str = ""  # the first refusal's error (the one before any repair)


@dataclass(frozen=True)
class Context:
    """What the model roles see of one candidate; built by the run's context source
    (``revtree.orchestrator.contexts``) and carried by the ``Job``."""

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


class ContextSource(Protocol):
    def __call__(self, job: Job, related: bool = True) -> Context:
        """The job's context (the same object for every role of the candidate while its
        hypothesis stands); without ``related`` files for a coder that searches."""
        ...

    def tell_waits(self, to: Callable[[str], None]) -> None:
        """Tell ``to`` of each ticket whose prompt waits for its parent's score."""
        ...


@dataclass(frozen=True)
class Job:
    """One candidate as every agent sees it: its node (id, operator, attempt, and its
    proposal once made), its parent, the parent's files, read once on demand, and the
    run's context source (``source``; None where no model role drives the run).

    Offline agents read the node and the files; the model roles read ``context()``,
    so there is one protocol whatever drives the run."""

    node: Node
    parent: Node
    read: Callable[[], Mapping[str, bytes]] = field(compare=False, repr=False)
    source: ContextSource | None = field(default=None, compare=False, repr=False)

    @cached_property
    def files(self) -> Mapping[str, bytes]:
        return self.read()

    def context(self, related: bool = True) -> Context:
        """What the model roles see of this candidate (see ``ContextSource``)."""
        if self.source is None:
            raise LookupError(f"node {self.node.id}: no context source (an offline run)")
        return self.source(self, related)


class Proposer(Protocol):
    def propose(self, job: Job) -> Proposal:
        """What to try for this candidate."""
        ...


class Learner(Proposer, Protocol):
    """A proposer that learns from the run's finished nodes (the offline ones)."""

    def observe(self, node: Node) -> None:
        """Learn a finished node's outcome."""

    def rebuild(self, nodes: Iterable[Node]) -> None:
        """Learn a resumed run's history (every node, in any state)."""


class Coder(Protocol):
    repairs: int  # repair rounds the pipeline may give a refused answer

    def code(
        self, job: Job, proposal: Proposal, refusal: Refusal | None = None
    ) -> dict[str, bytes | None]:
        """The changes (path -> new content, None deletes) that implement the proposal;
        with ``refusal``, a repair of the refused answer. Raises ``EditError``."""
        ...


class Reviewer(Protocol):
    def review(self, job: Job, proposal: Proposal, change: Change) -> Verdict | None:
        """A verdict on the change, or None to abstain."""
        ...


class Analyst(Protocol):
    def analyse(self, job: Job) -> str | None:
        """A short reading of the node's failed evaluation, for later proposals."""
        ...


@dataclass
class Agents:
    """The agents that drive a run, built by ``revtree.orchestrator.wiring``: the
    pipeline calls them the same way whether they are offline or on models.
    ``reviewers`` may call a model (their review may run beside the evaluation where the
    sandbox contains the candidate); ``checks`` are pure reviews of the change (the
    static reviewer), always run first. ``context``: the source of the model roles'
    context, handed to every ``Job``; ``observers``: told of each finished node."""

    proposer: Proposer
    coder: Coder
    reviewers: tuple[Reviewer, ...]
    analyst: Analyst | None = None
    label: str = "offline"
    spent: Callable[[], str | None] = lambda: None  # why the model budget is spent, if it is
    ask: Callable[[str], str] | None = None  # one model call, for a policy that asks
    checks: tuple[Reviewer, ...] = ()
    context: ContextSource | None = None
    observers: tuple[Callable[[Node], None], ...] = ()
