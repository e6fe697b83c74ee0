"""Agents: who proposes, codes, reviews and scores a candidate.

One protocol (``base``) for offline and LLM agents alike: every agent takes a ``Job``.
The offline ones live here (``knobs``, ``mutate``, ``reviewer``), the LLM roles in
``roles``, and the evaluator, which scores in a sandbox, in ``evaluator``.
"""

from revtree.agents.base import Agents, Change, Job, Proposal, Refusal, Verdict
from revtree.agents.evaluator import Evaluator, Outcome, parse_metrics
from revtree.agents.knobs import KnobCoder, KnobProposer, read_knobs
from revtree.agents.reviewer import StaticReviewer

__all__ = [
    "Agents",
    "Change",
    "Evaluator",
    "Job",
    "KnobCoder",
    "KnobProposer",
    "Outcome",
    "Proposal",
    "Refusal",
    "StaticReviewer",
    "Verdict",
    "parse_metrics",
    "read_knobs",
]
