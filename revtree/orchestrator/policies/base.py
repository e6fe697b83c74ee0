"""The search-policy protocol.

A policy is a function of the tree snapshot and its own seeded RNG. Its state is a
small JSON object saved with every node it creates (in the same transaction), so a
resumed run chooses exactly as the uninterrupted run would have. The RNG for each
``select`` is derived from (seed, number of selects so far): the counter *is* the
RNG state.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Protocol

from revtree.memory.records import Node
from revtree.orchestrator.tree import Tree


@dataclass(frozen=True)
class Selection:
    """Where to expand next: the parent (and extra parents for crossover) and how."""

    parent_id: int
    operator: str
    extra_parents: tuple[int, ...] = ()


class Policy(Protocol):
    name: str

    def select(self, tree: Tree) -> Selection | None:
        """The next expansion, or None if nothing should start now."""
        ...

    def update(self, node: Node) -> None:
        """Learn a finished node's outcome."""
        ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...


class SeededPolicy:
    """Base for policies whose only state is the count of selects made."""

    name = "seeded"

    def __init__(self, seed: int) -> None:
        self.seed, self.n_selects = seed, 0

    def rng(self) -> random.Random:
        rng = random.Random(f"{self.name}:{self.seed}:{self.n_selects}")
        self.n_selects += 1
        return rng

    def update(self, node: Node) -> None:
        """Stateless beyond the tree: nothing to learn."""

    def state(self) -> dict[str, Any]:
        return {"policy": self.name, "n_selects": self.n_selects}

    def load_state(self, state: dict[str, Any]) -> None:
        self.n_selects = int(state.get("n_selects", 0))
