"""At parallel 1 the first candidate proposes while the baseline is evaluated (issue 24),
and its prompt waits for the baseline's score where it shows it: a draft (a fresh
approach) goes on, an improvement of the baseline waits. Real runs: the openai SDK
against the fake server on 127.0.0.1, real git, SQLite and the local sandbox."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer, FakeReply, FakeRequest
from revtree.memory import NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task
from tests.orchestrator.test_llm_run import Scientist, make_task, role

SLOW_BASELINE = """\
import json, os, time, model
err = sum((model.predict(x) - (3 * x + 2)) ** 2 for x in range(10))
if err == 1330:  # the baseline's code: its evaluation takes a while
    time.sleep(1.5)
os.write(3, json.dumps({"err": err}).encode())
"""


class Timing:
    """The Scientist's answers; for each proposer call, the baseline's status as the
    call arrived, and the prompt."""

    def __init__(self, store: Store) -> None:
        self.store, self.model = store, Scientist()
        self.seen: list[tuple[NodeStatus, str]] = []

    def __call__(self, req: FakeRequest) -> FakeReply | str:
        if role(req) == "proposer":
            (run,) = self.store.list_runs()
            self.seen.append((self.store.node(run.id, 0).status, req.user))
        return self.model(req)


def slow_baseline_run(
    tmp_path: Path, home: Path, store: Store, search: Mapping[str, object]
) -> tuple[str, list[tuple[NodeStatus, str]]]:
    """A completed run of the task whose baseline takes 1.5 s to evaluate: its id, and
    the baseline's status and the prompt as each proposer call arrived."""
    task = make_task(tmp_path / "t", budget=3)
    (task / "ev.py").write_text(SLOW_BASELINE)
    timing = Timing(store)
    with FakeLLMServer(timing) as srv:
        spec = load_task(task).with_overrides(
            agents={"base_url": srv.openai_url}, search=dict(search)
        )
        run = create_run(store, spec, home)
        Orchestrator(store, run.id, home=home).drive()
    assert store.get_run(run.id).status is RunStatus.COMPLETED
    return run.id, timing.seen


@pytest.mark.slow  # a 3-candidate run with a 1.5 s baseline
def test_a_draft_is_proposed_while_the_baseline_is_evaluated(
    tmp_path: Path, home: Path, store: Store
) -> None:
    t0 = time.monotonic()
    run_id, seen = slow_baseline_run(tmp_path, home, store, {"parallel": 1, "num_drafts": 1})
    wall = time.monotonic() - t0
    first_status, first_prompt = seen[0]
    # the baseline was in flight: being evaluated, or (on a loaded machine) about to be
    assert first_status in (NodeStatus.REVIEWED, NodeStatus.EVALUATING), seen
    assert "not known yet" in first_prompt and "score 1330" not in first_prompt
    node1 = store.node(run_id, 1)
    assert node1.operator == "draft" and node1.status is NodeStatus.SUCCEEDED
    assert store.node(run_id, 0).score == 1330.0
    # later candidates propose after their parent's score, one at a time (parallel 1)
    assert all(status is NodeStatus.SUCCEEDED for status, _ in seen[1:]), seen
    assert wall < 60


@pytest.mark.slow  # a 2-candidate run with a 1.5 s baseline
def test_an_improvement_of_the_baseline_waits_for_its_score(
    tmp_path: Path, home: Path, store: Store
) -> None:
    # random: improves a node drawn from the root
    run_id, seen = slow_baseline_run(tmp_path, home, store, {"policy": "random", "parallel": 1})
    first_status, first_prompt = seen[0]
    assert first_status is NodeStatus.SUCCEEDED, seen  # waited for the baseline
    assert "score 1330" in first_prompt and "not known yet" not in first_prompt
    assert store.node(run_id, 1).operator == "improve"
    said = [e.message for e in store.events_since(run_id) if e.node_id == 1]
    assert any("improve from node 0" in m for m in said), said


@pytest.mark.slow  # a 3-candidate run with a 1.5 s baseline
def test_an_explicit_lookahead_of_zero_keeps_the_baseline_alone(
    tmp_path: Path, home: Path, store: Store
) -> None:
    search = {"parallel": 1, "num_drafts": 1, "lookahead": 0}
    _, seen = slow_baseline_run(tmp_path, home, store, search)
    assert seen and all(s is NodeStatus.SUCCEEDED for s, _ in seen), seen


@pytest.mark.slow  # a 4-candidate run with a 4 s baseline
def test_candidates_prepared_ahead_start_once_every_slot_is_held(
    tmp_path: Path, home: Path, store: Store
) -> None:
    """At parallel 2 with 2 prepared ahead, the run starts with the baseline and one
    candidate only: the two prepared ahead of a free slot start once both slots are
    held (the baseline's, then that candidate's), rather than sharing the processor with
    the first one while the second slot stays idle (issue 24). (The first wave also ends
    as a ticket ends: the baseline's takes 4 s, long past node 1's commit.)"""
    task = make_task(tmp_path / "t", budget=5)
    (task / "ev.py").write_text(SLOW_BASELINE.replace("time.sleep(1.5)", "time.sleep(4)"))
    with FakeLLMServer(Scientist()) as srv:
        spec = load_task(task).with_overrides(
            agents={"base_url": srv.openai_url},
            search={"parallel": 2, "lookahead": 2, "num_drafts": 4},
        )
        run = create_run(store, spec, home)
        Orchestrator(store, run.id, home=home).drive()
    assert store.get_run(run.id).status is RunStatus.COMPLETED
    events = store.events_since(run.id, 0, 10_000)
    seq = {(e.kind, e.node_id): e.seq for e in events}
    assert ("commit", 1) in seq and ("select", 2) in seq and ("select", 3) in seq, events
    # node 1 was proposed and coded before any candidate prepared ahead was selected
    assert seq[("commit", 1)] < seq[("select", 2)] and seq[("commit", 1)] < seq[("select", 3)]
    assert len(store.nodes(run.id)) == 5
