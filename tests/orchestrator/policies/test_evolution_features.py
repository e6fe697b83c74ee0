"""The evolution policy's MAP-Elites features from what nodes measure (Node.features):
evaluator metrics, code size, diff size, drift and the score, scaled between the bounds
seen so far, with bins per feature; and a rebuilt policy (a resume) bins as the one
that saw the nodes one by one."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from revtree.memory.records import Node, NodeStatus
from revtree.orchestrator.policies import make_policy
from revtree.orchestrator.policies.evolution import EvolutionPolicy
from revtree.orchestrator.policies.features import make_feature
from revtree.orchestrator.tree import Tree
from revtree.tasks.spec import SearchConfig


def build(**params: Any) -> EvolutionPolicy:
    config = TypeAdapter(SearchConfig).validate_python({"policy": "evolution", **params})
    policy = make_policy(config)
    assert isinstance(policy, EvolutionPolicy)
    return policy


def program(i: int, score: float, **features: float) -> Node:
    return Node(
        "r",
        i,
        0 if i else None,
        "improve" if i else "draft",
        NodeStatus.SUCCEEDED,
        depth=1 if i else 0,
        score=score,
        features={
            f"metric:{k}" if k not in ("code_size", "drift") else k: v for k, v in features.items()
        },
    )


def test_a_metric_is_scaled_between_the_bounds_seen_so_far() -> None:
    feature = make_feature("metric:m")
    seen = [feature(program(i, 0.0, m=v), None)[0] for i, v in enumerate([5.0, 7.0, 6.0, 9.0])]
    # OpenEvolve's min-max: the first value is alone (0.5), then lo=5, hi=7, 9
    assert seen == [0.5, 1.0, 0.5, 1.0]
    assert feature(program(9, 0.0), None) == (0.0,)  # a node without the metric
    feature.reset()
    assert feature(program(1, 0.0, m=100.0), None) == (0.5,)


def test_cells_follow_the_metrics_with_bins_per_feature() -> None:
    p = build(
        num_islands=1,
        features=("metric:m", "code_size", "score"),
        feature_bins={"metric:m": 5, "code_size": 2},  # score: the default 6
    )
    nodes = [program(0, 0.0, m=0.0, code_size=100.0)] + [
        program(i, i / 10, m=float(i % 5), code_size=100.0 + 10 * (i % 2)) for i in range(1, 11)
    ]
    p.select(Tree.of(nodes, True))
    keys = set(p.islands[0].cells)
    assert len(keys) > 4
    assert all(0 <= a < 5 and 0 <= b < 2 and 0 <= c < 6 for a, b, c in keys)
    assert {k[0] for k in keys} == {0, 1, 2, 3, 4}  # the metric spreads over its 5 bins
    assert {k[1] for k in keys} == {0, 1}


def test_a_rebuilt_policy_bins_as_the_incremental_one() -> None:
    nodes = [program(0, 0.0, m=0.0, drift=0.0)] + [
        program(i, (i * 7 % 11) / 11, m=float(i * 3 % 13), drift=float(i)) for i in range(1, 25)
    ]
    params = {"num_islands": 3, "migration_interval": 2, "features": ("metric:m", "drift")}
    live = build(**params)
    live.select(Tree.of(nodes[:1], True))
    for i in range(1, len(nodes)):  # one by one, as a run finishes them
        live.update(nodes[i])
    state = live.state()
    resumed = build(**params)
    resumed.load_state(state)
    resumed.select(Tree.of(nodes, True))
    assert [isl.cells for isl in resumed.islands] == [isl.cells for isl in live.islands]
    assert resumed.cells_of == live.cells_of
    cells = dict(live.cells_of)  # the same object rebuilt: its learnt bounds start over
    live.load_state(state)
    live.select(Tree.of(nodes, True))
    assert live.cells_of == cells


def test_feature_bins_must_name_features() -> None:
    with pytest.raises(ValidationError, match="not in 'features'"):
        build(features=("depth",), feature_bins={"score": 3})
    with pytest.raises(ValidationError, match="at least 1"):
        build(features=("depth",), feature_bins={"depth": 0})
