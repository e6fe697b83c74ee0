"""The MAP-Elites features of the evolution policy: a finished node -> values in [0, 1].

- ``depth`` (depth / 10, capped), ``operator`` (draft, improve, debug, crossover,
  other), ``lineage`` (which root draft the program descends from),
  ``knob:NAME:LOW:HIGH`` (the proposal's knob value, scaled between LOW and HIGH);
- learnt bounds, as OpenEvolve scales its features: ``score`` (the node's mean score),
  ``metric:NAME`` (an evaluator metric), ``code_size`` (characters of the editable
  files), ``diff_size`` (lines changed from the parent) and ``drift`` (lines changed
  from the baseline), from :attr:`Node.features`. Each value is scaled between the
  lowest and highest value seen so far, this one included (0.5 while they are equal);
  a node without the value (an evaluator that did not report the metric) is binned at
  0. The bounds are state of the policy: ``reset`` forgets them before a rebuild, which
  sees the nodes in the same order, so a resumed run bins as the uninterrupted one;
- a dotted path to ``f(node) -> tuple[float, ...]``.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from revtree.memory.records import Node

if TYPE_CHECKING:
    from revtree.orchestrator.policies.treebase import TreeIndex

OPERATORS = ("draft", "improve", "debug", "crossover")
MEASURED = ("score", "code_size", "diff_size", "drift")


class Feature:
    """One dimension (or several, for a function's tuple) of the MAP-Elites grid."""

    def __init__(self, fn: Callable[[Node, TreeIndex], tuple[float, ...]]) -> None:
        self.fn = fn

    def __call__(self, node: Node, index: TreeIndex) -> tuple[float, ...]:
        return self.fn(node, index)

    def reset(self) -> None:
        """Forget what was learnt from the tree (a rebuild follows)."""


class Learnt(Feature):
    """A measured value scaled between the lowest and highest value seen so far."""

    def __init__(self, read: Callable[[Node], float | None]) -> None:
        self.read = read
        self.reset()

    def reset(self) -> None:
        self.lo, self.hi = math.inf, -math.inf

    def __call__(self, node: Node, index: TreeIndex) -> tuple[float, ...]:
        value = self.read(node)
        if value is None or not math.isfinite(value):
            return (0.0,)
        self.lo, self.hi = min(self.lo, value), max(self.hi, value)
        if self.hi == self.lo:
            return (0.5,)
        return (min(1.0, max(0.0, (value - self.lo) / (self.hi - self.lo))),)


def measured(key: str) -> Callable[[Node], float | None]:
    def read(node: Node) -> float | None:
        if key == "score":
            return node.score
        value = (node.features or {}).get(key)
        return float(value) if isinstance(value, int | float) else None

    return read


def make_feature(spec: str) -> Feature:
    """The feature named by ``spec`` (see the module docstring)."""
    if spec == "depth":
        return Feature(lambda n, ix: (min(1.0, n.depth / 10),))
    if spec == "operator":
        return Feature(
            lambda n, ix: ((OPERATORS.index(n.operator) if n.operator in OPERATORS else 4) / 4.5,)
        )
    if spec == "lineage":
        return Feature(lambda n, ix: ((_lineage(n, ix) * 0.618034) % 1.0,))
    if spec in MEASURED or (spec.startswith("metric:") and len(spec) > len("metric:")):
        return Learnt(measured(spec))
    if spec.startswith("knob:"):
        _, name, low, high = spec.split(":")
        lo, hi = float(low), float(high)

        def knob(n: Node, ix: TreeIndex) -> tuple[float, ...]:
            value = ((n.proposal or {}).get("knobs") or {}).get(name)
            if not isinstance(value, int | float):
                return (0.0,)
            return (min(1.0, max(0.0, (value - lo) / (hi - lo))),)

        return Feature(knob)
    module, _, attr = spec.rpartition(".")
    fn = getattr(importlib.import_module(module), attr)
    return Feature(lambda n, ix: tuple(fn(n)))


def _lineage(node: Node, index: TreeIndex) -> int:
    v: int | None = node.id
    while v is not None and index.parent.get(v) not in (0, None):
        v = index.parent.get(v)
    return v or 0
