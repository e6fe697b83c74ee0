"""Agents: who proposes, codes, reviews and scores a candidate.

One protocol (``base``) for offline and LLM agents alike: every agent takes a ``Job``.
The offline ones live here (``knobs``, ``mutate``, ``reviewer``), the LLM roles in
``roles``, and the evaluator, which scores in a sandbox, in ``evaluator``.

The names below are imported on first use (PEP 562), so that importing one submodule
(``agents.evaluator``) does not load the others (Optuna with ``knobs``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from revtree.agents.base import Agents, Change, Job, Proposal, Refusal, Verdict
    from revtree.agents.evaluator import Evaluator, Outcome
    from revtree.agents.knob_text import KnobCoder, read_knobs
    from revtree.agents.knobs import KnobProposer
    from revtree.agents.readings import parse_metrics
    from revtree.agents.reviewer import StaticReviewer

_LAZY = {
    **dict.fromkeys(("Agents", "Change", "Job", "Proposal", "Refusal", "Verdict"), "base"),
    **dict.fromkeys(("Evaluator", "Outcome"), "evaluator"),
    "parse_metrics": "readings",
    **dict.fromkeys(("KnobCoder", "read_knobs"), "knob_text"),
    "KnobProposer": "knobs",
    "StaticReviewer": "reviewer",
}

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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
