"""The search-policy protocol.

A policy is a function of the tree snapshot and its own seeded RNG. Its state is a
small JSON object saved with every node it creates (in the same transaction), so a
resumed run chooses exactly as the uninterrupted run would have. The RNG for each
``select`` is derived from (seed, number of selects so far): the counter *is* the
RNG state.

Besides choosing, the protocol has three members that only a policy asking a model
uses; the orchestrator reads them as plain attributes, and :class:`PolicyDefaults`
gives every policy the defaults (fast, no note, ``attach`` a no-op):

- ``slow``: ``select`` makes a model call, so the orchestrator calls it outside its tree
  lock (one select at a time) instead of inside the critical section that creates the
  node;
- ``note``: a note on the last selection (e.g. why a model's answer was not used), for
  the live log; None when there is nothing to say;
- ``attach(ask)``: give the policy a model to ask (prompt text in, answer text out).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from revtree.memory.records import Node
from revtree.orchestrator.tree import Tree

Ask = Callable[[str], str]
"""A model a policy may ask: prompt text in, answer text out (a metered call)."""


@dataclass(frozen=True)
class Selection:
    """Where to expand next: the parent (and extra parents for crossover) and how."""

    parent_id: int
    operator: str
    extra_parents: tuple[int, ...] = ()


class Policy(Protocol):
    name: str
    slow: bool  # select makes a model call: the orchestrator selects outside its tree lock
    note: str | None  # a note on the last selection, for the live log

    def attach(self, ask: Ask) -> None:
        """Give the policy a model to ask (a policy that asks none ignores it)."""
        ...

    def select(self, tree: Tree) -> Selection | None:
        """The next expansion, or None if nothing should start now."""
        ...

    def update(self, node: Node) -> None:
        """Learn a finished node's outcome."""
        ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...


class PolicyDefaults:
    """The optional features of :class:`Policy` for a policy that asks no model: fast,
    no notes, and ``attach`` a no-op. Every built-in policy inherits them; a policy of
    one's own (named by dotted path) may too."""

    slow = False
    note: str | None = None

    def attach(self, ask: Ask) -> None:
        """Ignore the model: this policy asks none."""


class SeededPolicy(PolicyDefaults):
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
