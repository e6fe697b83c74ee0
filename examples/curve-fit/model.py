"""A small model of an unknown curve. revtree's mutation proposer edits the numbers and
operators between the EVOLVE-BLOCK markers; evaluate.py scores the fit."""

from __future__ import annotations

import math


def model(x: float) -> float:
    """The model's prediction at ``x`` (the evaluator calls it on [-3, 3])."""
    # EVOLVE-BLOCK-START
    a = 0.5 * x + 0.2
    b = 1.0 * math.cos(0.8 * x)
    c = 0.1 * x * x
    return a + b - c
    # EVOLVE-BLOCK-END
