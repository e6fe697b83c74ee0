"""The agentic policy (the ReASearch idea): an LLM agent chooses where to expand.

It sees a compact summary of the tree (the best nodes, the recent ones, failures, the
budget spent) and answers in a fixed form::

    ACTION: expand | verify | restart
    NODE: <node id>            (expand, verify)
    OPERATOR: improve | debug | draft | crossover
    OTHER: <node id>           (crossover only)
    REASON: one sentence

``verify`` re-evaluates a succeeded node with more repeats before it is trusted;
``restart`` drafts from the root. An answer that cannot be used (no model attached,
a failed call, a malformed or impossible choice) falls back to ``greedy``; the reason
is kept in ``note`` (shown in the live log) and counted in the saved state.

Not deterministic when a model answers (the model is not); with the fallback alone it
is greedy, seeded. The model call is slow, so the orchestrator calls ``select`` outside
its tree lock (``slow = True``): ``update`` only queues the node, and ``select`` learns
the queued nodes first, so the index is only ever touched by the selecting thread.
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from typing import Any

from revtree.memory.records import Node, NodeStatus
from revtree.orchestrator.policies.base import Ask, Selection
from revtree.orchestrator.policies.simple import GreedyPolicy
from revtree.orchestrator.tree import Tree
from revtree.tasks.spec import AgenticSearch, GreedySearch

_FIELD = re.compile(r"^\s*(ACTION|NODE|OPERATOR|OTHER|REASON)\s*:\s*(.+?)\s*$", re.M | re.I)


class AgenticPolicy(GreedyPolicy):
    """See the module docstring. Its index (greedy's, plus the failed and the unscored
    succeeded ids) also writes the summary in time independent of the tree's size."""

    name = "agentic"
    slow = True

    def __init__(self, config: AgenticSearch) -> None:
        base = config.model_dump(include=set(GreedySearch.model_fields) - {"policy"})
        super().__init__(GreedySearch(**base))
        self.agentic = config
        self.ask: Ask | None = None
        self.note: str | None = None
        self.fallbacks = 0
        self._inbox: deque[Node] = deque()

    def reset(self) -> None:
        super().reset()
        self.failures: list[int] = []  # failed nodes, in id order
        self.unscored_ids: list[int] = []  # succeeded nodes without a finite score

    def attach(self, ask: Ask) -> None:
        """Give the policy its model (a metered call: prompt text in, answer out)."""
        self.ask = ask

    def update(self, node: Node) -> None:
        """Queue the node: ``select`` runs outside the orchestrator's tree lock, so updates
        may arrive while it waits for the model; it learns them first thing."""
        self._inbox.append(node)

    def observe(self, node: Node) -> None:
        super().observe(node)
        assert self.index is not None
        if node.status is NodeStatus.FAILED:
            bisect.insort(self.failures, node.id)
        elif node.status is NodeStatus.SUCCEEDED and node.id not in self.index.value:
            bisect.insort(self.unscored_ids, node.id)

    def select(self, tree: Tree) -> Selection | None:
        while self._inbox:
            super().update(self._inbox.popleft())
        self.note = None
        if self.ask is None:
            return self.fallback(tree, "no model attached")
        try:
            answer = self.ask(self.summary(tree))
        except Exception as e:  # a failed call must not stop the search
            return self.fallback(tree, f"the model call failed: {e}")
        choice, problem = parse_choice(answer, tree)
        if choice is None:
            return self.fallback(tree, problem or "unusable answer")
        self.n_selects += 1  # keep the fallback's RNG stream moving like greedy's
        self.note = problem
        if choice.operator != "verify":
            self.record(choice)  # the fallback's index stays in step with the tree
        return choice

    def summary(self, tree: Tree) -> str:
        """``summarize(tree, summary_nodes)``, from the index instead of a scan."""
        index, k = self.sync(tree), self.agentic.summary_nodes
        m = max(3, k // 2)
        good = [*index.top(m, 0.0), *self.unscored_ids][:m]
        n_good = len(index.value) + len(self.unscored_ids)
        failed = [tree.nodes[i] for i in self.failures[-5:]]
        return render(tree, [tree.nodes[i] for i in good], tree.newest(k), failed, n_good)

    def fallback(self, tree: Tree, why: str) -> Selection | None:
        """Greedy's selection, when the model's answer cannot be used (``why``)."""
        self.fallbacks += 1
        choice = super().select(tree)
        said = f"; {self.note}" if self.note else ""  # the operator bandit's, if any
        self.note = f"agentic fell back to greedy: {why}{said}"
        return choice

    def state(self) -> dict[str, Any]:
        return {**super().state(), "fallbacks": self.fallbacks}

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.fallbacks = int(state.get("fallbacks", 0))


def summarize(tree: Tree, k: int) -> str:
    """The tree as the agent sees it, in a few hundred tokens: the ``max(3, k // 2)``
    best nodes (ties: the lower id first), the ``k`` highest ids and the five
    highest-id failures (a scan of the tree; :meth:`AgenticPolicy.summary` writes the
    same text from its index)."""
    nodes = sorted(tree.nodes.values(), key=lambda n: n.id)
    good = sorted(tree.succeeded, key=lambda n: (tree.score(n), -n.id), reverse=True)
    failed = [n for n in nodes if n.status is NodeStatus.FAILED][-5:]
    return render(tree, good[: max(3, k // 2)], nodes[-k:], failed, len(good))


def render(
    tree: Tree, good: list[Node], recent: list[Node], failed: list[Node], n_good: int
) -> str:
    """The summary's text (see :func:`summarize`)."""
    direction = "higher" if tree.maximize else "lower"

    def line(n: Any) -> str:
        hyp = ((n.proposal or {}).get("hypothesis") or "").splitlines()
        idea = hyp[0][:100] if hyp else ""
        what = f"{n.score:.6g}" if n.score is not None else n.status.value
        return (
            f"  node {n.id} (parent {n.parent_id}, {n.operator}, depth {n.depth}, "
            f"evals {n.n_evals}): {what} {idea}"
        )

    parts = [
        f"Budget spent: {tree.budget_used:.0%}. Scores: {direction} is better.",
        f"Nodes: {len(tree.nodes)}, succeeded {n_good}, failed {len(failed)} recently.",
        "Best nodes:",
        *map(line, good),
        "Most recent nodes:",
        *map(line, recent),
        "Recent failures:",
        *(f"{line(n)} | {(n.error or '')[:120]}" for n in failed),
        "",
        "Choose the next step. Answer exactly in this form:",
        "ACTION: expand | verify | restart",
        "NODE: <node id>",
        "OPERATOR: improve | debug | draft | crossover",
        "OTHER: <node id, for crossover only>",
        "REASON: one sentence",
    ]
    return "\n".join(parts)


def parse_choice(answer: str, tree: Tree) -> tuple[Selection | None, str | None]:
    """(selection, None) or (None, why the answer cannot be used)."""
    fields = {k.upper(): v for k, v in _FIELD.findall(answer or "")}
    action = fields.get("ACTION", "").lower().split()[0] if fields.get("ACTION") else ""
    reason = fields.get("REASON")
    if action == "restart":
        return Selection(0, "draft"), f"agentic: restart from the root ({reason})"
    if action not in ("expand", "verify"):
        return None, f"no usable ACTION in the answer {answer[:80]!r}"
    try:
        node_id = int(re.sub(r"\D", "", fields.get("NODE", "")) or "x")
    except ValueError:
        return None, "no node id in NODE"
    node = tree.nodes.get(node_id)
    if node is None:
        return None, f"node {node_id} does not exist"
    if action == "verify":
        if node.status is not NodeStatus.SUCCEEDED:
            return None, f"node {node_id} cannot be verified: it is {node.status.value}"
        return Selection(node_id, "verify"), f"agentic: verify node {node_id} ({reason})"
    op = fields.get("OPERATOR", "improve").lower().split()[0]
    if op not in ("improve", "debug", "draft", "crossover"):
        return None, f"unknown OPERATOR {op!r}"
    if op == "debug" and node.status is not NodeStatus.FAILED:
        return None, f"node {node_id} cannot be debugged: it did not fail"
    if op in ("improve", "crossover") and node.status is not NodeStatus.SUCCEEDED:
        return None, f"node {node_id} cannot be expanded with {op}: it is {node.status.value}"
    extra: tuple[int, ...] = ()
    if op == "crossover":
        other = tree.nodes.get(int(re.sub(r"\D", "", fields.get("OTHER", "")) or -1))
        if other is None or other.status is not NodeStatus.SUCCEEDED or other.id == node_id:
            return None, "crossover needs OTHER: another succeeded node"
        extra = (other.id,)
    return Selection(node_id, op, extra), f"agentic: {op} node {node_id} ({reason})"
