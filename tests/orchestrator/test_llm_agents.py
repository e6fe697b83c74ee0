"""The roles are the agents (issue 25): a model run's proposer, coder, reviewer and
analyst are separate objects, each a protocol's and nothing more, over one shared
``Models``; the job carries the run's context source and every role of a candidate
reads the same frozen context from it. Built by the real wiring; no model is called."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from revtree.agents.base import Job
from revtree.memory import NodeStatus, Store
from revtree.memory.records import Node
from revtree.orchestrator import create_run
from revtree.orchestrator.contexts import ContextSource
from revtree.orchestrator.llm_agents import (
    AnalystAgent,
    CoderAgent,
    OneCallProposer,
    ProposerAgent,
    ReviewerAgent,
)
from revtree.orchestrator.wiring import Parts, wire
from revtree.tasks import load_task
from tests.orchestrator.test_llm_run import make_task

NOWHERE = "http://127.0.0.1:9/v1"  # never called: the agents are only built


def parts_of(tmp_path: Path, home: Path, store: Store, extra: str = "", **kw: bool) -> Parts:
    task = make_task(tmp_path / "t", extra=extra, **kw)
    spec = load_task(task).with_overrides(agents={"base_url": NOWHERE})
    run = create_run(store, spec, home)
    return wire(store, run.id, home=home)


def job_of(p: Parts, node_id: int = 1, proposal: dict[str, str] | None = None) -> Job:
    root = p.mirror.get(0)
    assert root.commit is not None
    node = Node(p.run_id, node_id, 0, "improve", NodeStatus.PENDING, proposal=proposal)
    return Job(node, root, lambda: p.git.read_files(root.commit or ""), p.agents.context)


def test_each_role_is_its_own_agent_over_one_bundle(
    tmp_path: Path, home: Path, store: Store
) -> None:
    p = parts_of(tmp_path, home, store, extra="[agents.analyst]\nenabled = true", reviewer=True)
    a = p.agents
    (reviewer,) = a.reviewers
    assert isinstance(a.proposer, ProposerAgent) and isinstance(a.coder, CoderAgent)
    assert isinstance(reviewer, ReviewerAgent) and isinstance(a.analyst, AnalystAgent)
    roles = [a.proposer, a.coder, reviewer, a.analyst]
    assert len({id(r) for r in roles}) == 4  # no object stands in for another
    assert len({id(r.models) for r in roles}) == 1  # type: ignore[union-attr]
    assert set(a.coder.models.clients) == {"proposer", "coder", "reviewer", "analyst"}  # type: ignore[attr-defined]
    # no method to fit a protocol: a model proposer learns nothing from finished nodes
    assert not hasattr(a.proposer, "observe") and not hasattr(a.proposer, "rebuild")
    assert len(a.observers) == 1  # the bandits' reward
    assert a.ask is not None and a.spent() is None


def test_the_job_carries_one_frozen_context_per_node_and_hypothesis(
    tmp_path: Path, home: Path, store: Store
) -> None:
    p = parts_of(tmp_path, home, store)
    assert isinstance(p.agents.context, ContextSource)
    job = job_of(p)
    ctx = job.context()
    assert ctx is job_of(p).context()  # another role of the node: the same object
    assert dict(ctx.files) == dict(job.files) and b"SCALE = 1.0" in ctx.files["model.py"]
    assert (ctx.node_id, ctx.parent_id, ctx.operator) == (1, 0, "improve")
    assert ctx.prefix and "model.py" in ctx.prefix
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.memory = "changed"  # type: ignore[misc]
    # the coder's context searches by the hypothesis too: a new one once it is known
    proposed = job_of(p, proposal={"hypothesis": "scale predict by three"})
    assert proposed.context() is not ctx
    assert job_of(p, node_id=2).context() is not ctx
    assert job.context(related=False) is not ctx  # a coder with tools searches itself


def test_one_call_mode_proposes_through_the_coder(tmp_path: Path, home: Path, store: Store) -> None:
    p = parts_of(tmp_path, home, store, extra="[agents.proposer]\nenabled = false")
    a = p.agents
    assert isinstance(a.proposer, OneCallProposer) and a.proposer.coder is a.coder
    assert "proposer" not in a.coder.models.clients  # type: ignore[attr-defined]
    assert a.reviewers == () and a.analyst is None  # disabled roles are no agents


def test_an_offline_run_has_no_context_and_its_proposer_learns(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "m")
    text = (task / "task.toml").read_text().replace('mode = "llm"', 'mode = "mutate"')
    (task / "task.toml").write_text(text)
    run = create_run(store, load_task(task), home)
    q = wire(store, run.id, home=home)
    assert q.agents.context is None and q.agents.label != "LLM"
    assert q.agents.observers == (q.agents.proposer.observe,)  # type: ignore[attr-defined]
    with pytest.raises(LookupError):
        job_of(q).context()
