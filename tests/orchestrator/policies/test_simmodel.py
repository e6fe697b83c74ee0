"""The simulated model drives the agentic policy on the simulated landscapes."""

from __future__ import annotations

from pydantic import TypeAdapter

from revtree.memory.records import Node, NodeStatus
from revtree.orchestrator.policies import make_policy
from revtree.orchestrator.policies.agentic import AgenticPolicy, parse_choice, summarize
from revtree.orchestrator.policies.sim import (
    LANDSCAPES,
    SimulatedPolicyModel,
    Simulator,
    parse_summary,
)
from revtree.orchestrator.tree import Tree
from revtree.tasks.spec import SearchConfig


def agentic(seed: int, model: SimulatedPolicyModel) -> AgenticPolicy:
    policy = make_policy(
        TypeAdapter(SearchConfig).validate_python({"policy": "agentic", "seed": seed})
    )
    assert isinstance(policy, AgenticPolicy)
    policy.attach(model.ask)
    return policy


def node(i: int, parent: int | None, score: float | None, **kw: object) -> Node:
    status = NodeStatus.SUCCEEDED if score is not None else NodeStatus.FAILED
    op = "baseline" if parent is None else str(kw.pop("op", "improve"))
    depth = 0 if parent is None else 1
    return Node("r", i, parent, op, status, depth=depth, score=score, n_evals=1, **kw)  # type: ignore[arg-type]


def tree(*extra: Node) -> Tree:
    drafts = [node(i, 0, 1.0 + i / 10, op="draft") for i in (1, 2, 3)]
    return Tree.of([node(0, None, 1.0), *drafts, *extra], maximize=False)


def test_the_summary_parses_back() -> None:
    t = tree(node(4, 1, None, error="boom", error_kind="crash"))
    seen = parse_summary(summarize(t, 12))
    assert not seen.higher and seen.total == 5 and set(seen.nodes) == {0, 1, 2, 3, 4}
    assert seen.nodes[2].score == 1.2 and seen.nodes[4].status == "failed"
    assert seen.nodes[0].parent is None and seen.nodes[3].parent == 0


def test_it_improves_the_best_and_verifies_a_close_top() -> None:
    model = SimulatedPolicyModel(0, p_malformed=0, explore=0, p_debug=0, p_crossover=0)
    choice, _ = parse_choice(model.ask(summarize(tree(), 12)), tree())
    assert choice is not None and (choice.parent_id, choice.operator) == (0, "improve")
    close = tree(node(4, 1, 0.5), node(5, 4, 0.9), node(6, 4, 0.95), node(7, 1, 0.5001))
    choice, _ = parse_choice(model.ask(summarize(close, 12)), close)
    assert choice is not None and choice.operator == "verify" and choice.parent_id == 4


def test_every_malformed_answer_falls_back_and_no_other_does() -> None:
    model = SimulatedPolicyModel(3, p_malformed=0.3)
    policy = agentic(3, model)
    Simulator(LANDSCAPES[2], 3, 60).run(policy)
    assert model.calls >= 60 and model.malformed > 5
    assert policy.fallbacks == model.malformed


def test_it_is_deterministic_and_climbs() -> None:
    runs = []
    for _ in range(2):
        model = SimulatedPolicyModel(5, p_malformed=0)
        run = Simulator(LANDSCAPES[3], 5, 60).run(agentic(5, model))
        runs.append([(n.parent_id, n.operator, n.score) for n in run.nodes.values()])
    assert runs[0] == runs[1]
    assert run.best_quality(True) > 0.8
