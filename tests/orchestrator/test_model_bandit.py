"""A bandit over the coder's models: real runs against the fake server over HTTP, three
models of known quality (``fake_models.Climber``), the bandit against fixed weights."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from revtree.agents.llm.bandit import Thompson
from revtree.agents.llm.fake_models import EVALUATOR, PROGRAM, Climber
from revtree.agents.llm.fake_server import FakeLLMServer
from revtree.memory import Node, NodeStatus, Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.orchestrator.model_choice import reward
from revtree.tasks import load_task

QUALITY = {"good": 0.9, "mid": 0.3, "bad": 0.05}  # chance an edit raises the score


def climb_task(
    root: Path, *, selection: str, budget: int = 31, novelty: float = 1.0, extra: str = ""
) -> Path:
    """Maximise X in prog.py; one coder call per candidate, on a three-model ensemble."""
    root.mkdir(parents=True)
    (root / "prog.py").write_text(PROGRAM.format(x=10.0))
    (root / "ev.py").write_text(EVALUATOR)
    members = "".join(
        f'[[agents.coder.ensemble]]\nmodel = "openai-compatible:{m}"\nweight = 1.0\n'
        for m in QUALITY
    )
    (root / "task.toml").write_text(
        textwrap.dedent(f"""\
        name = "climb"
        goal = "Raise X."
        editable = ["prog.py"]
        protected = ["ev.py"]
        [evaluate]
        command = "python ev.py"
        metric = "score"
        direction = "maximize"
        timeout = 20
        [search]
        policy = "greedy"
        num_drafts = 1
        seed = 1
        novelty_threshold = {novelty}
        [budget]
        max_nodes = {budget}
        {extra}
        [agents]
        mode = "llm"
        calls = "one"
        model_selection = "{selection}"
        max_retries = 0
        timeout = 5
        [agents.proposer]
        enabled = false
        [agents.reviewer]
        enabled = false
        """)
        + members
    )
    return root


def drive(store: Store, home: Path, task: Path, url: str) -> str:
    spec = load_task(task).with_overrides(agents={"base_url": url})
    run = create_run(store, spec, home)
    Orchestrator(store, run.id, home=home).drive()
    return run.id


def coder_share(store: Store, run_id: str) -> Counter[str]:
    return Counter(c.model for c in store.llm_calls(run_id) if c.role == "coder" and c.ok)


@pytest.mark.slow  # two runs of 30 candidates
def test_the_bandit_sends_most_calls_to_the_best_model_and_weights_do_not(
    tmp_path: Path, home: Path, store: Store
) -> None:
    from .conftest import revtree_here

    shares = {}
    for selection in ("bandit", "weights"):
        task = climb_task(tmp_path / selection, selection=selection)
        with FakeLLMServer(Climber(QUALITY, seed=3)) as srv:
            run_id = drive(store, home, task, srv.openai_url)
        calls = coder_share(store, run_id)
        assert sum(calls.values()) == 30
        shares[selection] = calls["good"] / 30
        if selection == "bandit":
            shown = json.loads(revtree_here(home, "show", run_id, "--json").stdout)
            arms = shown["models"]["coder"]["models"]
            assert sum(a["pulls"] for a in arms.values()) == 30
            best = max(arms, key=lambda m: arms[m]["mean_reward"] or 0)
            assert best == "openai-compatible:good"
            said = [e for e in store.events_since(run_id) if e.kind == "model"]
            assert len(said) == 30 and all("mean reward" in e.message for e in said)
    print(f"share of coder calls to the best model: {shares}")
    assert shares["bandit"] >= 0.6
    assert abs(shares["weights"] - 1 / 3) < 0.2


@pytest.mark.slow  # a run of 16 candidates in two sessions
def test_a_resumed_run_rebuilds_the_bandit_from_the_store(
    tmp_path: Path, home: Path, store: Store
) -> None:
    from revtree.memory import RunStatus
    from revtree.orchestrator.model_choice import Setting, choices_of, replay

    task = climb_task(tmp_path / "t", selection="bandit", budget=17)
    with FakeLLMServer(Climber(QUALITY, seed=5)) as srv:
        spec = load_task(task).with_overrides(agents={"base_url": srv.openai_url})
        run = create_run(store, spec, home)
        first = Orchestrator(store, run.id, home=home)
        first.parts.budget.limits = first.spec.with_overrides(budget={"max_nodes": 9}).budget
        try:
            first.drive()  # a first session that ends early, as a stop would
        finally:
            first.close()
        store.update_run(run.id, ("run", "stopped by user", None), status=RunStatus.STOPPED)
        setting = Setting.of(spec.agents, spec.search.seed, spec.maximize)
        nodes = {n.id: n for n in store.nodes(run.id)}
        stored = replay(setting, choices_of(store.events_since(run.id)), nodes)["coder"]
        assert stored.choices == 8 and sum(a.pulls for a in stored.arms.values()) == 8
        again = Orchestrator(store, run.id, home=home)
        rebuilt = again.parts.agents.coder.models.choice.bandits["coder"]  # type: ignore[attr-defined]
        assert rebuilt.choices == 8 and rebuilt.stats() == stored.stats()
        try:
            again.drive()
        finally:
            again.close()
    said = [e for e in store.events_since(run.id) if e.kind == "model"]
    assert sorted(e.node_id for e in said) == list(range(1, 17))  # one choice per candidate
    assert said[8].data is not None and said[8].data["models"] == stored.stats()
    assert coder_share(store, run.id).total() == 16


def node(score: float | None, status: NodeStatus = NodeStatus.SUCCEEDED) -> Node:
    return Node("r", 1, 0, "improve", status, score=score)


def test_the_reward_respects_the_direction_and_is_between_0_and_1() -> None:
    parent = node(10.0)
    assert reward(node(15.0), parent, maximize=True) == pytest.approx(0.75)
    assert reward(node(5.0), parent, maximize=True) == 0.0
    assert reward(node(5.0), parent, maximize=False) == pytest.approx(0.75)
    assert reward(node(None, NodeStatus.FAILED), parent, maximize=True) == 0.0
    assert reward(node(1.0), node(None, NodeStatus.FAILED), maximize=True) == 1.0
    assert reward(node(15.0), parent, True, usd=0.5, penalty=1.0) == pytest.approx(0.25)
    assert reward(node(100.0), parent, maximize=True) == 1.0


def test_thompson_moves_to_the_better_arm_and_is_seeded() -> None:
    b = Thompson(["a", "b"], seed=0, key="coder")
    for _ in range(20):
        b.reward("a", 0.9)
        b.reward("b", 0.1)
    picks = Counter(b.choose() for _ in range(200))
    assert picks["a"] > 180
    one, two = Thompson(["a", "b", "c"], 4, "coder"), Thompson(["a", "b", "c"], 4, "coder")
    first = [one.choose() for _ in range(12)]
    assert first == [two.choose() for _ in range(12)] and len(set(first)) > 1
    resumed = Thompson(["a", "b", "c"], 4, "coder")
    resumed.choices = 12  # the count is the whole saved state
    assert resumed.choose() == one.choose()
