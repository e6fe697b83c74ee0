"""The baseline policies: greedy (AIDE), random, and optuna (the study decides)."""

from __future__ import annotations

from revtree.memory.records import NodeStatus
from revtree.orchestrator.policies.base import SeededPolicy, Selection
from revtree.orchestrator.tree import Tree
from revtree.tasks.spec import GreedySearch


class GreedyPolicy(SeededPolicy):
    """AIDE's policy.

    1. While the root has fewer than ``num_drafts`` draft children, draft from the root.
    2. With probability ``debug_prob``, debug a failed leaf (a crash, timeout or bad
       metrics, not a gated or rejected one) whose debug chain is shorter than
       ``max_debug_depth``.
    3. Otherwise improve the best succeeded node (the root counts once evaluated).
    """

    name = "greedy"

    def __init__(self, config: GreedySearch) -> None:
        super().__init__(config.seed)
        self.config = config

    def select(self, tree: Tree) -> Selection | None:
        rng = self.rng()
        drafts = [n for n in tree.children(0) if n.operator == "draft"]
        if len(drafts) < self.config.num_drafts:
            return Selection(0, "draft")
        if rng.random() < self.config.debug_prob:
            buggy = [
                n
                for n in tree.nodes.values()
                if n.status is NodeStatus.FAILED
                and n.error_kind in ("crash", "timeout", "metrics")
                and not tree.children(n.id)
                and tree.debug_depth(n) < self.config.max_debug_depth
            ]
            if buggy:
                return Selection(rng.choice(sorted(buggy, key=lambda n: n.id)).id, "debug")
        best = tree.best()
        return Selection(best.id, "improve") if best else Selection(0, "draft")


class RandomPolicy(SeededPolicy):
    """Improve a node drawn uniformly from the succeeded nodes and the root."""

    name = "random"

    def select(self, tree: Tree) -> Selection | None:
        rng = self.rng()
        pool = sorted({0, *(n.id for n in tree.succeeded)})
        return Selection(rng.choice(pool), "improve" if pool else "draft")


class OptunaPolicy(SeededPolicy):
    """Every candidate is the root with new knob values: the knob study alone decides."""

    name = "optuna"

    def select(self, tree: Tree) -> Selection | None:
        self.rng()
        return Selection(0, "tune")
