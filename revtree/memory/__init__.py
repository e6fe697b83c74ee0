"""SQL memory (runs, nodes, evaluations, events) and the git revision store.

The records are imported with the package; ``Store`` (SQLAlchemy) and ``GitStore``
(GitPython) on first use (PEP 562), so that ``import revtree.memory`` costs no more than
the records do."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from revtree.memory.records import (
    EvalResult,
    Event,
    Node,
    NodeStatus,
    RunInfo,
    RunStatus,
    Score,
)

if TYPE_CHECKING:
    from revtree.memory.gitstore import GitStore
    from revtree.memory.store import Store

_LAZY = {"GitStore": "revtree.memory.gitstore", "Store": "revtree.memory.store"}

__all__ = [
    "EvalResult",
    "Event",
    "GitStore",
    "Node",
    "NodeStatus",
    "RunInfo",
    "RunStatus",
    "Score",
    "Store",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
