"""Greedy, random and agentic (its greedy fallback) choose exactly as the O(n) scans they
replaced: same seed, same trees, the same selections.

The reference scans below are the code these policies ran before they kept an index;
both are driven in lockstep over random trees: failed nodes of every kind, debug
chains, drafts, ties, succeeded nodes without a finite score, several candidates in
flight finishing out of order, verifications that change a finished node's mean, both
metric directions, and save / resume of the policy state (through JSON, as stored).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from revtree.memory.records import Node, NodeStatus
from revtree.orchestrator.policies.agentic import AgenticPolicy, summarize
from revtree.orchestrator.policies.base import Policy, SeededPolicy, Selection
from revtree.orchestrator.policies.simple import GreedyPolicy, RandomPolicy
from revtree.orchestrator.policies.treebase import TreePolicy
from revtree.orchestrator.tree import Tree
from revtree.tasks.spec import AgenticSearch, GreedySearch, RandomSearch

KINDS = ("crash", "timeout", "metrics", "gated", "code", "sandbox")


def reference_greedy(policy: SeededPolicy, config: GreedySearch, tree: Tree) -> Selection:
    """GreedyPolicy.select before the index: a scan of every node."""
    rng = policy.rng()
    drafts = [n for n in tree.children(0) if n.operator == "draft"]
    if len(drafts) < config.num_drafts:
        return Selection(0, "draft")
    if rng.random() < config.debug_prob:
        buggy = [
            n
            for n in tree.nodes.values()
            if n.status is NodeStatus.FAILED
            and n.error_kind in ("crash", "timeout", "metrics")
            and not tree.children(n.id)
            and tree.debug_depth(n) < config.max_debug_depth
        ]
        if buggy:
            return Selection(rng.choice(sorted(buggy, key=lambda n: n.id)).id, "debug")
    best = tree.best()
    return Selection(best.id, "improve") if best else Selection(0, "draft")


class ReferenceGreedy(SeededPolicy):
    name = "greedy"

    def __init__(self, config: GreedySearch) -> None:
        super().__init__(config.seed)
        self.config = config

    def select(self, tree: Tree) -> Selection | None:
        return reference_greedy(self, self.config, tree)


class ReferenceRandom(SeededPolicy):
    name = "random"

    def select(self, tree: Tree) -> Selection | None:
        rng = self.rng()
        pool = sorted({0, *(n.id for n in tree.succeeded)})
        return Selection(rng.choice(pool), "improve" if pool else "draft")


class ReferenceAgentic(AgenticPolicy):
    """The agentic policy with the reference scans: the summary and the fallback."""

    def summary(self, tree: Tree) -> str:
        return summarize(tree, self.agentic.summary_nodes)

    def fallback(self, tree: Tree, why: str) -> Selection | None:
        self.fallbacks += 1
        self.note = f"agentic fell back to greedy: {why}"
        return reference_greedy(self, self.config, tree)


class Answers:
    """A model that answers at random: usable choices, impossible ones, and garbage."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        count = re.search(r"Nodes: (\d+)", prompt)
        r = self.rng.random()
        node, other = (self.rng.randrange(int(count[1]) + 1) for _ in "ab") if count else (0, 0)
        op = self.rng.choice(["improve", "debug", "draft", "crossover"])
        if r < 0.3:
            return "I would rather not say."
        if r < 0.4:
            return "ACTION: restart\nREASON: fresh start"
        if r < 0.5:
            return f"ACTION: verify\nNODE: {node}\nREASON: check"
        return f"ACTION: expand\nNODE: {node}\nOPERATOR: {op}\nOTHER: {other}\nREASON: r"


class Lockstep:
    """Drives a policy and its reference over the same random trees, comparing choices."""

    def __init__(self, make: Callable[[], tuple[Policy, Policy]], seed: int, **kw: Any) -> None:
        self.make, self.rng = make, random.Random(seed)
        self.maximize, self.parallel = kw["maximize"], kw["parallel"]
        self.nodes = {0: Node("r", 0, None, "baseline", NodeStatus.PENDING)}
        self.new, self.ref = make()
        self.flight: list[int] = []
        self.choices: list[Selection | None] = []

    def both(self, fn: Callable[[Policy], Any]) -> tuple[Any, Any]:
        return fn(self.new), fn(self.ref)

    def finish(self, node_id: int) -> None:
        node, rng = self.nodes[node_id], self.rng
        parent = self.nodes.get(node.parent_id) if node.parent_id is not None else None
        base = parent.score if parent and parent.score is not None else 0.0
        r = rng.random()
        if r < 0.55:
            score = math.nan if rng.random() < 0.03 else round(base + rng.gauss(0.1, 1), 1)
            done = dataclasses.replace(node, status=NodeStatus.SUCCEEDED, score=score, n_evals=1)
        elif r < 0.93:
            kind = rng.choice(KINDS)
            done = dataclasses.replace(node, status=NodeStatus.FAILED, error_kind=kind)
        else:
            done = dataclasses.replace(node, status=NodeStatus.REJECTED, error_kind="rejected")
        self.nodes[node_id] = done
        self.both(lambda p: p.update(done))

    def verify(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.status is not NodeStatus.SUCCEEDED or not math.isfinite(node.score or math.nan):
            return
        score = round((node.score or 0.0) + self.rng.gauss(0, 0.7), 1)
        n = node.n_evals + 1
        self.nodes[node_id] = done = dataclasses.replace(
            node, score=score, score_std=0.3, n_evals=n
        )
        self.both(lambda p: p.update(done))

    def create(self, choice: Selection) -> None:
        parent, i = self.nodes[choice.parent_id], max(self.nodes) + 1
        self.nodes[i] = Node(
            "r", i, parent.id, choice.operator, NodeStatus.PENDING, depth=parent.depth + 1
        )
        self.flight.append(i)

    def resume(self) -> None:
        states = self.both(lambda p: json.loads(json.dumps(p.state())))
        self.new, self.ref = self.make()
        self.new.load_state(states[0])
        self.ref.load_state(states[1])

    def step(self, budget: float) -> None:
        tree = Tree.of(self.nodes.values(), self.maximize, budget)
        a, b = self.both(lambda p: p.select(tree))
        assert a == b, f"after {len(self.choices)} selects"
        self.choices.append(a)
        if a is not None and a.operator == "verify":
            self.verify(a.parent_id)
        elif a is not None:
            self.create(a)
        while self.flight and (len(self.flight) >= self.parallel or self.rng.random() < 0.3):
            self.finish(self.flight.pop(self.rng.randrange(len(self.flight))))
        if self.rng.random() < 0.15:  # verify the best node (as the orchestrator does) or any
            best = Tree.of(self.nodes.values(), self.maximize).best()
            top = best.id if best and self.rng.random() < 0.5 else None
            self.verify(self.rng.choice(list(self.nodes)) if top is None else top)

    def run(self, steps: int, resume_every: int) -> list[Selection | None]:
        if self.rng.random() < 0.9:
            self.finish(0)
        for k in range(steps):
            if k and k % resume_every == 0:
                self.resume()
            self.step(k / steps)
        return self.choices


def greedy_pair(config: GreedySearch) -> tuple[Policy, Policy]:
    return GreedyPolicy(config), ReferenceGreedy(config)


def random_pair(seed: int) -> tuple[Policy, Policy]:
    return RandomPolicy(RandomSearch(seed=seed)), ReferenceRandom(seed)


def agentic_pair(config: AgenticSearch, seed: int) -> tuple[Policy, Policy]:
    new, ref = AgenticPolicy(config), ReferenceAgentic(config)
    for p in (new, ref):
        p.attach(Answers(seed))
    return new, ref


GREEDY_CONFIGS = [
    {"num_drafts": 3, "debug_prob": 0.5, "max_debug_depth": 3},
    {"num_drafts": 1, "debug_prob": 1.0, "max_debug_depth": 1},
    {"num_drafts": 5, "debug_prob": 0.8, "max_debug_depth": 0},
]


@pytest.mark.parametrize("maximize", [True, False])
@pytest.mark.parametrize("parallel", [1, 4])
@pytest.mark.parametrize("params", GREEDY_CONFIGS)
@pytest.mark.slow  # 7 s of --quick under -n 2 (issue 24)
def test_greedy_chooses_as_the_scan(maximize: bool, parallel: int, params: dict[str, Any]) -> None:
    kinds, chains = set(), 0
    for seed in range(4):
        config = GreedySearch(seed=seed, **params)
        drive = Lockstep(partial(greedy_pair, config), seed, maximize=maximize, parallel=parallel)
        choices = drive.run(250, resume_every=37 + seed)
        kinds |= {c.operator for c in choices if c is not None}
        tree = Tree.of(drive.nodes.values(), maximize)
        chains = max(chains, *(tree.debug_depth(n) for n in tree.nodes.values()))
    assert chains == params["max_debug_depth"], "debug chains reach the limit"
    assert kinds >= {"draft", "improve"} | ({"debug"} if params["max_debug_depth"] else set())


@pytest.mark.parametrize("maximize", [True, False])
@pytest.mark.parametrize("parallel", [1, 4])
def test_random_chooses_as_the_scan(maximize: bool, parallel: int) -> None:
    for seed in range(4):
        drive = Lockstep(partial(random_pair, seed), seed, maximize=maximize, parallel=parallel)
        choices = drive.run(250, resume_every=41)
        assert len({c.parent_id for c in choices if c is not None}) > 30


@pytest.mark.parametrize("parallel", [1, 3])
def test_agentic_falls_back_as_the_scan(parallel: int) -> None:
    for seed in range(4):
        config = AgenticSearch(seed=seed)
        drive = Lockstep(
            partial(agentic_pair, config, seed), seed, maximize=True, parallel=parallel
        )
        choices = drive.run(200, resume_every=53)
        new, ref = drive.new, drive.ref
        assert isinstance(new, AgenticPolicy) and 10 < new.fallbacks < 150
        assert isinstance(new.ask, Answers) and isinstance(ref, AgenticPolicy)
        assert isinstance(ref.ask, Answers) and new.ask.prompts == ref.ask.prompts
        assert len(new.ask.prompts) > 10  # since the last resume: the same summaries
        assert "verify" in {c.operator for c in choices if c is not None}


class KeepsLeaves(GreedyPolicy):
    """A broken greedy: a failed leaf stays debuggable after it got a child."""

    def record(self, choice: Selection) -> None:
        TreePolicy.record(self, choice)
        if choice.parent_id == 0 and choice.operator == "draft" and self.drafts is not None:
            self.drafts += 1


class IgnoresVerification(GreedyPolicy):
    """A broken greedy: a finished node's new mean is not learned."""

    def update(self, node: Node) -> None:
        if self.index is None or node.id not in self.index.finished:
            super().update(node)


@pytest.mark.parametrize("broken", [KeepsLeaves, IgnoresVerification])
def test_the_lockstep_catches_a_wrong_choice(broken: type[GreedyPolicy]) -> None:
    """The harness fails when the policy under test departs from the scan."""
    config = GreedySearch(seed=0)
    drive = Lockstep(
        lambda: (broken(config), ReferenceGreedy(config)), 0, maximize=True, parallel=2
    )
    with pytest.raises(AssertionError, match="after"):
        drive.run(250, resume_every=1000)
