"""UCT over the candidate tree (AIRA-dojo) and budget-guided MCTS (Miyamoto et al., 2026).

Both keep, per node v, statistics of its subtree (v included), updated along the path
to the root when a node finishes (O(depth)):

- N(v): finished nodes, P(v): pending (selected, unfinished) nodes,
- S(v): succeeded nodes, W(v): the sum of their values in the better direction.

Q is min-max normalised over all succeeded values (lo, hi), failures counting 0:

    Q(v) = (W(v) - S(v) * lo) / ((hi - lo) * N(v))

**mcts.** From the root, while the node holds ``num_children`` children (finished plus
pending; with progressive widening ``ceil(pw_k * N(v) ** pw_alpha)``), move to the arm
maximising ``Q(c) + uct_c * sqrt(ln(N(v) + P(v)) / (N(c) + P(c)))``; then expand the node
("draft" from the root, "improve" elsewhere). Arms are the succeeded children, failed
leaves whose debug chain is shorter than ``max_debug_depth`` (choosing one means
"debug it"), and failed children whose subtree holds a success or a debuggable leaf
(a fixed result backs up along the chain, so Q rewards a chain that got fixed).

**bgmcts.** With rho = ``tree.budget_used`` (the fraction of the run's tightest
budget spent) and d_ans = ``d_ans`` or the deepest node so far, a real arm c of v scores

    Q(c) + uct_c * (1 - rho) * sqrt(ln(N(v) + P(v)) / (N(c) + P(c)))
         + kappa * rho * depth(c) / d_ans

and the virtual "generate" child of a succeeded node v, over its finished children's
normalised own values r (failures 0), scores

    mean(r) + lam * (1 - rho) * var(r)
      + uct_c * (1 - rho) * sqrt(ln(N(v) + P(v)) / (1 + children(v)))
      + kappa * rho * (depth(v) + 1) / d_ans

(the last two terms are our reading: the virtual child is an arm at depth(v) + 1 that
has been pulled once per child). The search expands v when the virtual child beats
every real arm; a node without children is always expanded.

Ties break towards the lower node id. Both policies exploit through
:meth:`TreePolicy.exploit`, so ``verify_top_k`` asks for repeats before a top node is
expanded.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

from revtree.memory.records import Node
from revtree.orchestrator.policies.base import Selection
from revtree.orchestrator.policies.treebase import TreeIndex, TreePolicy, improve_op
from revtree.orchestrator.tree import Tree
from revtree.tasks.spec import BgmctsSearch, MctsSearch


class _UctPolicy(TreePolicy):
    """Subtree statistics shared by mcts and bgmcts."""

    config: MctsSearch | BgmctsSearch

    def reset(self) -> None:
        self.n: defaultdict[int, int] = defaultdict(int)
        self.p: defaultdict[int, int] = defaultdict(int)
        self.s: defaultdict[int, int] = defaultdict(int)
        self.w: defaultdict[int, float] = defaultdict(float)
        # finished children's own values, for bgmcts's virtual child
        self.cn: defaultdict[int, int] = defaultdict(int)
        self.cs: defaultdict[int, float] = defaultdict(float)
        self.css: defaultdict[int, float] = defaultdict(float)
        self.cns: defaultdict[int, int] = defaultdict(int)

    def __init__(self, config: MctsSearch | BgmctsSearch) -> None:
        super().__init__(config)
        self.reset()

    def pending_changed(self, parent_id: int, delta: int) -> None:
        for a in self.ancestors(parent_id):
            self.p[a] += delta

    def observe(self, node: Node) -> None:
        assert self.index is not None
        value = self.index.value.get(node.id)
        for a in self.ancestors(node.id):
            self.n[a] += 1
            if value is not None:
                self.s[a] += 1
                self.w[a] += value
        if node.parent_id is not None:
            self._child_stats(node.parent_id, value, +1)

    def revalued(self, node: Node, old: float) -> None:
        assert self.index is not None
        new = self.index.value[node.id]
        for a in self.ancestors(node.id):
            self.w[a] += new - old
        if node.parent_id is not None:
            self._child_stats(node.parent_id, old, -1)
            self._child_stats(node.parent_id, new, +1)

    def _child_stats(self, parent: int, value: float | None, sign: int) -> None:
        self.cn[parent] += sign
        if value is not None:
            self.cns[parent] += sign
            self.cs[parent] += sign * value
            self.css[parent] += sign * value * value

    def q(self, index: TreeIndex, v: int) -> float:
        if self.n[v] == 0:
            return 0.0
        span = index.hi - index.lo
        if span <= 0:
            return 0.5 * self.s[v] / self.n[v]
        return (self.w[v] - self.s[v] * index.lo) / (span * self.n[v])

    def alive(self, index: TreeIndex, f: int, budget: int) -> bool:
        """A failed node whose subtree holds a success or a debuggable leaf."""
        if self.s[f] > 0:
            return True
        if index.debuggable(f, self.config.max_debug_depth):
            return True
        return budget > 0 and any(
            c in index.failed and self.alive(index, c, budget - 1) for c in index.children[f]
        )

    def arms(self, index: TreeIndex, v: int) -> list[tuple[int, str]]:
        """(child, what choosing it means): 'descend' or 'debug'."""
        out = []
        for c in index.children.get(v, ()):
            if c in index.value:
                out.append((c, "descend"))
            elif index.debuggable(c, self.config.max_debug_depth):
                out.append((c, "debug"))
            elif index.children.get(c) and self.alive(index, c, self.config.max_debug_depth):
                out.append((c, "descend"))
        return out

    def explore(self, v: int, c: int) -> float:
        return math.sqrt(math.log(max(1, self.n[v] + self.p[v])) / max(1, self.n[c] + self.p[c]))


class MctsPolicy(_UctPolicy):
    """UCT with min-max normalised Q; see the module docstring."""

    name = "mcts"
    config: MctsSearch

    def width(self, v: int) -> int:
        cfg = self.config
        if not cfg.progressive_widening:
            return cfg.num_children
        return max(1, math.ceil(cfg.pw_k * self.n[v] ** cfg.pw_alpha))

    def choose(self, tree: Tree, index: TreeIndex, rng: random.Random) -> Selection | None:
        v = 0
        for _ in range(index.max_depth + 2):
            succeeded = v in index.value or v == 0
            if succeeded and index.n_children(v) < self.width(v):
                return self.exploit(index, v, improve_op(v))
            arms = self.arms(index, v)
            if not arms:
                return self.exploit(index, v, improve_op(v)) if succeeded else None
            c, what = max(
                arms,
                key=lambda a: (
                    self.q(index, a[0]) + self.config.uct_c * self.explore(v, a[0]),
                    -a[0],
                ),
            )
            if what == "debug":
                return Selection(c, "debug")
            v = c
        return self.exploit(index, v, improve_op(v))


class BgmctsPolicy(_UctPolicy):
    """Budget-guided MCTS; see the module docstring."""

    name = "bgmcts"
    config: BgmctsSearch

    def virtual(self, index: TreeIndex, v: int, rho: float, d_ans: float) -> float:
        cfg, n = self.config, self.cn[v]
        span = index.hi - index.lo
        if n == 0:
            return math.inf
        if span <= 0:
            mean, var = 0.5 * self.cns[v] / n, 0.0
        else:
            lo, ns = index.lo, self.cns[v]
            mean = (self.cs[v] - ns * lo) / span / n
            ex2 = (self.css[v] - 2 * lo * self.cs[v] + ns * lo * lo) / span / span / n
            var = max(0.0, ex2 - mean * mean)
        bonus = (
            cfg.uct_c
            * (1 - rho)
            * math.sqrt(math.log(max(1, self.n[v] + self.p[v])) / (1 + index.n_children(v)))
        )
        return (
            mean
            + cfg.lam * (1 - rho) * var
            + bonus
            + cfg.kappa * rho * (index.depth[v] + 1) / d_ans
        )

    def choose(self, tree: Tree, index: TreeIndex, rng: random.Random) -> Selection | None:
        cfg, rho = self.config, min(1.0, max(0.0, tree.budget_used))
        d_ans = cfg.d_ans or max(1, index.max_depth)
        v = 0
        for _ in range(index.max_depth + 2):
            succeeded = v in index.value or v == 0
            arms = self.arms(index, v)
            if not arms:
                return self.exploit(index, v, improve_op(v)) if succeeded else None

            def score(a: tuple[int, str], v: int = v) -> tuple[float, int]:
                c = a[0]
                u = self.q(index, c) + cfg.uct_c * (1 - rho) * self.explore(v, c)
                return u + cfg.kappa * rho * index.depth[c] / d_ans, -c

            c, what = max(arms, key=score)
            if succeeded and self.virtual(index, v, rho, d_ans) > score((c, what))[0]:
                return self.exploit(index, v, improve_op(v))
            if what == "debug":
                return Selection(c, "debug")
            v = c
        return self.exploit(index, v, improve_op(v))
