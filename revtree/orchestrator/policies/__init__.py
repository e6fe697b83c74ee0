"""Search policies, by name, by import path (``package.module:Class``) or by the name
of an entry point in the group ``revtree.policies`` (:mod:`revtree.tasks.plugins`
resolves the last two; such a policy is built as ``Class(seed, **options)``).

The names a task may choose are :data:`revtree.tasks.spec.POLICIES` (the one list: the
task layer may not import the orchestrator). :data:`REGISTRY` maps each policy class's
``name`` to the class, and importing this package checks that its names are exactly
those.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from revtree.orchestrator.policies.agentic import AgenticPolicy
from revtree.orchestrator.policies.base import (
    Ask,
    Policy,
    PolicyDefaults,
    SeededPolicy,
    Selection,
)
from revtree.orchestrator.policies.evolution import EvolutionPolicy
from revtree.orchestrator.policies.exts import ExtsPolicy
from revtree.orchestrator.policies.mcts import BgmctsPolicy, MctsPolicy
from revtree.orchestrator.policies.simple import GreedyPolicy, OptunaPolicy, RandomPolicy
from revtree.tasks.plugins import resolve_policy
from revtree.tasks.spec import POLICIES

CLASSES: tuple[type[SeededPolicy], ...] = (
    GreedyPolicy,
    RandomPolicy,
    OptunaPolicy,
    MctsPolicy,
    BgmctsPolicy,
    EvolutionPolicy,
    ExtsPolicy,
    AgenticPolicy,
)
#: The protocol's members, checked on a policy built from a dotted path.
MEMBERS = ("name", "slow", "note", "attach", "select", "update", "state", "load_state")


def registry_mismatch(classes: Iterable[type[Any]], names: Iterable[str]) -> str | None:
    """What differs between the classes' ``name`` attributes and ``names`` (None: nothing)."""
    have, want = Counter(c.name for c in classes), Counter(names)
    problems = []
    if extra := sorted(set(have) - set(want)):
        problems.append(f"policy classes not in revtree.tasks.spec.POLICIES: {extra}")
    if missing := sorted(set(want) - set(have)):
        problems.append(f"names in revtree.tasks.spec.POLICIES without a policy class: {missing}")
    if twice := sorted({n for n, k in [*have.items(), *want.items()] if k > 1}):
        problems.append(f"names given twice: {twice}")
    return "; ".join(problems) or None


def check_registry(classes: Iterable[type[Any]], names: Iterable[str]) -> None:
    """Raise ImportError naming the difference unless the classes' names are ``names``."""
    problem = registry_mismatch(classes, names)
    if problem is not None:
        raise ImportError(f"the policy registry disagrees with the task spec: {problem}")


check_registry(CLASSES, POLICIES)

REGISTRY: dict[str, type[SeededPolicy]] = {cls.name: cls for cls in CLASSES}


def make_policy(config: Any) -> Policy:
    """Build the policy named by ``config.policy`` from its config section: a built-in
    from the section itself, any other as ``Class(config.seed, **config.options)``.
    Raises ValueError where the name resolves to no policy class, TypeError where the
    built object lacks a member of the protocol."""
    klass: Any = REGISTRY.get(config.policy)
    if klass is None:
        klass = resolve_policy(config.policy)
        policy = klass(config.seed, **getattr(config, "options", {}))
    elif klass.__init__ is not SeededPolicy.__init__:
        policy = klass(config)
    else:
        policy = klass(config.seed)
    if missing := [m for m in MEMBERS if not hasattr(policy, m)]:
        raise TypeError(
            f"policy {config.policy!r} lacks {', '.join(missing)} of the Policy protocol "
            "(inherit revtree.orchestrator.policies.base.PolicyDefaults for the defaults)"
        )
    built: Policy = policy
    return built


__all__ = [
    "CLASSES",
    "POLICIES",
    "REGISTRY",
    "Ask",
    "Policy",
    "PolicyDefaults",
    "Selection",
    "check_registry",
    "make_policy",
    "registry_mismatch",
]
