"""Search policies, by name or dotted path (``package.module.Class``)."""

from __future__ import annotations

import importlib
from typing import Any

from revtree.orchestrator.policies.base import Policy, SeededPolicy, Selection

POLICIES = {
    "greedy": "revtree.orchestrator.policies.simple.GreedyPolicy",
    "random": "revtree.orchestrator.policies.simple.RandomPolicy",
    "optuna": "revtree.orchestrator.policies.simple.OptunaPolicy",
    "mcts": "revtree.orchestrator.policies.mcts.MctsPolicy",
    "bgmcts": "revtree.orchestrator.policies.mcts.BgmctsPolicy",
    "evolution": "revtree.orchestrator.policies.evolution.EvolutionPolicy",
    "exts": "revtree.orchestrator.policies.exts.ExtsPolicy",
    "agentic": "revtree.orchestrator.policies.agentic.AgenticPolicy",
}


def make_policy(config: Any) -> Policy:
    """Build the policy named by ``config.policy`` from its config section."""
    path = POLICIES.get(config.policy, config.policy)
    module, _, cls = path.rpartition(".")
    if not module:
        raise ValueError(f"unknown policy {config.policy!r}; expected one of {sorted(POLICIES)}")
    klass = getattr(importlib.import_module(module), cls)
    policy: Policy = (
        klass(config) if klass.__init__ is not SeededPolicy.__init__ else klass(config.seed)
    )
    return policy


__all__ = ["POLICIES", "Policy", "Selection", "make_policy"]
