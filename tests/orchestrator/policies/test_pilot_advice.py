"""pilot's advice follows who proposes: with the knob proposer that ignores the parent
(tpe, random) every policy scores the same, so it says so and recommends optuna; where
the parent shapes the child (LLM agents, mutations, the local sampler) it picks a policy."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter

from revtree.memory.records import EvalResult, Node, NodeStatus
from revtree.orchestrator.commands.pilot import (
    KNOBS,
    KNOBS_LOCAL,
    LLM,
    MUTATE,
    analyse,
    driver_of,
    format_report,
)
from revtree.tasks import load_task
from revtree.tasks.spec import SearchConfig
from tests.orchestrator.conftest import make_task, revtree

ROOT = Path(__file__).resolve().parents[3]


def pilot(
    base: list[float], children: list[float | None], knobs: bool = True
) -> tuple[list[Node], list[EvalResult]]:
    """A finished pilot run: baseline repeats, then proposals from the root (with knob
    values, as the knob proposer makes them, or without, as LLM agents do)."""
    evals = [EvalResult(0, "full", r, True, s, duration=2.0) for r, s in enumerate(base)]
    nodes = [Node("p", 0, None, "baseline", NodeStatus.SUCCEEDED, score=sum(base) / len(base))]
    for i, s in enumerate(children, start=1):
        ok = s is not None
        status = NodeStatus.SUCCEEDED if ok else NodeStatus.FAILED
        proposal = {"hypothesis": "tune", "knobs": {"X": float(i)} if knobs else {}, "plan": ""}
        nodes.append(Node("p", i, 0, "tune", status, depth=1, score=s, proposal=proposal))
        evals.append(EvalResult(i, "full", 0, ok, s, duration=4.0))
    return nodes, evals


def valid(policy: str, params: dict[str, object]) -> None:
    TypeAdapter(SearchConfig).validate_python({"policy": policy, **params})


@pytest.mark.parametrize("budget", [None, 50, 500])
def test_knob_proposals_get_optuna_whatever_the_budget(budget: int | None) -> None:
    r = analyse(*pilot([10.0, 10.0, 10.0], [9.0, 8.0, 11.0, 7.0]), False, budget)
    assert r.driver == KNOBS and r.driver_inferred
    assert r.policy == "optuna" and r.params == {}
    assert "every policy evaluates the same candidates" in r.reasons[0]
    assert 'sampler = "local"' in r.reasons[1]
    lines = format_report(r)
    assert "recommended      policy = 'optuna' (any policy: the knob proposer decides)" in lines
    valid(r.policy, r.params)


def test_noise_and_failures_are_still_reported_for_knob_tasks() -> None:
    r = analyse(*pilot([10.0, 11.0, 9.0], [9.8, None, None, 10.1, None]), True, driver=KNOBS)
    assert r.policy == "optuna" and r.params == {} and not r.driver_inferred
    assert r.reasons[0].startswith("this task is driven by the offline Optuna knob proposer")
    assert any("noise sigma" in x for x in r.reasons)
    assert any("60% of proposals failed" in x for x in r.reasons)
    valid(r.policy, r.params)


@pytest.mark.parametrize("driver", [LLM, MUTATE, KNOBS_LOCAL])
def test_a_policy_is_picked_where_the_parent_shapes_the_child(driver: str) -> None:
    nodes, evals = pilot([10.0, 11.0, 9.0], [9.8, None, None, 10.1, None])
    r = analyse(nodes, evals, maximize=True, driver=driver)
    assert r.policy == "exts" and r.params["verify_top_k"] == 2
    assert any("where the search expands matters" in x for x in r.reasons)
    assert analyse(nodes, evals, True, budget_evals=500, driver=driver).policy == "evolution"
    valid(r.policy, r.params)


def test_proposals_without_knob_values_keep_the_policy_advice() -> None:
    r = analyse(*pilot([1.0, 1.0], [2.0, 3.0], knobs=False), maximize=True)
    assert r.driver is None and r.policy == "exts"
    with pytest.raises(ValueError, match="driver"):
        analyse(*pilot([1.0, 1.0], [2.0, 3.0]), maximize=True, driver="optuna")


def test_driver_of_follows_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    spec = load_task(ROOT / "examples" / "tsp-anneal")
    assert driver_of(spec) == KNOBS  # the README's case: every policy scores the same
    assert driver_of(spec.with_overrides(agents={"knobs": {"sampler": "local"}})) == KNOBS_LOCAL
    assert driver_of(spec.with_overrides(agents={"mode": "mutate"})) == MUTATE
    assert driver_of(load_task(ROOT / "examples" / "curve-fit")) == MUTATE
    assert driver_of(spec.with_overrides(agents={"mode": "llm", "model": "openai:m"})) == LLM


@pytest.mark.slow
def test_revtree_pilot_on_a_knob_task_recommends_optuna(tmp_path: Path, home: Path) -> None:
    task = make_task(tmp_path / "task")
    out = revtree(
        home, "pilot", str(task), "--evals", "5", "--repeats", "2",
        OPENAI_API_KEY="", ANTHROPIC_API_KEY="",
    ).stdout  # fmt: skip
    assert "policy = 'optuna' (any policy: the knob proposer decides)" in out, out
    assert "every policy evaluates the same candidates" in " ".join(out.split()), out
