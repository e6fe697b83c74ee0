"""Agents: proposer, coder, reviewer and evaluator (offline kinds for now)."""

from revtree.agents.base import Proposal, Verdict
from revtree.agents.evaluator import Evaluator, Outcome, parse_metrics
from revtree.agents.knobs import KnobCoder, KnobProposer, read_knobs
from revtree.agents.reviewer import StaticReviewer

__all__ = [
    "Evaluator",
    "KnobCoder",
    "KnobProposer",
    "Outcome",
    "Proposal",
    "StaticReviewer",
    "Verdict",
    "parse_metrics",
    "read_knobs",
]
