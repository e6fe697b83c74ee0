"""The tree snapshot a policy sees: frozen nodes plus cheap derived views."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from revtree.memory.records import Node, NodeStatus, Score


@dataclass(frozen=True)
class Tree:
    """An immutable view of a run's nodes at one moment."""

    nodes: Mapping[int, Node]
    maximize: bool
    budget_used: float = 0.0  # fraction of the tightest budget spent, 0..1
    _children: dict[int, list[int]] = field(default_factory=dict, compare=False, repr=False)
    _top_id: int | None = field(default=None, compare=False, repr=False)  # None: unknown

    @classmethod
    def of(cls, nodes: Iterable[Node], maximize: bool, budget_used: float = 0.0) -> Tree:
        by_id = {n.id: n for n in nodes}
        children: dict[int, list[int]] = {i: [] for i in by_id}
        for n in by_id.values():
            if n.parent_id is not None and n.parent_id in children:
                children[n.parent_id].append(n.id)
        return cls(by_id, maximize, budget_used, children, max(by_id, default=-1))

    def extend(self, nodes: Iterable[Node], budget_used: float | None = None) -> Tree:
        """A new snapshot with ``nodes`` added or replaced, without rebuilding the index.

        Two C-level dict copies instead of a Python loop over every node; children lists
        of untouched parents are shared (never mutated: a changed one is copied).
        """
        by_id, children = dict(self.nodes), dict(self._children)
        top = self.top_id
        for n in nodes:
            top = max(top, n.id)
            if n.id not in by_id:
                children[n.id] = []
                if n.parent_id is not None and n.parent_id in children:
                    children[n.parent_id] = [*children[n.parent_id], n.id]
            by_id[n.id] = n
        used = self.budget_used if budget_used is None else budget_used
        return Tree(by_id, self.maximize, used, children, top)

    @property
    def root(self) -> Node:
        return self.nodes[0]

    @property
    def top_id(self) -> int:
        """The highest node id (-1 for an empty tree)."""
        return max(self.nodes, default=-1) if self._top_id is None else self._top_id

    def newest(self, k: int) -> list[Node]:
        """The ``k`` nodes with the highest ids, in id order (O(k) while ids are dense,
        as the orchestrator numbers them)."""
        out: list[Node] = []
        i = self.top_id
        while i >= 0 and len(out) < k:
            if i in self.nodes:
                out.append(self.nodes[i])
            i -= 1
        return out[::-1]

    def children(self, node_id: int) -> list[Node]:
        return [self.nodes[i] for i in self._children.get(node_id, ())]

    def score(self, node: Node) -> Score:
        return node.score_of(self.maximize)

    @cached_property
    def succeeded(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.status is NodeStatus.SUCCEEDED]

    def best(self) -> Node | None:
        """The best succeeded node that carries no drift alarm."""
        good = [n for n in self.succeeded if n.alarm is None]
        return max(good, key=lambda n: (self.score(n), -n.id)) if good else None

    def debug_depth(self, node: Node) -> int:
        """How many debug steps in a row led to this node."""
        depth = 0
        while node.operator == "debug" and node.parent_id is not None:
            depth += 1
            node = self.nodes[node.parent_id]
        return depth
