"""The run's nodes in memory, kept in step with SQL: state changes, the best, snapshots.

Every change goes to SQL first (with its live-log event, in one transaction), then to
the mirror, under one lock. Readers take ``snapshot()`` (an immutable ``Tree`` grown by
the nodes that changed since the last one, never rebuilt) or ``get(id)``; nothing else
holds a node across a change. A node id that is not in the run is an error, never a
silent fall-back to the root.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from revtree.agents.lessons import Memory, lesson_for
from revtree.errors import Cancelled
from revtree.memory import Node, NodeStatus, Store
from revtree.memory.records import TWIN
from revtree.orchestrator.tree import Tree

EventSpec = tuple[str, str, Any]
Observer = Callable[[Node], None]  # told of a node (finished, or any change: ``watch``)


def subtree_alarm(ancestor: int, score: float | None) -> dict[str, Any]:
    """The alarm a finished descendant of an alarmed node carries."""
    return {
        "kind": "subtree",
        "message": f"descends from node {ancestor}, which carries a drift alarm",
        "dev": score,
        "holdout": None,
    }


class Mirror:
    """The nodes of one run, the lock that guards them, and the best node."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        maximize: bool,
        nodes: Iterable[Node],
        fraction: Callable[[], float] = lambda: 0.0,
        updaters: Iterable[Observer] = (),
    ) -> None:
        """``fraction``: the share of the budget used, for snapshots; ``updaters``: told
        of each finished or revised node under the lock (the policy's ``update``)."""
        self.store, self.run_id, self.maximize = store, run_id, maximize
        self.nodes: dict[int, Node] = {n.id: n for n in nodes}
        self.by_ticket = {n.thread_id: n.id for n in self.nodes.values() if n.thread_id}
        self.twins = {n.id for n in self.nodes.values() if n.error_kind == TWIN}
        self.lock = threading.RLock()
        self._changes = threading.Condition(self.lock)  # notified as a node changes
        self.driven: set[int] = set()  # nodes whose thread the scheduler drives now
        self._observers: list[Observer] = []  # told of each finished node
        self._updaters = list(updaters)  # the same, under the lock, with the best
        self.timings: dict[int, dict[str, float]] = {}
        self.fraction = fraction
        self._changed: list[int] = []
        self._tree = Tree.of(list(self.nodes.values()), maximize)
        self.memory = Memory(self.nodes, maximize)  # what prompts show of the run
        # told of every change, under the lock (``watch``): the memory first
        self._watchers: list[Observer] = [self.memory.update]
        best = self._tree.best()
        self.best_id = best.id if best else None

    def get(self, node_id: int | None) -> Node:
        """The node ``node_id``; a missing id is a bug of the caller, said as such."""
        if node_id is None or node_id not in self.nodes:
            raise KeyError(f"run {self.run_id} has no node {node_id}")
        return self.nodes[node_id]

    def parent(self, node: Node) -> Node:
        if node.parent_id is None:
            raise KeyError(f"node {node.id} of run {self.run_id} has no parent")
        return self.get(node.parent_id)

    def next_id(self) -> int:
        return max(self.nodes) + 1

    def counted(self) -> int:
        """The nodes that count toward ``max_nodes``: all but the near twins (refused
        before any evaluation; ``max_twins`` bounds them)."""
        with self.lock:
            return len(self.nodes) - len(self.twins)

    def time(self, node_id: int, step: str, seconds: float) -> None:
        spent = self.timings.setdefault(node_id, {})
        spent[step] = spent.get(step, 0.0) + seconds

    # -- changes (SQL first, then the mirror, then the live log) ----------------------
    def add(self, node: Node, event: EventSpec, policy_state: dict[str, Any]) -> Node:
        """Store a new node (selected: its event and the policy's state in one write)."""
        self.store.add_node(node, event, policy_state=policy_state)
        with self.lock:
            self.driven.add(node.id)  # its ticket drives it (the scheduler's, until it ends)
            self.nodes[node.id] = node
            self._changed.append(node.id)
            if node.thread_id:
                self.by_ticket[node.thread_id] = node.id
            self._saw(node)
        return node

    def set(self, node_id: int, event: EventSpec | None, **values: Any) -> Node:
        self.store.update_node(self.run_id, node_id, event, **values)
        with self.lock:
            if "status" in values:
                values["status"] = NodeStatus(values["status"])
            values.pop("timings", None)
            node = dataclasses.replace(self.nodes[node_id], **values)
            self.nodes[node_id] = node
            if node.error_kind == TWIN:
                self.twins.add(node_id)
            else:  # a retried twin (its kind reset) counts again
                self.twins.discard(node_id)
            self._changed.append(node_id)
            self._changes.notify_all()
            self._saw(node)  # last: the mirror is whole whatever an index does
        return node

    def watch(self, watcher: Observer) -> None:
        """Tell ``watcher`` of every node as it stands now and of each change from now on,
        under the lock (an index kept beside the nodes: it must be quick)."""
        with self.lock:
            self._watchers.append(watcher)
            for node in self.nodes.values():
                watcher(node)

    def _saw(self, node: Node) -> None:
        for watcher in self._watchers:
            watcher(node)

    def wait_finished(self, node_id: int, cancel: threading.Event) -> Node:
        """The node once its outcome is stored, while this session drives it (a prompt
        that shows its parent's score waits here for a parent still being evaluated);
        as it stands where nothing drives it; ``Cancelled`` if ``cancel`` is set first."""
        with self._changes:
            while not (node := self.get(node_id)).status.is_finished():
                if node_id not in self.driven:  # no one evaluates it now: never wait
                    return node
                if cancel.is_set():
                    raise Cancelled(f"the run is stopping (waiting for node {node_id})")
                self._changes.wait(0.1)
            return node

    def finish(
        self,
        node_id: int,
        status: NodeStatus,
        message: str,
        analysis: str | None = None,
        **values: Any,
    ) -> Node:
        """Record a node's outcome with its lesson; the observers learn it; a new best is
        said in the live log."""
        timings = {k: round(v, 4) for k, v in self.timings.pop(node_id, {}).items()}
        done = dataclasses.replace(self.nodes[node_id], status=status, **values)
        parent = self.nodes.get(done.parent_id) if done.parent_id is not None else None
        if status is NodeStatus.SUCCEEDED and parent is not None and parent.alarm is not None:
            values["alarm"] = subtree_alarm(parent.id, values.get("score"))
        values["lesson"] = lesson_for(done, parent, self.maximize)
        if analysis:
            values["lesson"] += f" | analysis: {analysis}"
        data = {
            "status": status.value,
            "score": values.get("score"),
            "error_kind": values.get("error_kind"),
        }
        node = self.set(
            node_id,
            ("node", message, data),
            status=status,
            finished_at=time.time(),
            timings=timings,
            **values,
        )
        for observe in self._observers:
            observe(node)
        with self.lock:
            for update in self._updaters:
                update(node)
            current = self.nodes.get(self.best_id) if self.best_id is not None else None
            new_best = node.status is NodeStatus.SUCCEEDED and (
                current is None or node.score_of(self.maximize) > current.score_of(self.maximize)
            )
            if new_best:
                self.best_id = node_id
        if new_best:
            self.store.add_event(
                self.run_id,
                "best",
                f"new best: node {node_id} scores {node.score:.6g}",
                node_id,
                {"score": node.score},
            )
        return node

    def subscribe(self, *observers: Observer) -> None:
        """Tell ``observers`` of each node that finishes from now on (the agents' learners,
        built after the mirror, whose context they read)."""
        self._observers.extend(observers)

    def revise(self, nodes: Iterable[Node]) -> None:
        """Nodes whose score or alarm changed after they finished (a verification, a
        drift alarm): the updaters learn them again, under the lock."""
        with self.lock:
            for node in nodes:
                for update in self._updaters:
                    update(node)

    def rebest(self, why: str) -> None:
        """Find the best again (a verification or an alarm moved it); say so if it moved."""
        with self.lock:
            before = self.best_id
            best = self.snapshot().best()
            self.best_id = best.id if best else None
        if self.best_id is not None and self.best_id != before:
            top = self.nodes[self.best_id]
            self.store.add_event(
                self.run_id,
                "best",
                f"new best: node {top.id} scores {top.score:.6g} ({why})",
                top.id,
                {"score": top.score},
            )

    def snapshot(self) -> Tree:
        """The tree as the policy sees it: grown from the last snapshot by the nodes that
        changed since (no O(n) rebuild per select)."""
        with self.lock:
            changed = [self.nodes[i] for i in dict.fromkeys(self._changed)]
            self._changed.clear()
            self._tree = self._tree.extend(changed, self.fraction())
            return self._tree

    def subtree(self, node_id: int) -> list[Node]:
        """The descendants of a node (depth first)."""
        tree, out, todo = self.snapshot(), [], [c.id for c in self.snapshot().children(node_id)]
        while todo:
            child = self.nodes[todo.pop()]
            out.append(child)
            todo += [c.id for c in tree.children(child.id)]
        return out
