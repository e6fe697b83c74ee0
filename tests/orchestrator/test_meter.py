"""The meter refuses a call whose worst case, with the calls in flight, could cross a cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from revtree.agents.llm import BudgetExhausted, Prompt
from revtree.agents.llm.meter import Meter
from revtree.memory import Store
from revtree.tasks import load_task

from .conftest import make_task


def test_calls_in_flight_count_against_the_dollar_cap(tmp_path: Path, store: Store) -> None:
    spec = load_task(make_task(tmp_path / "t")).with_overrides(
        budget={"max_usd": 1.0}, agents={"prices": {"m": {"input": 1e5, "output": 1e5}}}
    )
    store.create_run("r", "t", "greedy", "minimize", 0, {})
    prompt = Prompt("s", "p" * 400, "u")  # ~101 tokens in, 100 out at $0.1/token
    with pytest.raises(BudgetExhausted, match="max_usd=1"):
        Meter(store, "r", spec)._reserve("m", prompt, 100)
    meter = Meter(store, "r", spec)
    small = Prompt("s", "", "u")  # 1 token in, 3 out: $0.4 at worst
    first = meter._reserve("m", small, 3)
    meter._reserve("m", small, 3)
    with pytest.raises(BudgetExhausted):  # fine alone, not with two others in flight
        meter._reserve("m", small, 3)
    meter._release(first)
    assert meter.reserved_usd == pytest.approx(0.4)
    assert meter.exhausted() is not None  # a refusal ends the run cleanly
