"""At parallel 1, where a run's evaluations are quick, the next candidate starts as an
evaluation is launched, not once its process runs (issue 24: at S = 0 the next one's
preparation, not the launch, is what the next evaluation waits for); where they take
long, it still waits for the process (two cores: its proposal would slow the start).
Real runs: the openai SDK against the fake server on 127.0.0.1, real git, SQLite, and
the local sandbox through a backend of the task's own whose processes after the
baseline's are told to have started 0.3 s late, so that the order shows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer
from revtree.memory import RunStatus, Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task
from tests.orchestrator.test_llm_run import Scientist, make_task

LATE = """\
import time

from revtree.sandboxes.local import LocalSandbox

STARTED = []  # when each staged evaluation's process was said to run, in order


class Late(LocalSandbox):
    name = "late"

    def staged(self, archive, started):
        def late():
            if STARTED:  # (the baseline's on time: its duration tells how quick they are)
                time.sleep(0.3)
            STARTED.append(time.time())
            return started()

        return super().staged(archive, late)


def build(context):
    return Late(context.base_dir)
"""
SLOW = """\
import json, os, time, model
err = sum((model.predict(x) - (3 * x + 2)) ** 2 for x in range(10))
time.sleep(0.25)
os.write(3, json.dumps({"err": err}).encode())
"""


@pytest.mark.parametrize("quick", [True, False])
def test_the_next_candidate_starts_at_the_launch_where_evaluations_are_quick(
    tmp_path: Path, home: Path, store: Store, monkeypatch: pytest.MonkeyPatch, quick: bool
) -> None:
    plugin = tmp_path / "plug"
    plugin.mkdir()
    (plugin / "late_box.py").write_text(LATE)
    monkeypatch.syspath_prepend(str(plugin))
    task = make_task(tmp_path / "t", budget=4)
    if not quick:
        (task / "ev.py").write_text(SLOW)
    with FakeLLMServer(Scientist()) as srv:
        spec = load_task(task).with_overrides(
            agents={"base_url": srv.openai_url},
            search={"parallel": 1},
            sandbox={"backend": "late_box:build"},
        )
        run = create_run(store, spec, home)
        Orchestrator(store, run.id, home=home).drive()
    assert store.get_run(run.id).status is RunStatus.COMPLETED
    started = sys.modules["late_box"].STARTED
    nodes = {n.id: n for n in store.nodes(run.id)}
    assert len(started) >= 3 and {1, 2} <= set(nodes), (started, nodes)
    # node 1 is evaluated once the baseline's quick (or slow) evaluation is known
    assert (nodes[2].created_at < started[1]) is quick, (nodes[2].created_at, started)
    # said once per node, whether at the launch or as its process runs
    said = [e.node_id for e in store.events_since(run.id) if "evaluating" in e.message]
    assert sorted(said) == sorted(set(said)) and {0, 1, 2} <= set(said), said
