"""The baseline policies: greedy (AIDE), random, and optuna (the study decides).

Greedy and random keep what they choose from up to date as nodes are selected and
finish (a :class:`TreeIndex` plus a sorted list each), so ``select`` and ``update`` take
time independent of the tree's size. They choose exactly as a scan of the whole tree
at every select would: the same seed gives the same selections on the same trees,
resumed or not (``tests/orchestrator/policies/test_simple.py`` checks this against
that scan).
"""

from __future__ import annotations

import bisect
import random

from revtree.memory.records import Node, NodeStatus
from revtree.orchestrator.policies.base import SeededPolicy, Selection
from revtree.orchestrator.policies.operators import OperatorBandit
from revtree.orchestrator.policies.treebase import DEBUGGABLE, TreeIndex, TreePolicy
from revtree.orchestrator.tree import Tree
from revtree.tasks.spec import GreedySearch, RandomSearch


class GreedyPolicy(TreePolicy):
    """AIDE's policy.

    1. While the root has fewer than ``num_drafts`` draft children, draft from the root.
    2. With probability ``debug_prob``, debug a failed leaf (a crash, timeout or bad
       metrics, not a gated or rejected one) whose debug chain is shorter than
       ``max_debug_depth``, drawn uniformly (by its place in id order).
    3. Otherwise improve the best succeeded node (the root counts once evaluated; ties:
       the lowest id; a succeeded node without a finite score only if no node has one).

    With ``operators = "bandit"``, steps 2 and 3 are one choice among draft (from the
    root), improve (the best) and debug (a failed leaf, where there is one), made by an
    operator bandit (:mod:`.operators`) instead of ``debug_prob``.
    """

    name = "greedy"
    config: GreedySearch
    draft_unscored_root = False
    operator_arms = ("draft", "improve", "debug")  # the operator bandit's, if asked for

    def __init__(self, config: GreedySearch) -> None:
        super().__init__(config)
        self.reset()

    def reset(self) -> None:
        self.drafts: int | None = None  # the root's draft children; counted on a rebuild
        self.buggy: list[int] = []  # debuggable failed leaves, in id order
        self.unscored: int | None = None  # lowest succeeded id without a finite score
        self.ops = (
            OperatorBandit(self.operator_arms, self.config.seed, self.name)
            if self.config.operators == "bandit"
            else None
        )

    def select(self, tree: Tree) -> Selection | None:
        self.note = None  # the operator bandit's choice, if it makes one
        return super().select(tree)

    def sync(self, tree: Tree) -> TreeIndex:
        index = super().sync(tree)
        if self.drafts is None:
            self.drafts = sum(n.operator == "draft" for n in tree.children(0))
        return index

    def observe(self, node: Node) -> None:
        index = self.index
        assert index is not None
        if self.ops is not None:
            self.ops.observe(node, index.maximize)
        if node.status is NodeStatus.SUCCEEDED and node.id not in index.value:
            self.unscored = node.id if self.unscored is None else min(self.unscored, node.id)
        elif (
            node.status is NodeStatus.FAILED
            and node.error_kind in DEBUGGABLE
            and node.id not in index.with_children
            and index.debug_depth[node.id] < self.config.max_debug_depth
        ):
            bisect.insort(self.buggy, node.id)

    def record(self, choice: Selection) -> None:
        super().record(choice)
        if choice.parent_id == 0 and choice.operator == "draft" and self.drafts is not None:
            self.drafts += 1
        at = bisect.bisect_left(self.buggy, choice.parent_id)
        if at < len(self.buggy) and self.buggy[at] == choice.parent_id:
            del self.buggy[at]  # no longer a leaf

    def choose(self, tree: Tree, index: TreeIndex, rng: random.Random) -> Selection | None:
        assert self.drafts is not None
        if self.drafts < self.config.num_drafts:
            return Selection(0, "draft")
        best = index.best_id
        best = self.unscored if best is None else best
        if self.ops is not None:
            return self.by_bandit(self.ops, best, rng)
        if rng.random() < self.config.debug_prob and self.buggy:
            return Selection(rng.choice(self.buggy), "debug")
        return Selection(best, "improve") if best is not None else Selection(0, "draft")

    def by_bandit(self, ops: OperatorBandit, best: int | None, rng: random.Random) -> Selection:
        """Draft, improve ``best`` or debug a failed leaf, as the operator bandit picks."""
        among = ["draft"] + ["improve"] * (best is not None) + ["debug"] * bool(self.buggy)
        operator = ops.choose(among, self.n_selects)
        self.note = ops.note(operator)
        if operator == "debug":
            return Selection(rng.choice(self.buggy), "debug")
        if operator == "improve" and best is not None:
            return Selection(best, "improve")
        return Selection(0, "draft")


class RandomPolicy(TreePolicy):
    """Improve a node drawn uniformly from the succeeded nodes and the root."""

    name = "random"
    config: RandomSearch
    draft_unscored_root = False

    def __init__(self, config: RandomSearch) -> None:
        super().__init__(config)
        self.reset()

    def reset(self) -> None:
        self.pool = [0]  # the root and the succeeded nodes, in id order

    def observe(self, node: Node) -> None:
        if node.status is NodeStatus.SUCCEEDED and node.id != 0:
            bisect.insort(self.pool, node.id)

    def choose(self, tree: Tree, index: TreeIndex, rng: random.Random) -> Selection | None:
        return Selection(rng.choice(self.pool), "improve")


class OptunaPolicy(SeededPolicy):
    """Every candidate is the root with new knob values: the knob study alone decides."""

    name = "optuna"

    def select(self, tree: Tree) -> Selection | None:
        self.rng()
        return Selection(0, "tune")
