"""Who writes a run's candidates is decided in one place (agents/driver.py, issue 25):
the decision for each kind of task, that the wiring, the sandbox choice and ``pilot``
take it from there, and that no other module reads ``[agents] mode`` to decide."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import revtree
from revtree.agents.driver import KNOBS, KNOBS_LOCAL, LLM, MUTATE, driver
from revtree.orchestrator.commands.pilot import driver_of
from revtree.orchestrator.wiring import writers
from revtree.tasks import load_task

ROOT = Path(__file__).parents[2]
KNOB_TASK = ROOT / "examples" / "tsp-anneal"  # declares [[knobs]]
CODE_TASK = ROOT / "examples" / "curve-fit"  # declares none
PACKAGE = Path(revtree.__file__).parent
MODES = {"auto", "llm", "knobs", "mutate"}


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(env, raising=False)


@pytest.mark.parametrize(
    ("task", "agents", "name", "calls"),
    [
        (KNOB_TASK, {}, KNOBS, None),  # auto, no model: the knobs it declares
        (KNOB_TASK, {"knobs": {"sampler": "local"}}, KNOBS_LOCAL, None),
        (KNOB_TASK, {"mode": "mutate"}, MUTATE, None),
        (CODE_TASK, {"mode": "auto"}, MUTATE, None),  # auto without knobs: code mutations
        (CODE_TASK, {"mode": "llm", "model": "openai:m"}, LLM, "two"),
        (CODE_TASK, {"mode": "llm", "model": "openai:m", "calls": "one"}, LLM, "one"),
        (
            CODE_TASK,
            {"mode": "auto", "model": "openai-compatible:m", "base_url": "http://127.0.0.1:9"},
            LLM,
            "two",
        ),
    ],
)
def test_the_driver_of_each_kind_of_task(
    task: Path, agents: dict[str, object], name: str, calls: str | None
) -> None:
    spec = load_task(task).with_overrides(agents=agents)
    chosen = driver(spec)
    assert (chosen.name, chosen.calls, chosen.offline_reason) == (name, calls, None)
    assert driver_of(spec) == name  # pilot reads the same decision
    assert writers(spec) == chosen.writers()  # and the sandbox choice
    assert ("knob_only" in writers(spec)) == (name in (KNOBS, KNOBS_LOCAL))


def test_a_named_model_without_its_key_falls_back_offline_and_says_why() -> None:
    spec = load_task(KNOB_TASK).with_overrides(agents={"model": "openai:gpt-x"})
    chosen = driver(spec)
    assert chosen.name == KNOBS and not chosen.llm
    assert chosen.offline_reason and "OPENAI_API_KEY" in chosen.offline_reason
    forced = driver(spec.with_overrides(agents={"mode": "llm"}))
    assert forced.llm and forced.offline_reason is None  # llm mode: no silent fallback


def _mode_tests(source: str) -> list[int]:
    """Lines comparing a ``.mode`` attribute with an ``[agents] mode`` value."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        reads_mode = any(isinstance(s, ast.Attribute) and s.attr == "mode" for s in sides)
        values = {s.value for s in ast.walk(node) if isinstance(s, ast.Constant)}
        if reads_mode and values & MODES:
            hits.append(node.lineno)
    return hits


def test_only_the_driver_module_decides_by_the_mode() -> None:
    found = {
        str(p.relative_to(PACKAGE)): lines
        for p in PACKAGE.rglob("*.py")
        if (lines := _mode_tests(p.read_text(encoding="utf-8")))
    }
    # the settings' own validation reads it too (the coder must be enabled for a model)
    assert set(found) == {"agents/driver.py", "tasks/agent_settings.py"}, found
    assert len(found["tasks/agent_settings.py"]) == 1
    # the check can fail: the comparison the wiring made before this module existed
    assert _mode_tests('if spec.agents.mode == "mutate" or x:\n    pass\n') == [1]
