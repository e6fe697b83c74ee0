"""exts: tree search that treats each expansion as a value-of-information decision.

Formulas (values are scores in the better direction; see :mod:`.treebase`):

- **Reward** of a finished node v, fixed when it finishes:
  ``R(v) = pct(v) + tanh((value(v) - value(parent)) / spread)``, where pct is v's
  percentile rank among succeeded nodes, spread the standard deviation of their values
  (1 while it is 0), and the gain term is 0 when the parent has no value. A failed
  node has ``R = -1``. When verification changes v's mean, R(v) is computed again
  (percentiles of that moment) and v's parent's statistics of children follow; v's
  children keep the gain they were given.
- **Virtual child.** v's children's rewards y_1..y_n are Normal with unknown mean and
  variance under a Normal-Inverse-Gamma prior with mean ``mu0 = R(v)``, strength
  ``k0 = prior_strength``, shape ``a0 = prior_alpha`` and scale
  ``b0 = prior_var * (a0 - 1)``. The posterior is ``kn = k0 + n``,
  ``mun = (k0 mu0 + n ybar) / kn``, ``an = a0 + n / 2``,
  ``bn = b0 + S / 2 + k0 n (ybar - mu0)^2 / (2 kn)`` (S the sum of squared deviations),
  and a new child's reward is Student-t with ``2 an`` degrees of freedom, location mun
  and scale^2 ``bn (kn + 1) / (an kn)``.
- **Thompson test.** One draw y* of that predictive is compared with the best real
  child's reward B (mu0 for a childless node): expanding v is worth considering only
  if y* > B.
- **Value of information.** ``EI(v) = E[max(0, Y - B)]`` under the predictive (normal
  approximation: ``s phi(z) + (m - B) Phi(z)``, z = (m - B) / s) and
  ``cost(v) = 1 / (1 - pfail(v))`` evaluations per success, with
  ``pfail(v) = (failed children + f) / (children + 1)``, f the run's failure rate.
  ``voi(v) = EI(v) / cost(v)``.
- **Decision.** From the root, at v: expand v when it is childless, or when y* > B,
  ``voi(v) >= voi(b)`` for b the child whose subtree holds the best value ("refine the
  best child" instead) and ``voi(v) >= threshold * rho`` (rho = budget spent, so the
  bar rises as the budget runs out). Otherwise, with probability ``debug_prob`` debug a
  failed leaf child (debug chain shorter than ``max_debug_depth``), else descend to b.
- **Quality-conditioned widening.** v may hold
  ``base_children + floor(widen * pct(v))`` children (the root counts as pct 1);
  a full node is never expanded, only descended through.

Children statistics are sums over the children (O(1) per update); rewards use the
percentiles of the moment the node finished (recomputed only when its own mean
changes), in the same order on update and on rebuild. A rebuild after a verification
sees the verified mean from the start, so rewards given after it may differ.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

from revtree.memory.records import Node
from revtree.orchestrator.policies.base import Selection
from revtree.orchestrator.policies.treebase import TreeIndex, TreePolicy, improve_op
from revtree.orchestrator.tree import Tree
from revtree.tasks.spec import ExtsSearch

FAILED_REWARD = -1.0


class ExtsPolicy(TreePolicy):
    """Value-of-information tree search; see the module docstring."""

    name = "exts"
    config: ExtsSearch
    ranks_in_observe = True  # rewards use the percentile of the moment

    def __init__(self, config: ExtsSearch) -> None:
        super().__init__(config)
        self.reset()

    def reset(self) -> None:
        self.reward: dict[int, float] = {}
        self.cn: defaultdict[int, int] = defaultdict(int)
        self.cf: defaultdict[int, int] = defaultdict(int)
        self.cs: defaultdict[int, float] = defaultdict(float)
        self.css: defaultdict[int, float] = defaultdict(float)
        self.cbest: dict[int, float] = {}
        self.sub_best: dict[int, float] = {}
        self.n_fail = self.n_done = 0

    def observe(self, node: Node) -> None:
        index = self.index
        assert index is not None
        value = index.value.get(node.id)
        self.n_done += 1
        if value is None:
            r = FAILED_REWARD
            self.n_fail += 1
        else:
            r = self._reward(node, value)
            for a in self.ancestors(node.id):
                if self.sub_best.get(a, -math.inf) >= value:
                    break
                self.sub_best[a] = value
        self.reward[node.id] = r
        p = node.parent_id
        if p is not None:
            self.cn[p] += 1
            self.cf[p] += value is None
            self.cs[p] += r
            self.css[p] += r * r
            self.cbest[p] = max(self.cbest.get(p, -math.inf), r)

    def _reward(self, node: Node, value: float) -> float:
        index = self.index
        assert index is not None
        parent_value = index.value.get(node.parent_id) if node.parent_id is not None else None
        gain = 0.0 if parent_value is None else value - parent_value
        spread = index.spread() or 1.0
        return index.percentile(value) + math.tanh(gain / spread)

    def revalued(self, node: Node, old: float) -> None:
        """A node's mean changed (verification): its reward, its parent's statistics of
        children and the subtree bests of its ancestors follow."""
        index = self.index
        assert index is not None
        r, was = self._reward(node, index.value[node.id]), self.reward[node.id]
        self.reward[node.id] = r
        p = node.parent_id
        if p is not None:
            self.cs[p] += r - was
            self.css[p] += r * r - was * was
            self.cbest[p] = max(self.reward[c] for c in index.children[p])
        for a in self.ancestors(node.id):
            kids = (self.sub_best.get(c, -math.inf) for c in index.children.get(a, ()))
            best = max(index.value.get(a, -math.inf), max(kids, default=-math.inf))
            if self.sub_best.get(a) == best:
                break  # the ancestors above keep theirs
            self.sub_best[a] = best

    # -- the posterior -----------------------------------------------------------------
    def predictive(self, v: int) -> tuple[float, float, float]:
        """(location, scale, degrees of freedom) of a new child's reward."""
        cfg = self.config
        mu0 = self.reward.get(v, 0.5)
        k0, a0 = cfg.prior_strength, cfg.prior_alpha
        b0 = cfg.prior_var * (a0 - 1)
        n = self.cn[v]
        if n == 0:
            return mu0, math.sqrt(b0 * (k0 + 1) / (a0 * k0)), 2 * a0
        ybar = self.cs[v] / n
        ss = max(0.0, self.css[v] - n * ybar * ybar)
        kn, an = k0 + n, a0 + n / 2
        mun = (k0 * mu0 + n * ybar) / kn
        bn = b0 + ss / 2 + k0 * n * (ybar - mu0) ** 2 / (2 * kn)
        return mun, math.sqrt(bn * (kn + 1) / (an * kn)), 2 * an

    def best_child_reward(self, v: int) -> float:
        return self.cbest.get(v, self.reward.get(v, 0.5))

    def voi(self, v: int) -> float:
        m, s, _ = self.predictive(v)
        b = self.best_child_reward(v)
        z = (m - b) / s
        ei = s * math.exp(-z * z / 2) / math.sqrt(2 * math.pi) + (m - b) * 0.5 * (
            1 + math.erf(z / math.sqrt(2))
        )
        f = self.n_fail / self.n_done if self.n_done else 0.0
        pfail = (self.cf[v] + f) / (self.cn[v] + 1)
        return ei * (1 - min(pfail, 0.99))

    def thompson(self, v: int, rng: random.Random) -> float:
        m, s, dof = self.predictive(v)
        chi2 = rng.gammavariate(dof / 2, 2.0)
        return m + s * rng.gauss(0.0, 1.0) / math.sqrt(chi2 / dof)

    def width(self, index: TreeIndex, v: int) -> int:
        cfg = self.config
        pct = 1.0 if v == 0 else index.percentile(index.value[v])
        return cfg.base_children + math.floor(cfg.widen * pct)

    # -- the decision ------------------------------------------------------------------
    def choose(self, tree: Tree, index: TreeIndex, rng: random.Random) -> Selection | None:
        cfg, rho = self.config, min(1.0, max(0.0, tree.budget_used))
        v = 0
        for _ in range(index.max_depth + 2):
            kids = index.children.get(v, ())
            good = [c for c in kids if c in index.value]
            room = index.n_children(v) < self.width(index, v)
            if not index.n_children(v):
                return self.exploit(index, v, improve_op(v))
            b = max(good, key=lambda c: (self.sub_best[c], -c)) if good else None
            if room:
                y = self.thompson(v, rng)
                voi = self.voi(v)
                if b is None or (
                    y > self.best_child_reward(v)
                    and voi >= self.voi(b)
                    and voi >= cfg.threshold * rho
                ):
                    return self.exploit(index, v, improve_op(v))
            buggy = [c for c in kids if index.debuggable(c, cfg.max_debug_depth)]
            if buggy and (b is None or rng.random() < cfg.debug_prob):
                return Selection(min(buggy), "debug")
            if b is None:
                return self.exploit(index, v, improve_op(v))
            v = b
        return self.exploit(index, v, improve_op(v))
