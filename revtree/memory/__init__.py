"""SQL memory (runs, nodes, evaluations, events) and the git revision store."""

from revtree.memory.gitstore import GitStore
from revtree.memory.records import (
    EvalResult,
    Event,
    Node,
    NodeStatus,
    RunInfo,
    RunStatus,
    Score,
)
from revtree.memory.store import Store

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
