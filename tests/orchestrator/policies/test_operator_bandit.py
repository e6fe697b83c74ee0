"""The operator bandit (``[search] operators = "bandit"``) on simulated landscapes: it
moves away from an operator that never pays, follows one that does, resumes as the
uninterrupted run chose, and leaves the policy's own rules alone when off; its replay
from the tree (what ``revtree show`` reports) is the live bandit. A real run's ``show``
is in ``tests/orchestrator/test_operator_bandit_show.py``."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from revtree.orchestrator.policies.operators import replay, summary
from revtree.orchestrator.policies.sim import Landscape, Simulator
from tests.orchestrator.policies.test_contract import policy

# half the proposals crash; a debug never fixes one (here) or always does (FIXABLE)
HOPELESS = Landscape("hopeless", p_fail=0.5, p_fix=0.0, noise=0.0)
FIXABLE = Landscape("fixable", p_fail=0.5, p_fix=1.0, noise=0.0, step_mean=0.05)


def operators(name: str, land: Landscape, seed: int, **params: object) -> Counter[str]:
    run = Simulator(land, seed, 60).run(policy(name, seed, **params))
    return Counter(s.operator for s in run.selections)


def test_greedy_stops_debugging_what_no_debug_fixes() -> None:
    bandit = sum(operators("greedy", HOPELESS, s, operators="bandit")["debug"] for s in range(3))
    fixed = sum(operators("greedy", HOPELESS, s)["debug"] for s in range(3))
    assert bandit < fixed / 2, (bandit, fixed)  # debug_prob 0.5 keeps debugging


def test_greedy_debugs_more_where_debugging_pays() -> None:
    hopeless = sum(operators("greedy", HOPELESS, s, operators="bandit")["debug"] for s in range(3))
    fixable = sum(operators("greedy", FIXABLE, s, operators="bandit")["debug"] for s in range(3))
    assert fixable > 1.5 * hopeless, (fixable, hopeless)


def test_evolution_crossover_follows_the_bandit_only_when_asked() -> None:
    off = operators("evolution", FIXABLE, 1, crossover_rate=0.0)
    assert off["crossover"] == 0  # the policy's rate: never
    on = operators("evolution", FIXABLE, 1, crossover_rate=0.0, operators="bandit")
    assert on["crossover"] > 0  # the bandit tries it whatever the rate


@pytest.mark.parametrize("name", ["greedy", "evolution"])
def test_a_resumed_bandit_chooses_as_the_uninterrupted_run(name: str) -> None:
    whole = Simulator(HOPELESS, 3, 40).run(policy(name, 3, operators="bandit"))
    for stop in (5, 17):
        sim = Simulator(HOPELESS, 3, 40)
        first = policy(name, 3, operators="bandit")
        sim.run(first, steps=stop)
        resumed = policy(name, 3, operators="bandit")
        resumed.load_state(json.loads(json.dumps(first.state())))
        assert sim.run(resumed).selections == whole.selections, f"stopped after {stop}"


def test_the_live_log_names_the_bandit_choice() -> None:
    p = policy("greedy", 0, operators="bandit", num_drafts=1)
    sim = Simulator(HOPELESS, 0, 10)
    sim.run(p, steps=4)
    assert p.note is not None and p.note.startswith("operator bandit chose ")
    assert "draft: " in p.note and "improve: " in p.note


def test_an_agentic_fallback_keeps_its_reason_beside_the_bandits_choice() -> None:
    p = policy("agentic", 0, operators="bandit", num_drafts=1)  # no model: every select falls back
    Simulator(HOPELESS, 0, 10).run(p, steps=4)
    assert p.note is not None and p.note.startswith("agentic fell back to greedy: no model")
    assert "; operator bandit chose " in p.note


@pytest.mark.parametrize("name", ["greedy", "evolution", "agentic"])
def test_the_replay_of_the_tree_is_the_policys_bandit(name: str) -> None:
    params: dict[str, Any] = {"operators": "bandit"} | (
        {} if name == "evolution" else {"num_drafts": 1}
    )
    p: Any = policy(name, 4, **params)
    sim = Simulator(FIXABLE, 4, 30)
    run = sim.run(p)  # parallel 1: nodes finish in id order
    rebuilt = summary(replay(p.operator_arms, 4, p.name, run.nodes.values(), True))["arms"]
    assert list(rebuilt) == list(p.operator_arms)
    again: Any = policy(name, 4, **params)
    again.sync(sim.tree())  # the policy's own rebuild, as a resume does
    assert summary(again.ops)["arms"] == rebuilt
    if name != "agentic":  # agentic learns the last nodes at its next select only
        assert summary(p.ops)["arms"] == rebuilt  # and the bandit that ran
    made = Counter(n.operator for i, n in run.nodes.items() if i != 0)
    assert {op: a["pulls"] for op, a in rebuilt.items()} == {op: made[op] for op in rebuilt}
    if name != "evolution":  # evolution drafts into an empty island: no arm's choice
        assert sum(made[op] for op in rebuilt) == len(run.nodes) - 1  # every candidate an arm's
    assert sum(a["pulls"] > 0 for a in rebuilt.values()) >= 2, rebuilt  # more than one tried
