"""A simulated research landscape that drives a policy without agents or sandboxes.

Every node has a latent quality q (0 = the baseline, 1 = the optimum); its score is
``offset + scale * (q + e)`` (``offset - scale * (q + e)`` when minimising), with
Gaussian noise ``e ~ N(0, noise)`` per evaluation: with ``offset = 0`` the two
directions see exactly negated scores. The simulated proposer:

- ``draft`` (from the root): picks a basin (probability, ceiling, start) and draws
  ``q ~ N(start + draft_mean, draft_sd)``, capped below the basin's ceiling;
- ``improve`` / ``tune`` / ``crossover``: closes a fraction g of the gap to the basin's
  ceiling, ``g ~ N(step(depth), step_sd)`` (negative g: a regression), where
  ``step(depth) = step_mean * min(1, (1 + depth) / deep)`` (``deep`` > 1: gains grow with
  depth, so long refinement chains pay); with probability ``jump_prob`` g is instead
  ``jump``; crossover starts from the better parent and adds ``crossover_bonus`` to g;
- any proposal fails (crash) with probability ``p_fail``; the failed node keeps the
  quality it would have had, and ``debug`` recovers it with probability ``p_fix``;
- ``verify`` re-evaluates a node (one more repeat of its score).

Each draw is seeded by (seed, node id, repeat), so the landscape answers the same to
the same tree whatever the policy did before. The run uses ``Tree.of`` snapshots as the
orchestrator does; ``parallel`` > 1 keeps that many candidates in flight (selected,
pending) and finishes the oldest first.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from revtree.memory.records import Node, NodeStatus
from revtree.orchestrator.policies.base import Policy, Selection
from revtree.orchestrator.tree import Tree


@dataclass(frozen=True)
class Landscape:
    name: str
    basins: tuple[tuple[float, float, float], ...] = ((1.0, 1.0, 0.0),)  # (prob, ceiling, start)
    draft_mean: float = 0.1
    draft_sd: float = 0.1
    step_mean: float = 0.15
    step_sd: float = 0.2
    deep: float = 1.0
    jump_prob: float = 0.0
    jump: float = 0.5
    crossover_bonus: float = 0.05
    p_fail: float = 0.1
    p_fix: float = 0.6
    noise: float = 0.01
    scale: float = 1.0
    offset: float = 10.0

    def score(self, q: float, maximize: bool) -> float:
        return self.offset + self.scale * q if maximize else self.offset - self.scale * q


LANDSCAPES = (
    Landscape(  # most drafts land in an easy basin whose ceiling is low
        "deceptive",
        basins=((0.75, 0.45, 0.05), (0.25, 1.0, -0.15)),
        step_mean=0.2,
    ),
    Landscape(  # scores differ in the 4th significant digit; most steps do nothing
        "narrow_band",
        scale=0.001,
        offset=1.0,
        step_mean=0.0,
        step_sd=0.02,
        jump_prob=0.15,
        jump=0.35,
    ),
    Landscape("noisy", noise=0.2),
    Landscape("deep", step_mean=0.12, step_sd=0.06, deep=12.0, draft_sd=0.03),
    Landscape("wide_shallow", draft_mean=0.3, draft_sd=0.25, step_mean=0.0, step_sd=0.08),
    Landscape("failure_prone", p_fail=0.4, p_fix=0.5),
)


@dataclass
class SimRun:
    """The outcome of a simulated run."""

    nodes: dict[int, Node]
    quality: dict[int, float]
    selections: list[Selection] = field(default_factory=list)
    states: list[dict[str, Any]] = field(default_factory=list)

    def best_quality(self, maximize: bool) -> float:
        """True quality of the node the run reports as best (by observed mean)."""
        best = Tree.of(self.nodes.values(), maximize).best()
        return self.quality[best.id] if best else 0.0


class Simulator:
    """Drives one policy on one landscape; see the module docstring."""

    def __init__(
        self, land: Landscape, seed: int, budget: int, maximize: bool = True, parallel: int = 1
    ) -> None:
        self.land, self.seed, self.budget = land, seed, budget
        self.maximize, self.parallel = maximize, parallel
        self.spent = 0
        self.quality: dict[int, float] = {0: 0.0}
        self.basin: dict[int, int] = {0: -1}
        self.obs: dict[int, list[float]] = {}
        self.crashed: set[int] = set()
        root = Node("sim", 0, None, "baseline", NodeStatus.PENDING)
        self.nodes: dict[int, Node] = {0: root}
        self.selections: list[Selection] = []
        self.states: list[dict[str, Any]] = []

    def rng(self, *key: object) -> random.Random:
        return random.Random(":".join(map(str, (self.land.name, self.seed, *key))))

    def tree(self) -> Tree:
        return Tree.of(self.nodes.values(), self.maximize, min(1.0, self.spent / self.budget))

    def run(self, policy: Policy, steps: int | None = None) -> SimRun:
        """Select until the budget (evaluations after the baseline) is spent.

        With ``steps``, stop right after that many selects, leaving candidates in flight
        (as a killed run would); a later ``run`` resumes them first.
        """
        if self.nodes[0].status is NodeStatus.PENDING:
            policy.update(self.evaluate(0))
        flight: deque[int] = deque(
            i for i, n in sorted(self.nodes.items()) if not n.status.is_finished()
        )
        done = 0
        while self.spent < self.budget and (steps is None or done < steps):
            if len(flight) >= self.parallel or self.spent + len(flight) >= self.budget:
                policy.update(self.evaluate(flight.popleft()))
                continue
            choice = policy.select(self.tree())
            self.states.append(policy.state())
            done += 1
            if choice is None:
                if not flight:
                    break
                continue
            self.selections.append(choice)
            if choice.operator == "verify":
                policy.update(self.evaluate(choice.parent_id))
                continue
            flight.append(self.create(choice))
        while flight and steps is None:
            policy.update(self.evaluate(flight.popleft()))
        return SimRun(self.nodes, self.quality, self.selections, self.states)

    def create(self, choice: Selection) -> int:
        """Create the node ``choice`` asks for (pending); its id."""
        parent = self.nodes[choice.parent_id]
        node_id = max(self.nodes) + 1
        self.nodes[node_id] = Node(
            "sim",
            node_id,
            parent.id,
            choice.operator,
            NodeStatus.PENDING,
            depth=parent.depth + 1,
            extra_parents=choice.extra_parents,
        )
        self._propose(node_id, choice)
        return node_id

    def _propose(self, node_id: int, choice: Selection) -> None:
        land, rng = self.land, self.rng("propose", node_id)
        p = choice.parent_id
        if choice.operator == "debug" and p in self.crashed:
            q, basin = self.quality[p], self.basin[p]
            fail = rng.random() > land.p_fix
        else:
            if p == 0:
                r, basin = rng.random(), 0
                while basin < len(land.basins) - 1 and r > land.basins[basin][0]:
                    r -= land.basins[basin][0]
                    basin += 1
                _, ceiling, start = land.basins[basin]
                q = min(ceiling - 0.02, rng.gauss(start + land.draft_mean, land.draft_sd))
            else:
                q, basin = self.quality[p], self.basin[p]
                others = [e for e in choice.extra_parents if self.basin.get(e) == basin]
                q = max([q, *(self.quality[e] for e in others)])
                ceiling = land.basins[basin][1]
                depth = self.nodes[p].depth
                g = rng.gauss(land.step_mean * min(1.0, (1 + depth) / land.deep), land.step_sd)
                if land.jump_prob and rng.random() < land.jump_prob:
                    g = land.jump
                if choice.operator == "crossover" and others:
                    g += land.crossover_bonus
                q += (ceiling - q) * min(1.0, g)
            fail = rng.random() < land.p_fail
        self.quality[node_id], self.basin[node_id] = q, basin
        if fail:
            self.crashed.add(node_id)

    def evaluate(self, node_id: int) -> Node:
        """One evaluation (the first of a new node, or one more repeat)."""
        node, land = self.nodes[node_id], self.land
        self.spent += node_id != 0
        if node_id in self.crashed:
            node = dataclasses.replace(
                node, status=NodeStatus.FAILED, error="crash", error_kind="crash", n_evals=1
            )
            self.nodes[node_id] = node
            return node
        obs = self.obs.setdefault(node_id, [])
        rng = self.rng("eval", node_id, len(obs))
        obs.append(land.score(self.quality[node_id] + rng.gauss(0, land.noise), self.maximize))
        std = statistics.stdev(obs) if len(obs) > 1 else None
        node = dataclasses.replace(
            node,
            status=NodeStatus.SUCCEEDED,
            score=statistics.fmean(obs),
            score_std=std,
            n_evals=len(obs),
        )
        self.nodes[node_id] = node
        return node


def normalised(run: SimRun, maximize: bool) -> float:
    """0 = the baseline, 1 = the optimum (quality is already on that scale)."""
    value = run.best_quality(maximize)
    return value if math.isfinite(value) else 0.0
