"""evolution: MAP-Elites with islands (OpenEvolve, FunSearch).

- **Islands.** Node ``i`` (not the root) belongs to island ``i % num_islands``. The
  policy knows the id of the node its selection creates (the index's ``next_id``: the
  orchestrator numbers nodes ``max + 1`` under the lock that ``select`` holds), so it
  picks the parent *for that island*: every island receives programs in turn, even
  while others are empty (OpenEvolve's bug was children landing in the parent's island
  only, so islands never seeded stayed empty). An empty island drafts from the root.
- **Cells.** Each island keeps a MAP-Elites grid: a program's cell is its feature
  vector binned into ``feature_bins`` per dimension (one number, or a table per
  feature); a cell keeps its best program. Features, each in [0, 1]
  (:mod:`~revtree.orchestrator.policies.features`): ``depth``, ``operator``,
  ``lineage``, ``knob:NAME:LOW:HIGH``; ``score``, ``metric:NAME`` (an evaluator
  metric), ``code_size``, ``diff_size`` and ``drift``, scaled between the bounds seen
  so far, as OpenEvolve does (they come from :attr:`Node.features`, which the
  orchestrator fills for evolution runs); or a dotted path to ``f(node) -> tuple``.
- **Generations and migration.** A generation is one program per island. Every
  ``migration_interval`` generations each island sends its best
  ``ceil(migration_rate * programs)`` programs (at least one) to the next island on the
  ring, where they compete for cells and may be chosen as parents.
- **Parents.** With probability ``exploration_ratio`` a random cell elite of the
  island; with ``exploitation_ratio`` a random member of the global elite archive (the
  ``archive_size`` best programs) that lives in the island, else the island's best;
  otherwise a random program of the island. With probability ``crossover_rate`` a
  second, different elite of the island joins as ``extra_parents`` and the operator is
  ``crossover``. ``num_inspirations`` other elites go to the proposer as
  :attr:`EvolutionSelection.inspirations` (the orchestrator ignores them until it
  passes them on).
- **Verification.** When a program's mean changes after it finished (the
  orchestrator's verify repeats), it is re-ranked in the archive, in its cell and in
  every island holding it, so a cell's elite, an island's best and the archive always
  follow the current means. Past migrations are not redone (a rebuilt index replays
  them with the current means).
- Failed programs never enter an island; evolution does not debug.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

from revtree.memory.records import Node
from revtree.orchestrator.policies.base import Selection
from revtree.orchestrator.policies.features import make_feature
from revtree.orchestrator.policies.operators import OperatorBandit
from revtree.orchestrator.policies.treebase import TreeIndex, TreePolicy
from revtree.orchestrator.tree import Tree
from revtree.tasks.spec import EvolutionSearch


@dataclass(frozen=True)
class EvolutionSelection(Selection):
    """A selection with other elites to show the proposer as inspiration."""

    inspirations: tuple[int, ...] = ()


class Island:
    """One island: its programs, its MAP-Elites cells, its best.

    The best of each cell and of the island come from heaps of (-value, id) whose
    entries go stale when a program's value changes (verification): a changed program
    is pushed again and stale entries are dropped when they reach the top.
    """

    def __init__(self) -> None:
        self.members: list[int] = []
        self.ids: set[int] = set()
        self.cells: dict[tuple[int, ...], int] = {}  # cell -> its elite
        self.best: int | None = None
        self.born = 0  # programs bred here (migrants excluded)
        self._heap: list[tuple[float, int]] = []
        self._cell_heaps: dict[tuple[int, ...], list[tuple[float, int]]] = {}

    def add(self, node_id: int, cell: tuple[int, ...], index: TreeIndex) -> None:
        if node_id in self.ids:
            return
        self.ids.add(node_id)
        self.members.append(node_id)
        self.rerank(node_id, cell, index)

    def rerank(self, node_id: int, cell: tuple[int, ...], index: TreeIndex) -> None:
        """Rank a member at its current value: re-elect its cell's elite and the best."""
        entry = (-index.value[node_id], node_id)
        in_cell = self._cell_heaps.setdefault(cell, [])
        heapq.heappush(in_cell, entry)
        heapq.heappush(self._heap, entry)
        self.cells[cell] = _top(in_cell, index)
        self.best = _top(self._heap, index)


def _top(heap: list[tuple[float, int]], index: TreeIndex) -> int:
    while -heap[0][0] != index.value[heap[0][1]]:
        heapq.heappop(heap)  # a stale entry: the program's value has changed since
    return heap[0][1]


class EvolutionPolicy(TreePolicy):
    """MAP-Elites islands on a migration ring; see the module docstring."""

    name = "evolution"
    config: EvolutionSearch
    operator_arms = ("improve", "crossover")  # the operator bandit's, if asked for

    def __init__(self, config: EvolutionSearch) -> None:
        super().__init__(config)
        self.features = [make_feature(f) for f in config.features]
        self.bins = [config.bins(f) for f in config.features]
        self.reset()

    def reset(self) -> None:
        for f in self.features:
            f.reset()
        self.islands = [Island() for _ in range(self.config.num_islands)]
        self.cells_of: dict[int, tuple[int, ...]] = {}
        self.n_programs = 0
        self.ops = (
            OperatorBandit(self.operator_arms, self.config.seed, self.name)
            if self.config.operators == "bandit"
            else None
        )

    def cell(self, node: Node) -> tuple[int, ...]:
        assert self.index is not None
        out: list[int] = []
        for f, bins in zip(self.features, self.bins, strict=True):
            out.extend(min(bins - 1, int(x * bins)) for x in f(node, self.index))
        return tuple(out)

    def filled(self) -> list[int]:
        """Cells holding an elite, per island."""
        return [len(island.cells) for island in self.islands]

    def observe(self, node: Node) -> None:
        index = self.index
        assert index is not None
        if self.ops is not None:
            self.ops.observe(node, index.maximize)
        if node.id not in index.value or node.id == 0:
            return
        cell = self.cells_of[node.id] = self.cell(node)
        island = self.islands[node.id % len(self.islands)]
        island.add(node.id, cell, index)
        island.born += 1
        self.n_programs += 1
        period = self.config.migration_interval * len(self.islands)
        if len(self.islands) > 1 and self.n_programs % period == 0:
            self.migrate(index)

    def archive(self, index: TreeIndex) -> list[int]:
        """The global elite archive: the ``archive_size`` best programs, best first."""
        k = self.config.archive_size
        return [i for i in index.top(k + 1, 0.0) if i != 0][:k]  # the root is no program

    def revalued(self, node: Node, old: float) -> None:
        """Re-rank a program whose mean changed in every island holding it (its cell's
        elite and the island's best may change hands; the archive is read from the
        index, which has re-ranked it already)."""
        assert self.index is not None
        cell = self.cells_of.get(node.id)
        if cell is None:
            return  # the root, never a program
        for island in self.islands:
            if node.id in island.ids:
                island.rerank(node.id, cell, self.index)

    def migrate(self, index: TreeIndex) -> None:
        sends = []
        for k, island in enumerate(self.islands):
            count = max(1, math.ceil(self.config.migration_rate * len(island.members)))
            best = sorted(set(island.cells.values()), key=lambda i: (-index.value[i], i))
            sends.append((k, best[:count]))
        for k, ids in sends:
            target = self.islands[(k + 1) % len(self.islands)]
            for i in ids:
                target.add(i, self.cells_of[i], index)

    def choose(self, tree: Tree, index: TreeIndex, rng: random.Random) -> Selection | None:
        cfg, self.note = self.config, None
        island = self.islands[index.next_id % len(self.islands)]
        if not island.members:
            return Selection(0, "draft")
        elites = sorted(set(island.cells.values()))
        r = rng.random()
        if r < cfg.exploration_ratio:
            parent = rng.choice(elites)
        elif r < cfg.exploration_ratio + cfg.exploitation_ratio:
            local = [i for i in self.archive(index) if i in island.ids]
            parent = rng.choice(local) if local else island.best or elites[0]
        else:
            parent = rng.choice(island.members)
        others = [e for e in elites if e != parent]
        extra: tuple[int, ...] = ()
        operator = "improve"
        if others and self.ops is not None:
            operator = self.ops.choose(self.operator_arms, self.n_selects)
            self.note = self.ops.note(operator)
        elif others and rng.random() < cfg.crossover_rate:
            operator = "crossover"
        if operator == "crossover":
            extra = (rng.choice(others),)
        rest = [e for e in others if e not in extra]
        inspirations = tuple(rng.sample(rest, min(cfg.num_inspirations, len(rest))))
        base = self.exploit(index, parent, operator)
        if base.operator == "verify":
            return base
        return EvolutionSelection(parent, operator, extra, inspirations)
