"""The contract every search policy passes, run on simulated landscapes.

Determinism under a seed; save, resume and continue identically (with candidates in
flight); failed, rejected and pending nodes are never expanded (only debugged when
failed); both metric directions; the whole budget is spent.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import TypeAdapter

from revtree.memory.records import Node, NodeStatus
from revtree.orchestrator.policies import (
    CLASSES,
    MEMBERS,
    REGISTRY,
    Policy,
    PolicyDefaults,
    Selection,
    make_policy,
    registry_mismatch,
)
from revtree.orchestrator.policies.sim import LANDSCAPES, Landscape, SimRun, Simulator
from revtree.orchestrator.tree import Tree
from revtree.tasks.plugins import METHODS as PLUGIN_METHODS
from revtree.tasks.spec import POLICIES as SPEC_POLICIES
from revtree.tasks.spec import SearchConfig

NAMES = sorted(SPEC_POLICIES)
BY_NAME = {land.name: land for land in LANDSCAPES}
FAILING = BY_NAME["failure_prone"]
PLAIN = Landscape("plain", offset=0.0, noise=0.05, p_fail=0.15)
OPERATORS = {"draft", "improve", "debug", "tune", "crossover", "verify"}


def policy(name: str, seed: int = 0, **params: Any) -> Policy:
    return make_policy(
        TypeAdapter(SearchConfig).validate_python({"policy": name, "seed": seed, **params})
    )


class Checked(PolicyDefaults):
    """Wraps a policy and checks every selection against the snapshot it was made on."""

    def __init__(self, inner: Policy) -> None:
        self.inner, self.name = inner, inner.name
        self.budgets: list[float] = []

    def select(self, tree: Tree) -> Selection | None:
        choice = self.inner.select(tree)
        self.budgets.append(tree.budget_used)
        if choice is None:
            return None
        assert choice.operator in OPERATORS, choice
        parent = tree.nodes[choice.parent_id]
        assert parent.status.is_finished(), f"{choice}: parent {parent.status}"
        assert parent.status is not NodeStatus.REJECTED
        if parent.status is NodeStatus.FAILED and parent.id != 0:  # the baseline code stays
            assert choice.operator == "debug", f"{choice}: expands a failed node"
        elif choice.operator == "debug":
            raise AssertionError(f"{choice}: debugs a node that did not fail")
        for extra in choice.extra_parents:
            assert tree.nodes[extra].status is NodeStatus.SUCCEEDED
            assert extra != choice.parent_id
        return choice

    def update(self, node: Node) -> None:
        self.inner.update(node)

    def state(self) -> dict[str, Any]:
        return self.inner.state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.inner.load_state(state)


def shape(run: SimRun) -> list[tuple[int, int | None, str, tuple[int, ...], str]]:
    return [
        (n.id, n.parent_id, n.operator, n.extra_parents, n.status.value)
        for n in sorted(run.nodes.values(), key=lambda n: n.id)
    ]


def simulate(
    name: str, land: Landscape = PLAIN, seed: int = 0, budget: int = 40, **kw: Any
) -> SimRun:
    maximize = kw.pop("maximize", True)
    parallel = kw.pop("parallel", 1)
    sim = Simulator(land, seed, budget, maximize=maximize, parallel=parallel)
    return sim.run(Checked(policy(name, seed, **kw)))


def test_the_registry_holds_exactly_the_task_specs_policies() -> None:
    assert sorted(REGISTRY) == NAMES and len(SPEC_POLICIES) == len(NAMES)
    assert registry_mismatch(CLASSES, SPEC_POLICIES) is None
    for name in NAMES:
        built = policy(name)
        assert built.name == name and isinstance(built, REGISTRY[name])
        assert isinstance(built.slow, bool) and built.note is None
        built.attach(lambda prompt: "")  # every policy takes a model, most ignore it


def test_the_registry_check_names_the_difference() -> None:
    missing = registry_mismatch(CLASSES, (*SPEC_POLICIES, "annealing"))
    assert missing == "names in revtree.tasks.spec.POLICIES without a policy class: ['annealing']"
    extra = registry_mismatch(CLASSES, [n for n in SPEC_POLICIES if n != "exts"])
    assert extra == "policy classes not in revtree.tasks.spec.POLICIES: ['exts']"
    twice = registry_mismatch([*CLASSES, CLASSES[0]], SPEC_POLICIES)
    assert twice == f"names given twice: ['{CLASSES[0].name}']"


def test_only_the_agentic_policy_is_slow() -> None:
    assert [name for name in NAMES if policy(name).slow] == ["agentic"]


class Bare:
    """A policy of one's own, by dotted path, that only selects."""

    name = "bare"

    def __init__(self, config: Any) -> None:
        self.config = config

    def select(self, tree: Tree) -> Selection | None:
        return None


def test_a_policy_without_the_protocol_members_is_refused() -> None:
    config = SimpleNamespace(policy=f"{__name__}.Bare", seed=0)
    with pytest.raises(ValueError, match=r"lacks the method\(s\) attach, update, state, load_"):
        make_policy(config)


class Nameless:
    """Every method of the protocol, but not its data members (name, slow, note)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def attach(self, ask: Any) -> None: ...
    def select(self, tree: Tree) -> Selection | None: ...
    def update(self, node: Any) -> None: ...
    def state(self) -> dict[str, Any]: ...
    def load_state(self, state: dict[str, Any]) -> None: ...


def test_a_built_policy_without_the_data_members_is_refused() -> None:
    config = SimpleNamespace(policy=f"{__name__}:Nameless", seed=0, options={})
    with pytest.raises(TypeError, match="lacks name, slow, note of the Policy protocol"):
        make_policy(config)


def test_the_task_layer_lists_the_protocols_methods() -> None:
    """tasks.plugins checks policies at load by METHODS (it may not import Policy)."""
    protocol = {n for n, v in vars(Policy).items() if callable(v) and not n.startswith("_")}
    assert set(PLUGIN_METHODS) == protocol
    assert set(MEMBERS) == protocol | set(Policy.__annotations__)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_tree(name: str) -> None:
    a, b = simulate(name, FAILING, seed=3), simulate(name, FAILING, seed=3)
    assert shape(a) == shape(b) and a.selections == b.selections
    if name != "optuna":  # optuna always tunes the root: only the knob study differs
        others = [shape(simulate(name, FAILING, seed=s)) for s in (4, 5)]
        assert any(o != shape(a) for o in others)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("parallel", [1, 3])
def test_resume_chooses_as_the_uninterrupted_run(name: str, parallel: int) -> None:
    whole = simulate(name, FAILING, seed=1, budget=45, parallel=parallel)
    for stop in (1, 9, 23):
        sim = Simulator(FAILING, 1, 45, parallel=parallel)
        first = policy(name, 1)
        sim.run(first, steps=stop)
        saved = json.loads(json.dumps(first.state()))  # as stored: JSON
        assert len(json.dumps(saved)) < 2000
        resumed = policy(name, 1)
        resumed.load_state(saved)
        rest = sim.run(resumed)
        assert rest.selections == whole.selections, f"stopped after {stop} selects"
        assert shape(rest) == shape(whole)


@pytest.mark.parametrize("name", NAMES)
def test_a_failed_select_rolls_back(name: str) -> None:
    """The orchestrator restores the state saved before a select whose node it could not store."""
    sim = Simulator(FAILING, 2, 30)
    p = policy(name, 2)
    sim.run(p, steps=12)
    before = p.state()
    lost = p.select(sim.tree())
    p.load_state(before)
    assert p.select(sim.tree()) == lost


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("parallel", [1, 4])
def test_failed_and_pending_nodes_and_the_budget(name: str, parallel: int) -> None:
    for seed in range(3):
        sim = Simulator(FAILING, seed, 40, parallel=parallel)
        checked = Checked(policy(name, seed))
        run = sim.run(checked)
        assert sim.spent == 40, "the whole budget is spent"
        assert all(n.status.is_finished() for n in run.nodes.values())
        assert checked.budgets[0] == 0 and 0.9 <= checked.budgets[-1] < 1
        assert any(n.status is NodeStatus.FAILED for n in run.nodes.values())


@pytest.mark.parametrize("name", NAMES)
def test_minimize_and_maximize_choose_alike(name: str) -> None:
    up = simulate(name, PLAIN, seed=4, maximize=True)
    down = simulate(name, PLAIN, seed=4, maximize=False)
    assert up.selections == down.selections
    best_up = Tree.of(up.nodes.values(), True).best()
    best_down = Tree.of(down.nodes.values(), False).best()
    assert best_up is not None and best_down is not None and best_up.id == best_down.id


@pytest.mark.parametrize("name", sorted(set(NAMES) - {"optuna"}))
def test_policies_improve_on_the_baseline(name: str) -> None:
    gains = [simulate(name, PLAIN, seed=s).best_quality(True) for s in range(4)]
    assert sum(gains) / len(gains) > 0.3


@pytest.mark.parametrize("name", NAMES)
def test_a_failed_baseline_does_not_stop_the_search(name: str) -> None:
    sim = Simulator(PLAIN, 0, 15)
    sim.crashed.add(0)
    run = sim.run(Checked(policy(name)))
    assert sim.spent == 15 and run.nodes[0].status is NodeStatus.FAILED


def test_rejected_nodes_are_never_parents() -> None:
    nodes = [
        Node("r", 0, None, "baseline", NodeStatus.SUCCEEDED, score=1.0),
        Node("r", 1, 0, "draft", NodeStatus.REJECTED, depth=1, error_kind="rejected"),
        Node("r", 2, 0, "draft", NodeStatus.SUCCEEDED, depth=1, score=2.0),
    ]
    for name in NAMES:
        p = Checked(policy(name))
        for n in nodes:
            p.update(n)
        for _ in range(5):
            choice = p.select(Tree.of(nodes, True, 0.5))
            assert choice is None or choice.parent_id != 1
            if choice is not None and choice.operator != "verify":
                nodes = [*nodes]  # a pending child appears, as the orchestrator adds it
                child = Node("r", len(nodes), choice.parent_id, choice.operator, NodeStatus.PENDING)
                nodes.append(dataclasses.replace(child, depth=2))


def grow(sim: Simulator, p: Policy, steps: int) -> list[Selection | None]:
    """Select, create and evaluate one candidate at a time (verify: one more repeat)."""
    choices = []
    for _ in range(steps):
        choice = p.select(sim.tree())
        choices.append(choice)
        if choice is not None:
            is_verify = choice.operator == "verify"
            p.update(sim.evaluate(choice.parent_id if is_verify else sim.create(choice)))
    return choices


def verified(sim: Simulator, node_id: int, score: float) -> Node:
    """The node after verification found its mean to be ``score`` over three repeats."""
    sim.obs[node_id] = [score] * 3
    node = dataclasses.replace(sim.nodes[node_id], score=score, score_std=0.0, n_evals=3)
    sim.nodes[node_id] = node
    return node


# exts' rewards and evolution's migrations keep the means of the moment they happened, so
# a rebuild after a verification differs from them by design (see test_policies.py).
REBUILT_ALIKE = sorted(set(NAMES) - {"exts", "evolution"})


@pytest.mark.parametrize("name", REBUILT_ALIKE)
@pytest.mark.parametrize("drop", [True, False])
def test_a_verified_mean_is_learned(name: str, drop: bool) -> None:
    """After verification changes a finished node's mean (the orchestrator's update), the
    policy chooses as one rebuilt from the tree that holds the new mean: the best node
    falls below the worst (drop), or a middling one rises above the best."""
    for seed in range(3):
        sim = Simulator(PLAIN, seed, 200)
        p = policy(name, seed)
        grow(sim, p, 25)
        tree = sim.tree()
        good = sorted(tree.succeeded, key=lambda n: (tree.score(n), -n.id))
        scores = [n.score for n in good if n.score is not None]
        target = good[-1] if drop else good[len(good) // 2]
        p.update(verified(sim, target.id, min(scores) - 1 if drop else max(scores) + 1))
        fresh = policy(name, seed)
        fresh.load_state(json.loads(json.dumps(p.state())))
        twin = copy.deepcopy(sim)
        assert grow(sim, p, 15) == grow(twin, fresh, 15), f"seed {seed}"


@pytest.mark.parametrize("name", ["greedy", "agentic", "mcts", "bgmcts", "exts", "evolution"])
def test_a_verified_best_is_no_longer_exploited(name: str) -> None:
    """Two drafts; the better one is expanded, then verified far below the other: the
    policy expands the other one now (greedy improves the new best, evolution's cell
    elite changes hands, the tree searches' statistics follow the new mean)."""
    params: dict[str, Any] = {
        "greedy": {"num_drafts": 2, "debug_prob": 0.0},
        "agentic": {"num_drafts": 2, "debug_prob": 0.0},
        "mcts": {"num_children": 2, "uct_c": 0.0},
        "bgmcts": {"uct_c": 0.0, "kappa": 0.0, "lam": 0.0},
        "exts": {"base_children": 2, "widen": 0.0, "debug_prob": 0.0},
        "evolution": {"num_islands": 1, "exploration_ratio": 1.0, "exploitation_ratio": 0.0},
    }[name]
    nodes = [
        Node("r", 0, None, "baseline", NodeStatus.SUCCEEDED, score=1.0, n_evals=1),
        Node("r", 1, 0, "draft", NodeStatus.SUCCEEDED, depth=1, score=3.0, n_evals=1),
        Node("r", 2, 0, "draft", NodeStatus.SUCCEEDED, depth=1, score=2.0, n_evals=1),
    ]
    p = policy(name, **params)
    for n in nodes:
        p.update(n)
    before = p.select(Tree.of(nodes, True))
    assert before is not None and before.parent_id == 1, before
    child = Node("r", 3, 1, before.operator, NodeStatus.REJECTED, depth=2, error_kind="rejected")
    nodes.append(child)
    p.update(child)
    nodes[1] = dataclasses.replace(nodes[1], score=0.5, score_std=0.1, n_evals=3)
    p.update(nodes[1])  # as the orchestrator does after verify
    after = p.select(Tree.of(nodes, True))
    assert after is not None and after.parent_id == 2, after
