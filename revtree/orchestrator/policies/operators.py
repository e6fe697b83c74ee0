"""A bandit over a policy's operators: which kind of change the next candidate is.

With ``[search] operators = "bandit"`` (greedy, evolution), where the policy's own rules
would pick the operator by fixed chances (greedy's ``debug_prob`` between debug and
improve, its drafts after ``num_drafts``; evolution's ``crossover_rate``), a
Thompson-sampling bandit (``agents.llm.bandit.Thompson``, the model bandit's) picks it
among those possible at that moment (debug only where a failed leaf may be debugged,
crossover only where there is a second elite). Each finished node made by an arm
rewards it with the model bandit's rule (``bandit.reward``), but measured against the
run's best node when it finished, not its parent: 0 for a failure, a rejection or no new
best, else 0.5 plus half its gain relative to the best. Against the parent, a draft
(whose parent is the baseline) would be paid for any gain over the baseline, however
far below the best, and a debug for any fix; the bandit then drafts and debugs most of
the run (measured on the simulated landscapes). What the policy does with the operator
(which parent) is its own rule.

Guaranteed: the bandit is a function of the tree and the policy's count of selects: its
arms are rewarded from the finished nodes (replayed in id order when the policy
rebuilds its index), and its draw is seeded by the count, so a resumed run chooses as
the uninterrupted one did (at ``parallel = 1``). Not guaranteed: anything when an
operator's worth drifts during a run (no discounting), nor that the bandit beats the
policy's fixed chances (``benchmarks/learning.py --part operators`` measures it; the
default stays the policy's).

Shown: the live log names each choice with the arms' counts; ``revtree show`` (its
``operators`` row), ``revtree show --json`` (``operators``) and the dashboard's "what
the search learnt" card give each arm's candidates and mean reward, from
:func:`replay` of the stored tree (what a resume rebuilds).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from revtree.agents.llm.bandit import Thompson, reward
from revtree.memory.records import Node


class OperatorBandit:
    """The operator bandit of one policy (see the module)."""

    def __init__(self, arms: Sequence[str], seed: int, key: str) -> None:
        self.thompson = Thompson(arms, seed, f"operators:{key}")
        self.best: Node | None = None  # the best finished node so far

    def choose(self, among: Collection[str], selects: int) -> str:
        """The operator of the ``selects``-th selection, one of ``among``."""
        self.thompson.seek(selects)
        return self.thompson.choose(among)

    def observe(self, node: Node, maximize: bool) -> None:
        """A finished node: its operator's arm rewarded against the best before it."""
        best = self.best
        if best is not None and node.operator in self.thompson.arms:
            self.thompson.reward(node.operator, reward(node, best, maximize))
        if best is None or node.score_of(maximize) > best.score_of(maximize):
            self.best = node

    def note(self, chose: str) -> str:
        """The live log's words for a choice."""
        return f"operator bandit chose {chose} ({self.thompson.line()})"


def replay(
    arms: Sequence[str], seed: int, key: str, nodes: Iterable[Node], maximize: bool
) -> OperatorBandit:
    """The bandit as a policy's rebuild from the tree leaves it: each finished node
    observed in id order (``TreePolicy.sync``). ``arms`` are the policy's
    ``operator_arms``, ``key`` its name."""
    ops = OperatorBandit(arms, seed, key)
    for node in sorted(nodes, key=lambda n: n.id):
        if node.status.is_finished():
            ops.observe(node, maximize)
    return ops


def summary(ops: OperatorBandit) -> dict[str, Any]:
    """What ``revtree show --json`` says of the bandit (``operators``): per arm, the
    finished candidates it was rewarded for and their mean reward (None before one)."""
    return {"arms": ops.thompson.stats()}
