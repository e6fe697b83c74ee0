"""The refused answers of the live log, as a replayed code step reads them
(``orchestrator.repairs``): the later round of the state's and the log's wins (a replay
may start from a checkpoint older than the rounds spent), only the node's current
attempt counts, and what the event keeps of the answer is redacted as a transcript is.
A real SQLite store and run (``revtree run``'s own creation of it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from revtree.errors import EditRefused, EditUnreadable
from revtree.memory import Store
from revtree.orchestrator import create_run, repairs
from revtree.tasks import TaskSpec, load_task

from .conftest import make_task


@pytest.fixture
def run(tmp_path: Path, home: Path, store: Store) -> tuple[Store, TaskSpec, str]:
    spec = load_task(make_task(tmp_path / "t"))
    return store, spec, create_run(store, spec, home).id


def refusal(round_: int, answer: str = "no edit here") -> dict:
    first = repairs.refused(EditUnreadable("no edits found", answer), None, "detail")
    return {**first, "round": round_}


def test_the_later_round_of_the_state_and_the_log_wins(run: tuple[Store, TaskSpec, str]) -> None:
    store, spec, run_id = run
    node = store.node(run_id, 0)
    assert repairs.latest(store, run_id, node, None) is None  # nothing refused yet
    assert repairs.latest(store, run_id, node, refusal(0)) == refusal(0)
    repairs.say(store, spec, run_id, node, refusal(0), 1)
    assert repairs.latest(store, run_id, node, None) == refusal(0)  # a replay from select
    repairs.say(store, spec, run_id, node, refusal(1), 1)
    # a replay from an exit checkpoint written before round 1 was spent
    assert repairs.latest(store, run_id, node, refusal(0)) == refusal(1)
    assert repairs.latest(store, run_id, node, refusal(1)) == refusal(1)
    assert not repairs.due(refusal(1), 1) and repairs.due(refusal(0), 1)
    retried = dataclasses.replace(node, attempt=node.attempt + 1)
    assert repairs.latest(store, run_id, retried, None) is None  # another attempt's


def test_the_event_keeps_the_answer_redacted_and_says_what_follows(
    run: tuple[Store, TaskSpec, str],
) -> None:
    store, spec, run_id = run
    node = store.node(run_id, 0)
    answer = "here: api_key = 'sk-proj-abcdefghijklmnop1234' and no edit block"
    said = repairs.refused(EditRefused("SEARCH block not found", answer), None, "d")
    repairs.say(store, spec, run_id, node, said, 1)
    (event,) = store.node_events(run_id, 0, "refused")
    assert "abcdefghijklmnop1234" not in str(event.data), event.data
    assert "round 0" in event.message and "a repair round follows" in event.message
    assert event.data["repairable"] and not event.data["unreadable"]
    assert repairs.latest(store, run_id, node, None)["answer"].startswith("here: api_key")
