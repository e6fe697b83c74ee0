"""The base of the tree-search policies: :class:`TreePolicy` and the incremental
:class:`TreeIndex` over the tree that it keeps in step.

A :class:`TreeIndex` holds what the policies need to choose in time independent of the
tree's size: parents, depths, finished children, pending (selected, unfinished) children
per parent, which nodes have any child, the better-direction value of each succeeded
node, a sorted list of values (percentile ranks, the lowest and highest value), the
best node (a heap), the running spread, and a pooled noise estimate.

Guarantees:
- ``select`` and ``update`` cost O(depth x branching) (plus an O(n) memmove for the
  sorted values, done in C), never an O(n) Python loop, once the index is built.
- The index is a function of the tree: :class:`TreePolicy` rebuilds it from the
  snapshot (finished nodes in id order) after ``load_state`` and whenever the
  snapshot's node count disagrees with what the index has seen. A run with one
  candidate in flight finishes nodes in id order, so a resumed run rebuilds exactly
  the index the uninterrupted run built incrementally.
- A finished node's score may change afterwards (verification stores the mean of
  several repeats): ``update`` with the new record re-ranks it (``revalue``) and the
  policy's ``revalued`` hook adjusts what it derived from the old value. Any other
  change to a finished node (its status, whether it has a finite score, its error
  kind: a retried node) drops the index, and the next ``select`` rebuilds it.

Not guaranteed: with several candidates in flight nodes finish out of id order, so a
rebuilt index can differ from the incremental one in the last bits of float sums (and
the run itself is not deterministic then anyway). The same holds after a verification
for what a policy fixes at the moment a node finishes (exts' rewards, evolution's
migrations): a rebuild sees the verified mean from the start.

Noise: a node's value is its mean score; ``lcb`` subtracts ``z`` standard errors, using
the node's own ``score_std`` when it has several evaluations, else the pooled standard
deviation of the nodes that do (:class:`Noise`).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import defaultdict
from typing import Any

from revtree.memory.records import Node, NodeStatus, directed
from revtree.orchestrator.policies.base import SeededPolicy, Selection
from revtree.orchestrator.tree import Tree

DEBUGGABLE = ("crash", "timeout", "metrics")
FINISHED = frozenset(s for s in NodeStatus if s.is_finished())  # a set lookup: fast
ROOT_PARENT = -1  # the pending key of a parentless node


def key_of(node: Node, maximize: bool) -> float | None:
    """The node's score in the better direction (higher is better), None unless succeeded
    without a drift alarm (an alarmed node is never exploited)."""
    if node.status is not NodeStatus.SUCCEEDED or node.score is None or node.alarm is not None:
        return None
    if not math.isfinite(node.score):
        return None
    return directed(node.score, maximize)


class Noise:
    """The evaluation noise of the valued nodes: each one's (score_std, n_evals), which
    were evaluated more than once, and the pooled per-evaluation standard deviation."""

    def __init__(self) -> None:
        self.by_node: dict[int, tuple[float | None, int]] = {}
        self.repeated: set[int] = set()  # valued nodes evaluated more than once
        self._std_sum, self._std_n = 0.0, 0

    def add(self, node: Node) -> None:
        self.by_node[node.id] = (node.score_std, node.n_evals)
        if node.n_evals > 1:
            self.repeated.add(node.id)
        if node.n_evals > 1 and node.score_std is not None:
            self._std_sum += node.score_std
            self._std_n += 1

    def remove(self, node_id: int) -> None:
        std, n = self.by_node.pop(node_id)
        self.repeated.discard(node_id)
        if n > 1 and std is not None:
            self._std_sum -= std
            self._std_n -= 1

    def n_evals(self, node_id: int) -> int:
        """How many evaluations a valued node's mean is over."""
        return self.by_node[node_id][1]

    def sigma(self) -> float:
        """Pooled per-evaluation noise: mean score_std of the repeated nodes, else 0."""
        return self._std_sum / self._std_n if self._std_n else 0.0

    def std(self, node_id: int) -> float:
        """A valued node's per-evaluation noise: its own score_std when it has several
        evaluations, else the pooled :meth:`sigma`."""
        std, n = self.by_node[node_id]
        return std if (n > 1 and std is not None) else self.sigma()


class TreeIndex:
    """Incrementally maintained views of a run's tree (see the module docstring)."""

    def __init__(self, maximize: bool) -> None:
        self.maximize = maximize
        self.parent: dict[int, int | None] = {}
        self.depth: dict[int, int] = {}
        self.operator: dict[int, str] = {}
        self.children: defaultdict[int, list[int]] = defaultdict(list)  # finished ones
        self.pending: defaultdict[int, int] = defaultdict(int)
        self.with_children: set[int] = set()  # any child, finished, pending or selected
        self.n_pending = self.n_finished = 0
        self.finished: dict[int, tuple[NodeStatus, str | None]] = {}  # status, error kind
        self._unfinished: set[int] = set()
        self.was_pending = False  # whether the last finished node had been pending
        self.value: dict[int, float] = {}
        self.noise = Noise()
        self.failed: dict[int, str | None] = {}
        self.debug_depth: dict[int, int] = {}
        self.sorted_values: list[float] = []
        self._best: list[tuple[float, int]] = []  # heap of (-value, id); stale ones linger
        self.deferred = False  # while True, values are appended, and rank() sorts them
        self.next_id = 0
        self.max_depth = 0
        self._sum = self._sumsq = 0.0

    # -- building ---------------------------------------------------------------------
    def register(self, node: Node) -> None:
        """Know a node's place in the tree (finished or not)."""
        if node.id in self.parent:
            return
        self.parent[node.id] = node.parent_id
        if node.parent_id is not None:
            self.with_children.add(node.parent_id)
        self.depth[node.id] = node.depth
        self.operator[node.id] = node.operator
        parent_dd = self.debug_depth.get(node.parent_id, 0) if node.parent_id is not None else 0
        self.debug_depth[node.id] = parent_dd + 1 if node.operator == "debug" else 0
        self.next_id = max(self.next_id, node.id + 1)
        self.max_depth = max(self.max_depth, node.depth)
        if node.status not in FINISHED:
            self._unfinished.add(node.id)
            self.pending[self._pkey(node.parent_id)] += 1
            self.n_pending += 1

    def selected(self, parent_id: int) -> None:
        """A child of ``parent_id`` is about to be created (it is pending until it finishes)."""
        self.pending[parent_id] += 1
        self.with_children.add(parent_id)
        self.n_pending += 1
        self.next_id += 1

    def finish(self, node: Node) -> bool:
        """Record a finished node; False if it was already recorded."""
        if node.id in self.finished or node.status not in FINISHED:
            return False
        self.was_pending = node.id in self._unfinished or node.id not in self.parent
        if self.was_pending:
            self._unfinished.discard(node.id)
            key = self._pkey(node.parent_id)
            if self.pending[key] > 0:
                self.pending[key] -= 1
                self.n_pending -= 1
        self.register(node)
        self.finished[node.id] = (node.status, node.error_kind)
        self.n_finished += 1
        if node.parent_id is not None:
            self.children[node.parent_id].append(node.id)
        value = key_of(node, self.maximize)
        if value is None:
            self.failed[node.id] = node.error_kind
            return True
        self._add_value(node.id, value)
        self.noise.add(node)
        return True

    def same_outcome(self, node: Node) -> bool:
        """Whether a finished node's new record keeps its status, error kind and
        whether it has a value (only its mean may change without a rebuild)."""
        return self.finished.get(node.id) == (node.status, node.error_kind) and (
            (node.id in self.value) == (key_of(node, self.maximize) is not None)
        )

    def revalue(self, node: Node) -> float | None:
        """Take a finished node's new mean (after more repeats); returns the old value,
        or None if neither the value nor the count of evaluations changed.

        Requires :meth:`same_outcome` (a node with a value keeps one)."""
        old = self.value.get(node.id)
        new = key_of(node, self.maximize)
        if (
            old is None
            or new is None
            or (new == old and self.noise.n_evals(node.id) == node.n_evals)
        ):
            return None
        del self.sorted_values[bisect.bisect_left(self.sorted_values, old)]
        self._sum -= old
        self._sumsq -= old * old
        self.noise.remove(node.id)
        self._add_value(node.id, new)
        self.noise.add(node)
        return old

    def rank(self) -> None:
        """Sort the values appended while ``deferred`` (a bulk build) and stop deferring."""
        self.sorted_values.sort()
        heapq.heapify(self._best)
        self.deferred = False

    def _pkey(self, parent_id: int | None) -> int:
        return ROOT_PARENT if parent_id is None else parent_id

    def _add_value(self, node_id: int, value: float) -> None:
        self.value[node_id] = value
        if self.deferred:
            self.sorted_values.append(value)
            self._best.append((-value, node_id))
        else:
            bisect.insort(self.sorted_values, value)
            heapq.heappush(self._best, (-value, node_id))
        self._sum += value
        self._sumsq += value * value

    # -- derived views ---------------------------------------------------------------
    @property
    def best_id(self) -> int | None:
        """The succeeded node with the best value (ties: the lowest id)."""
        heap, value = self._best, self.value
        while heap and value.get(heap[0][1]) != -heap[0][0]:
            heapq.heappop(heap)  # left behind by a revalue
        return heap[0][1] if heap else None

    @property
    def lo(self) -> float:
        """The worst current value (inf while there is none)."""
        return self.sorted_values[0] if self.sorted_values else math.inf

    @property
    def hi(self) -> float:
        """The best current value (-inf while there is none)."""
        return self.sorted_values[-1] if self.sorted_values else -math.inf

    def n_children(self, node_id: int) -> int:
        """Finished plus pending children."""
        return len(self.children.get(node_id, ())) + self.pending.get(node_id, 0)

    def percentile(self, value: float) -> float:
        """Fraction of succeeded nodes strictly worse than ``value``, ties counted half."""
        n = len(self.sorted_values)
        if n <= 1:
            return 0.5
        lo = bisect.bisect_left(self.sorted_values, value)
        hi = bisect.bisect_right(self.sorted_values, value)
        return (lo + (hi - lo - 1) / 2) / (n - 1)

    def spread(self) -> float:
        """Standard deviation of the succeeded values (0 with fewer than two)."""
        n = len(self.sorted_values)
        if n < 2:
            return 0.0
        mean = self._sum / n
        return math.sqrt(max(0.0, self._sumsq / n - mean * mean))

    def lcb(self, node_id: int, z: float) -> float:
        """The value minus ``z`` standard errors of its mean."""
        value = self.value[node_id]
        if z <= 0:
            return value
        n = self.noise.n_evals(node_id)
        return value - z * self.noise.std(node_id) / math.sqrt(max(1, n))

    def debuggable(self, node_id: int, max_debug_depth: int) -> bool:
        """A failed leaf whose failure a debug step may fix."""
        return (
            node_id in self.failed
            and self.failed[node_id] in DEBUGGABLE
            and self.n_children(node_id) == 0
            and self.debug_depth[node_id] < max_debug_depth
        )

    def top(self, k: int, z: float) -> list[int]:
        """The k best succeeded nodes by lcb, best first (ties: the lower id); the same
        as ranking every node, in O((k + r) log n) for r nodes evaluated more than once.

        A node evaluated once has lcb = value - z * sigma: those rank as their values do
        (up to rounding ties, which are taken too), so only the leading ones, popped
        from the heap of values, compete with the repeated nodes.
        """
        heap = self._best
        popped: list[tuple[float, int]] = []
        leaders: list[int] = []
        last = -math.inf  # the lcb of the k-th leader
        while heap:
            entry = heapq.heappop(heap)
            if self.value.get(entry[1]) != -entry[0] or (popped and entry == popped[-1]):
                continue  # stale (revalued) or a duplicate: dropped for good
            popped.append(entry)
            if entry[1] in self.noise.repeated:
                continue
            bound = self.lcb(entry[1], z)
            if len(leaders) >= k and bound < last:
                break
            leaders.append(entry[1])
            last = bound if len(leaders) == k else last
        for entry in popped:
            heapq.heappush(heap, entry)
        pool = [*leaders, *self.noise.repeated]
        return heapq.nlargest(k, pool, key=lambda i: (self.lcb(i, z), -i))


class TreePolicy(SeededPolicy):
    """A seeded policy that keeps a :class:`TreeIndex` in step with the tree.

    Subclasses implement ``choose(tree, index, rng)`` and may override ``observe``
    (called for each finished node, on update and on rebuild, in the same order),
    ``revalued`` (a node's mean changed after more repeats), ``record`` (a selection
    that creates a node) and ``reset`` (forget everything derived from the tree before
    a rebuild). While the baseline is not scored, ``select`` drafts from the root
    unless ``draft_unscored_root`` is False. A policy whose ``observe`` reads ranks
    (percentiles, the best node, the lowest or highest value) sets
    ``ranks_in_observe``; for the others a rebuild sorts the values once, at the end.
    """

    draft_unscored_root = True
    ranks_in_observe = False

    def __init__(self, config: Any) -> None:
        super().__init__(config.seed)
        self.config = config
        self.index: TreeIndex | None = None

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.index = None

    def update(self, node: Node) -> None:
        """Learn a finished node, or a finished node's new mean (verification)."""
        index = self.index
        if index is None:
            return  # the next select rebuilds from the tree, which holds this node
        if node.id in index.finished:
            if not index.same_outcome(node):
                self.index = None  # e.g. a retried node: rebuild from the tree
                return
            old = index.revalue(node)
            if old is not None:
                self.revalued(node, old)
        elif index.finish(node):
            if index.was_pending and node.parent_id is not None:
                self.pending_changed(node.parent_id, -1)
            self.observe(node)

    def sync(self, tree: Tree) -> TreeIndex:
        """The index, rebuilt from ``tree`` if it is missing or out of step with it."""
        index = self.index
        if (
            index is None
            or index.maximize != tree.maximize
            or index.n_finished + index.n_pending != len(tree.nodes)
        ):
            index = self.index = TreeIndex(tree.maximize)
            index.deferred = not self.ranks_in_observe
            self.reset()
            ordered = [tree.nodes[i] for i in sorted(tree.nodes)]
            for node in ordered:
                index.register(node)
                if node.status not in FINISHED and node.parent_id is not None:
                    self.pending_changed(node.parent_id, +1)
            for node in ordered:
                if index.finish(node):
                    self.observe(node)
            index.rank()
        return index

    def select(self, tree: Tree) -> Selection | None:
        rng = self.rng()
        index = self.sync(tree)
        unscored = 0 in index.parent and 0 not in index.finished
        if unscored and self.draft_unscored_root:
            choice: Selection | None = Selection(0, "draft")  # the baseline is not scored yet
        else:
            choice = self.choose(tree, index, rng)
        if choice is not None and choice.operator != "verify":
            self.record(choice)
        return choice

    def record(self, choice: Selection) -> None:
        """``choice`` creates a child of its parent (pending until it finishes)."""
        if self.index is None:
            return  # dropped meanwhile (load_state): the next select rebuilds
        self.index.selected(choice.parent_id)
        self.pending_changed(choice.parent_id, +1)

    def exploit(self, index: TreeIndex, node_id: int, operator: str) -> Selection:
        """Expand ``node_id``, unless it is a top-k node that needs more repeats first."""
        cfg = self.config
        k = getattr(cfg, "verify_top_k", 0)
        if (
            k
            and node_id in index.value
            and index.noise.n_evals(node_id) < cfg.verify_repeats
            and node_id in index.top(k, cfg.noise_z)
        ):
            return Selection(node_id, "verify")
        return Selection(node_id, operator)

    def choose(self, tree: Tree, index: TreeIndex, rng: random.Random) -> Selection | None:
        raise NotImplementedError

    def observe(self, node: Node) -> None:
        """A node finished (called in the same order on update and on rebuild)."""

    def revalued(self, node: Node, old: float) -> None:
        """A finished node's mean changed from ``old`` (more repeats)."""

    def reset(self) -> None:
        """Forget everything derived from the tree (a rebuild follows)."""

    def pending_changed(self, parent_id: int, delta: int) -> None:
        """A child of ``parent_id`` became pending (+1) or finished (-1)."""

    def ancestors(self, node_id: int | None) -> list[int]:
        """``node_id`` and its ancestors up to the root."""
        assert self.index is not None
        out, parent = [], self.index.parent
        while node_id is not None:
            out.append(node_id)
            node_id = parent.get(node_id)
        return out


def improve_op(node_id: int) -> str:
    return "draft" if node_id == 0 else "improve"
