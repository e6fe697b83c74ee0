"""The operator bandit (``[search] operators = "bandit"``) on simulated landscapes: it
moves away from an operator that never pays, follows one that does, resumes as the
uninterrupted run chose, and leaves the policy's own rules alone when off."""

from __future__ import annotations

import json
from collections import Counter

import pytest

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
