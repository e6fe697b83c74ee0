"""Pilot diagnostics over a finished run's nodes and evaluations."""

from __future__ import annotations

from revtree.memory.records import EvalResult, Node, NodeStatus
from revtree.orchestrator.commands.pilot import analyse, format_report


def pilot(base: list[float], children: list[float | None], maximize: bool = False) -> tuple:
    evals = [EvalResult(0, "full", r, True, s, duration=2.0) for r, s in enumerate(base)]
    nodes = [Node("p", 0, None, "baseline", NodeStatus.SUCCEEDED, score=sum(base) / len(base))]
    for i, s in enumerate(children, start=1):
        ok = s is not None
        status = NodeStatus.SUCCEEDED if ok else NodeStatus.FAILED
        nodes.append(Node("p", i, 0, "tune", status, depth=1, score=s))
        evals.append(EvalResult(i, "full", 0, ok, s, duration=4.0))
    return nodes, evals


def test_noise_spread_rates_and_a_quiet_task() -> None:
    nodes, evals = pilot([10.0, 10.0, 10.0], [9.0, 8.0, 11.0, 7.0])
    r = analyse(nodes, evals, maximize=False)
    assert r.n_evals == 7 and r.eval_seconds is not None and 2.0 < r.eval_seconds < 4.0
    assert r.noise_sigma == 0 and r.improvement_rate == 0.75 and r.failure_rate == 0
    assert r.policy == "exts" and "verify_top_k" not in r.params
    assert any("recommended" in line for line in format_report(r))


def test_noisy_and_failing_tasks_get_verification_and_debugging() -> None:
    nodes, evals = pilot([10.0, 11.0, 9.0], [9.8, None, None, 10.1, None])
    r = analyse(nodes, evals, maximize=True)
    assert r.noise_sigma == 1.0 and r.failure_rate == 0.6 and r.snr is not None and r.snr < 3
    assert r.params["verify_top_k"] == 2 and r.params["verify_repeats"] >= 2
    assert r.params["max_debug_depth"] == 3 and len(r.reasons) >= 3


def test_a_large_budget_recommends_evolution() -> None:
    nodes, evals = pilot([1.0, 1.0], [2.0, 3.0])
    assert analyse(nodes, evals, maximize=True, budget_evals=500).policy == "evolution"
    assert analyse(nodes, evals, maximize=True, budget_evals=50).policy == "exts"


def test_recommendations_are_valid_search_sections() -> None:
    from pydantic import TypeAdapter

    from revtree.tasks.spec import SearchConfig

    for base, kids, budget in [
        ([10.0, 11.0, 9.0], [9.8, None, None, 10.1, None], 50),
        ([10.0, 11.0], [None, 1.0, None], 400),
        ([1.0], [1.0, 1.0], None),
    ]:
        r = analyse(*pilot(base, kids), maximize=True, budget_evals=budget)
        TypeAdapter(SearchConfig).validate_python({"policy": r.policy, **r.params})
