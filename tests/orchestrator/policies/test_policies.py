"""What each tree policy promises beyond the shared contract."""

from __future__ import annotations

import dataclasses
import heapq
import random
from collections import Counter
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from revtree.memory.records import Node, NodeStatus
from revtree.orchestrator.policies import make_policy
from revtree.orchestrator.policies.evolution import EvolutionPolicy, EvolutionSelection
from revtree.orchestrator.policies.exts import ExtsPolicy
from revtree.orchestrator.policies.mcts import BgmctsPolicy, MctsPolicy
from revtree.orchestrator.policies.sim import LANDSCAPES, Landscape, Simulator
from revtree.orchestrator.policies.treebase import TreeIndex, TreePolicy
from revtree.orchestrator.tree import Tree
from revtree.tasks.spec import SearchConfig, TaskSpec

BY_NAME = {land.name: land for land in LANDSCAPES}


def build(name: str, seed: int = 0, **params: Any) -> Any:
    return make_policy(
        TypeAdapter(SearchConfig).validate_python({"policy": name, "seed": seed, **params})
    )


def node(
    i: int, parent: int | None, score: float | None, op: str = "improve", depth: int = 1
) -> Node:
    status = NodeStatus.SUCCEEDED if score is not None else NodeStatus.FAILED
    kind = None if score is not None else "crash"
    return Node("r", i, parent, op, status, depth=depth, score=score, error_kind=kind)


def test_search_sections_parse_with_their_parameters() -> None:
    spec = TaskSpec.model_validate(
        {
            "name": "t",
            "goal": "g",
            "editable": ["a.py"],
            "evaluate": {"command": "x", "metric": "m", "direction": "maximize"},
            "search": {"policy": "exts", "threshold": 0.1, "widen": 1},
        }
    )
    assert spec.search.policy == "exts" and spec.search.threshold == 0.1
    adapter = TypeAdapter(SearchConfig)
    with pytest.raises(ValidationError):
        adapter.validate_python({"policy": "mcts", "uct_k": 1})  # unknown key
    with pytest.raises(ValidationError):
        adapter.validate_python(
            {"policy": "evolution", "exploration_ratio": 0.6, "exploitation_ratio": 0.6}
        )


@pytest.mark.parametrize("name", ["greedy", "random", "mcts", "evolution", "bgmcts", "exts"])
def test_the_incremental_index_equals_a_rebuild(name: str) -> None:
    sim = Simulator(BY_NAME["failure_prone"], 0, 60)
    p: TreePolicy = build(name)
    sim.run(p)
    fresh: TreePolicy = build(name)
    fresh.sync(sim.tree())
    a, b = p.index, fresh.index
    assert a is not None and b is not None
    for attr in ("value", "sorted_values", "best_id", "failed", "debug_depth", "n_finished"):
        assert getattr(a, attr) == getattr(b, attr), attr
    assert {k: sorted(v) for k, v in a.children.items() if v} == {
        k: sorted(v) for k, v in b.children.items() if v
    }
    assert b.n_pending == 0 and a.n_pending == 0


def test_index_percentile_spread_and_lcb() -> None:
    ix = TreeIndex(maximize=False)
    for n in [
        node(0, None, 5.0, "baseline", 0),
        node(1, 0, 3.0),
        node(2, 0, 4.0),
        node(3, 0, None),
    ]:
        ix.register(n)
        ix.finish(n)
    assert ix.best_id == 1 and ix.percentile(ix.value[1]) == 1.0 and ix.percentile(ix.value[0]) == 0
    assert ix.failed == {3: "crash"} and ix.spread() > 0
    assert ix.lcb(1, 1.0) == ix.value[1]  # no repeated node yet: no noise known
    ix.finish(Node("r", 4, 0, "improve", NodeStatus.SUCCEEDED, score=3.5, score_std=0.4, n_evals=4))
    assert ix.noise.sigma() == pytest.approx(0.4) and ix.lcb(1, 1.0) == pytest.approx(
        ix.value[1] - 0.4
    )


def test_mcts_holds_num_children_and_debugs_failed_children() -> None:
    sim = Simulator(BY_NAME["failure_prone"], 0, 80)
    run = sim.run(build("mcts", num_children=3, max_debug_depth=2))
    kids = Counter(n.parent_id for n in run.nodes.values() if n.operator != "debug")
    assert max(kids.values()) <= 3
    debugs = [n for n in run.nodes.values() if n.operator == "debug"]
    assert debugs and all(run.nodes[n.parent_id or 0].status is NodeStatus.FAILED for n in debugs)
    tree = Tree.of(run.nodes.values(), True)
    assert all(tree.debug_depth(n) <= 2 for n in debugs)


def test_mcts_a_fixed_debug_chain_backs_up() -> None:
    nodes = [node(0, None, 1.0, "baseline", 0), node(1, 0, None, "draft"), node(2, 0, 2.0, "draft")]
    p2: MctsPolicy = build("mcts", num_children=2)
    fixed = [*nodes, node(3, 1, 3.0, "debug", 2)]
    p2.sync(Tree.of(fixed, True))
    assert p2.index is not None and p2.q(p2.index, 1) > 0  # the fix counts for the failed node
    assert p2.s[1] == 1 and p2.n[0] == 4


def test_mcts_progressive_widening_grows_with_visits() -> None:
    p: MctsPolicy = build("mcts", progressive_widening=True, pw_k=1.0, pw_alpha=0.5)
    p.n[0], p.n[1] = 16, 1
    assert p.width(0) == 4 and p.width(1) == 1


def test_bgmcts_goes_deeper_as_the_budget_is_spent() -> None:
    for land in (BY_NAME["deep"], Landscape("plain")):
        sim = Simulator(land, 0, 40)
        sim.run(build("bgmcts"))
        depths = []
        for rho in (0.0, 0.5, 0.95):
            tree = Tree.of(sim.nodes.values(), True, rho)
            choice = build("bgmcts").select(tree)
            assert choice is not None
            depths.append(tree.nodes[choice.parent_id].depth)
        assert depths == sorted(depths) and depths[0] < depths[-1], depths


def test_bgmcts_expands_when_the_virtual_child_wins() -> None:
    p: BgmctsPolicy = build("bgmcts", lam=0.0, uct_c=0.0, kappa=0.0)
    spread = [
        node(0, None, 0.0, "baseline", 0),
        node(1, 0, 0.0, "draft"),
        node(2, 0, 10.0, "draft"),
    ]
    choice = p.select(Tree.of(spread, True, 0.5))
    assert choice is not None and choice.parent_id == 2  # mean 0.5 < Q(best child) 1: descend
    p2: BgmctsPolicy = build("bgmcts", lam=100.0, uct_c=0.0, kappa=0.0)
    choice = p2.select(Tree.of(spread, True, 0.5))
    assert choice is not None and choice.parent_id == 0  # a high variance: expand the root


def test_exts_posterior_and_quality_widening() -> None:
    p: ExtsPolicy = build("exts")
    nodes = [
        node(0, None, 0.0, "baseline", 0),
        *(node(i, 0, -float(i), "draft") for i in range(1, 6)),
    ]
    p.sync(Tree.of(nodes, True))
    prior_mean, _, _ = p.predictive(3)  # a childless node: its prior
    mean, _, _ = p.predictive(0)  # five children that all got worse
    assert prior_mean == p.reward[3] and mean < p.reward[0]
    ix = p.index
    assert ix is not None and p.width(ix, 1) > p.width(ix, 5)
    assert p.voi(0) >= 0


def test_exts_threshold_rises_with_the_budget() -> None:
    sim = Simulator(BY_NAME["deep"], 0, 40)
    sim.run(build("exts"))
    roots = {}
    for rho in (0.0, 1.0):
        p: ExtsPolicy = build("exts", threshold=5.0, seed=2)
        tree = Tree.of(sim.nodes.values(), True, rho)
        roots[rho] = sum(
            c is not None and c.parent_id == 0 for c in (p.select(tree) for _ in range(30))
        )
        p.load_state({})
    assert roots[1.0] < roots[0.0] or roots[0.0] == 0


def test_evolution_every_island_receives_programs_and_migrates() -> None:
    sim = Simulator(BY_NAME["deceptive"], 0, 80)
    p: EvolutionPolicy = build("evolution", num_islands=4, migration_interval=3, migration_rate=0.2)
    run = sim.run(p)
    assert all(island.born >= 10 for island in p.islands)
    migrants = [i for k, isl in enumerate(p.islands) for i in isl.members if i % 4 != k]
    assert migrants, "the ring migrated programs"
    crosses = [n for n in run.nodes.values() if n.operator == "crossover"]
    assert crosses and all(len(n.extra_parents) == 1 for n in crosses)
    assert all(len(c.cells) >= 2 for c in p.islands)


def test_evolution_selection_carries_inspirations_and_features() -> None:
    sim = Simulator(BY_NAME["deceptive"], 0, 40)
    p: EvolutionPolicy = build(
        "evolution", features=("depth", "lineage", "knob:X:0:10"), num_inspirations=2
    )
    sim.run(p)
    choice = p.select(sim.tree())
    assert isinstance(choice, EvolutionSelection) and len(choice.inspirations) <= 2
    assert choice.parent_id not in choice.inspirations
    assert all(len(cell) == 3 for isl in p.islands for cell in isl.cells)


@pytest.mark.parametrize("name", ["mcts", "evolution", "bgmcts", "exts"])
def test_verification_repeats_the_top_nodes(name: str) -> None:
    sim = Simulator(BY_NAME["noisy"], 0, 60)
    run = sim.run(build(name, verify_top_k=2, verify_repeats=3, noise_z=1.0))
    verified = [n for n in run.nodes.values() if n.n_evals >= 3]
    assert verified, "some promising nodes were repeated"
    assert all(n.score_std is not None for n in verified)


def test_verification_is_off_by_default() -> None:
    noisy = Landscape("n", noise=0.3)
    for name in ("mcts", "evolution", "bgmcts", "exts"):
        run = Simulator(noisy, 0, 30).run(build(name))
        assert all(n.n_evals <= 1 for n in run.nodes.values())


def test_tree_extend_equals_a_fresh_snapshot() -> None:
    run = Simulator(BY_NAME["failure_prone"], 0, 30).run(build("greedy"))
    nodes = sorted(run.nodes.values(), key=lambda n: n.id)
    base = Tree.of(nodes[:10], True, 0.1)
    grown = base.extend([*nodes[10:], nodes[3]], 0.9)
    fresh = Tree.of(nodes, True, 0.9)
    assert grown.nodes == fresh.nodes and grown.budget_used == 0.9
    assert all(grown.children(i) == fresh.children(i) for i in fresh.nodes)
    assert len(base.nodes) == 10 and all(c.id < 10 for i in base.nodes for c in base.children(i))
    assert grown.best() == fresh.best()
    assert grown.top_id == fresh.top_id == max(fresh.nodes) and base.top_id == 9
    assert [n.id for n in grown.newest(4)] == sorted(fresh.nodes)[-4:]
    assert [n.id for n in Tree.of(nodes[::-1], True).newest(4)] == sorted(fresh.nodes)[-4:]


def subtree_values(tree: Tree, node_id: int) -> list[float]:
    """The better-direction values of the succeeded nodes in ``node_id``'s subtree."""
    out, stack = [], [node_id]
    while stack:
        n = tree.nodes[stack.pop()]
        if n.status is NodeStatus.SUCCEEDED and n.score is not None:
            out.append(n.score if tree.maximize else -n.score)
        stack.extend(c.id for c in tree.children(n.id))
    return out


@pytest.mark.parametrize("name", ["mcts", "bgmcts", "evolution", "exts"])
@pytest.mark.parametrize("maximize", [True, False])
def test_verified_means_are_reranked_everywhere(name: str, maximize: bool) -> None:
    """After a run whose top nodes were verified (their means changed after they
    finished), what each policy derived from the values equals a recomputation from the
    final tree."""
    sim = Simulator(BY_NAME["noisy"], 0, 90, maximize=maximize)
    p: Any = build(name, verify_top_k=3, verify_repeats=3, noise_z=1.0)
    sim.run(p)
    tree, ix = sim.tree(), p.index
    assert any(n.n_evals >= 3 for n in tree.nodes.values()), "some nodes were verified"
    sign = 1 if maximize else -1
    value = {n.id: sign * n.score for n in tree.succeeded if n.score is not None}
    assert ix.value == value
    assert (ix.lo, ix.hi) == (min(value.values()), max(value.values()))
    best = tree.best()
    assert best is not None and ix.best_id == best.id
    key = {i: (v, -i) for i, v in value.items()}
    if name in ("mcts", "bgmcts"):
        for i in tree.nodes:
            assert p.w[i] == pytest.approx(sum(subtree_values(tree, i)), abs=1e-9), i
    if name == "exts":
        for i in tree.nodes:
            below = subtree_values(tree, i)
            assert p.sub_best.get(i) == (max(below) if below else None), i
            kids = [c.id for c in tree.children(i)]
            if kids:
                assert p.cbest[i] == max(p.reward[c] for c in kids), i
                assert p.cs[i] == pytest.approx(sum(p.reward[c] for c in kids)), i
    if name == "evolution":
        programs = sorted(p.cells_of, key=lambda i: key[i], reverse=True)
        assert p.archive(ix) == programs[: p.config.archive_size]
        for island in p.islands:
            assert island.best == max(island.members, key=key.__getitem__)
            for cell, elite in island.cells.items():
                held = [i for i in island.members if p.cells_of[i] == cell]
                assert elite == max(held, key=key.__getitem__), (cell, held)


def test_index_top_equals_ranking_every_node() -> None:
    """``top`` (the heap's leaders plus the repeated nodes) equals a full ranking by lcb,
    through ties, values a rounding apart, repeats with and without a spread, and
    revaluations."""
    rng = random.Random(0)
    ix = TreeIndex(maximize=True)
    grid = [1.0, 2.0, 3.0, 3.0 + 2**-51, 3.0 + 2**-50]  # z = 40: the top lcbs tie
    for i in range(400):
        n = rng.choice([1, 1, 1, 2, 3])
        std = rng.choice([None, 0.0, 0.3, 1.0]) if n > 1 else None
        score = rng.choice(grid) if rng.random() < 0.9 else rng.gauss(2, 1)
        node = Node("r", i, None, "draft", NodeStatus.SUCCEEDED, score=score, n_evals=n)
        ix.finish(dataclasses.replace(node, score_std=std))
        if i > 10 and rng.random() < 0.2:  # a verification: the mean and the count change
            j = rng.randrange(i)
            if j in ix.value:
                again = Node("r", j, None, "draft", NodeStatus.SUCCEEDED, score=rng.choice(grid))
                ix.revalue(
                    dataclasses.replace(again, score_std=0.2, n_evals=ix.noise.n_evals(j) + 1)
                )
        for k in (1, 2, 5):
            for z in (0.0, 1.0, 40.0):
                scan = heapq.nlargest(k, ix.value, key=lambda i: (ix.lcb(i, z), -i))
                assert ix.top(k, z) == scan, (i, k, z)
    assert ix.best_id == max(ix.value, key=lambda i: (ix.value[i], -i))
    ties = TreeIndex(maximize=True)  # lcbs a rounding apart tie: the lower id ranks first
    for i, (score, n, std) in enumerate([(-99.0, 2, 1.0), (3.0, 1, None), (3.0 + 2**-50, 1, None)]):
        ties.finish(
            Node("r", i, None, "draft", NodeStatus.SUCCEEDED, score=score, score_std=std, n_evals=n)
        )
    assert ties.lcb(1, 40.0) == ties.lcb(2, 40.0) and ties.top(1, 40.0) == [1]
