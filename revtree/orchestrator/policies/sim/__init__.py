"""Simulators that drive the search policies without agents, sandboxes or a model.

- :mod:`.landscape`: simulated research landscapes (:class:`Landscape`,
  :data:`LANDSCAPES`) and the :class:`Simulator` that runs a policy on one.
- :mod:`.model`: :class:`SimulatedPolicyModel`, a seeded heuristic stand-in for the
  LLM that the agentic policy asks.

They are test and benchmark tools, not policies: nothing in a real run imports them.
"""

from __future__ import annotations

from revtree.orchestrator.policies.sim.landscape import (
    LANDSCAPES,
    Landscape,
    SimRun,
    Simulator,
    normalised,
)
from revtree.orchestrator.policies.sim.model import SimulatedPolicyModel, parse_summary

__all__ = [
    "LANDSCAPES",
    "Landscape",
    "SimRun",
    "SimulatedPolicyModel",
    "Simulator",
    "normalised",
    "parse_summary",
]
