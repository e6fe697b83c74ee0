"""The agent protocols. Agents receive what they need (a sandbox, an LLM, the parent's
files) and return records; they never build their dependencies or touch the Store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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


class Proposer(Protocol):
    def propose(self, node_id: int, parent: Node, operator: str) -> Proposal: ...

    def observe(self, node: Node) -> None:
        """Learn a finished node's outcome."""


class Coder(Protocol):
    def code(self, proposal: Proposal, files: Mapping[str, bytes]) -> dict[str, bytes | None]:
        """The changes (path -> new content, None deletes) that implement the proposal."""
        ...
