"""A bandit over named arms (a role's models, a policy's operators): Thompson sampling with
rewards in [0, 1], and the reward of a finished candidate (its gain over its parent).

Why Thompson sampling rather than UCB1: a run's budget is tens of candidates, not
thousands, and UCB1's exploration bonus (``sqrt(2 ln n / n_k)``) stays larger than the
differences between models' mean rewards for most of such a run, so it keeps spreading
calls evenly; Thompson sampling moves to the better model as soon as its posterior
separates. It is also random, so candidates chosen at once (``parallel`` > 1, rewards
still pending) do not all go to the same arm, as UCB1's deterministic argmax would send
them.

Guaranteed: each arm's posterior is ``Beta(1 + sum r, 1 + sum (1 - r))`` (a reward as a
fractional success); ``choose`` draws once from each and takes the highest draw (ties:
the first arm). The draws come from an RNG derived from (seed, key, choices made), so a
bandit rebuilt from the same rewards and the same count of choices chooses the same.
Not guaranteed: anything about arms whose rewards drift during a run (no discounting).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from revtree.memory.records import Node


def derive_seed(*parts: object) -> int:
    """A seed from ``parts`` (the knob proposer's rule; here without loading Optuna)."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little")


@dataclass
class Arm:
    """What one model has earned: candidates rewarded and the sum of their rewards."""

    pulls: int = 0
    total: float = 0.0

    @property
    def mean(self) -> float | None:
        return self.total / self.pulls if self.pulls else None


class Thompson:
    """Thompson sampling over named arms (see the module's contract)."""

    def __init__(self, arms: Sequence[str], seed: int, key: str) -> None:
        if not arms:
            raise ValueError("a bandit needs at least one arm")
        self.arms = {name: Arm() for name in arms}
        self.seed, self.key, self.choices = seed, key, 0

    def seek(self, choices: int) -> None:
        """Go on as if ``choices`` choices had been made (a replay, or a policy that
        counts its own selections): the next draw is the one that would follow them."""
        self.choices = choices

    def choose(self, among: Collection[str] | None = None) -> str:
        """The arm for the next candidate (counted as a choice, not yet as a pull);
        ``among``: only these arms may be chosen (every arm is drawn all the same, so the
        draws do not depend on which are allowed)."""
        rng = random.Random(derive_seed(self.seed, "bandit", self.key, self.choices))
        self.choices += 1
        drawn = {
            name: rng.betavariate(1.0 + a.total, 1.0 + a.pulls - a.total)
            for name, a in self.arms.items()
        }
        draws = {name: d for name, d in drawn.items() if among is None or name in among}
        if not draws:
            raise ValueError(f"no arm among {sorted(among or ())} is one of {list(self.arms)}")
        return max(draws, key=lambda name: draws[name])

    def reward(self, arm: str, value: float) -> None:
        """Credit ``arm`` with one candidate's reward, clipped to [0, 1]; an arm that
        is no longer configured is ignored."""
        if arm in self.arms:
            self.arms[arm].pulls += 1
            self.arms[arm].total += min(1.0, max(0.0, value))

    def stats(self) -> dict[str, dict[str, float | int | None]]:
        """Per arm: candidates rewarded and their mean reward (None before the first)."""
        return {
            name: {"pulls": a.pulls, "mean_reward": None if a.mean is None else round(a.mean, 4)}
            for name, a in self.arms.items()
        }

    def line(self) -> str:
        """The arms in one line for the live log: ``name: N at M`` (candidates, mean reward)."""
        return ", ".join(
            f"{name}: {a.pulls} at {'-' if a.mean is None else f'{a.mean:.2f}'}"
            for name, a in self.arms.items()
        )


def reward(
    node: Node, parent: Node, maximize: bool, usd: float = 0.0, penalty: float = 0.0
) -> float:
    """A finished candidate's reward in [0, 1]: 0 for one that failed, was rejected
    or is no better than its parent; 1 for a fix of a failed parent; else 0.5 plus half
    its gain relative to the parent's score (capped at 1); less ``penalty`` per dollar."""
    mine, theirs = node.score_of(maximize), parent.score_of(maximize)
    if not mine.is_valid:
        value = 0.0
    elif not theirs.is_valid:
        value = 1.0
    else:
        gain = mine.gain_over(theirs) or 0.0
        scale = abs(parent.score or 0.0)
        value = 0.0 if gain <= 0 else 0.5 + 0.5 * (min(1.0, gain / scale) if scale else 1.0)
    return max(0.0, value - penalty * usd)
