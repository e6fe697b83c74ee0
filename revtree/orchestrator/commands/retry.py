"""Retry: re-run one finished candidate's pipeline from a chosen step (time travel).

A retry re-does the *same* node (same id, parent and place in the tree) as a new
attempt, for when a step failed for a reason outside the candidate (a sandbox out of
memory, a flaky machine, a model API outage):

- ``evaluate`` keeps the proposal and commit and evaluates again;
- ``code`` keeps the proposal and commits again (a new commit: its message names the
  attempt);
- ``propose`` proposes again, then codes and evaluates.

What is guaranteed:

- the earlier attempt stays in the history: its evaluation rows keep their attempt
  number (new rows carry the new one), its commit stays reachable by
  ``refs/revtree/attempts/<node>/<attempt>``, and the ``retry`` event of the live log
  records its status, score, error, commit and proposal;
- the reset of the node, the attempt number and that event are one SQL transaction;
  the candidate's LangGraph thread is then forked at the checkpoint before the chosen
  step (``update_state`` on that checkpoint), so the thread resumes there, where its
  history holds one (``REVTREE_DURABILITY=async`` or ``sync``: a checkpoint per step);
  by default a thread keeps only the checkpoint written as it exited, and the retry
  starts it over, each step skipping the work the node still holds. A retry that
  is killed leaves an unfinished node that ``revtree resume`` (or another retry of
  it, once it is finished) completes, like any candidate;
- the policy and the knob study learn the new outcome (``policy.update``; policies
  rebuild their indexes from the tree, which holds it);
- ``--set`` changes the run's configuration (stored, with an event) for the retry and
  for the rest of the run; keys that would change what the tree means (the search,
  the knobs, the metric, the editable files) are refused: fork for those.

Not guaranteed: a deterministic proposer (the knob proposer) may propose the same
values again (in the retrying process its study still holds the earlier attempt; the
next session rebuilds it from SQL, which holds only the new one); a node with children
can only be retried from ``evaluate`` (a new commit would orphan its children's
commits); only the node is re-run, not its descendants.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from langgraph.types import Command

from revtree.errors import RevtreeError
from revtree.memory import Event, Node, NodeStatus, RunInfo, RunStatus, Store
from revtree.orchestrator.commands.fork import apply_sets
from revtree.orchestrator.core import Orchestrator
from revtree.orchestrator.pipeline import HANDED_ON, reviewed
from revtree.orchestrator.run import ROOT_TICKET, alive
from revtree.tasks import TaskSpec

RETRY_STEPS = ("propose", "code", "evaluate")
ATTEMPT_REF = "refs/revtree/attempts/{}/{}"
FIXED_KEYS = ("name", "source", "editable", "protected", "exclude", "search", "knobs")
FIXED_PATHS = ("evaluate.metric", "evaluate.direction")
RESET: dict[str, dict[str, Any]] = {
    "evaluate": {
        "score": None,
        "score_std": None,
        "n_evals": 0,
        "error": None,
        "error_kind": None,
        "finished_at": None,
        "lesson": None,
    },
}
# the step whose end a rewind replays: the one before ``step``; for evaluate, the review,
# so that a new attempt waits for approval again where the run asks for it (as a thread
# whose checkpoints were pruned does)
REWIND_AFTER = {"propose": "select", "code": "propose", "evaluate": "review"}
RESET_STATUS = {  # the status a node is reset to, by the step it is retried from
    "propose": NodeStatus.PENDING,
    "code": NodeStatus.PROPOSED,
    "evaluate": NodeStatus.CODED,
}
RESET["code"] = {**RESET["evaluate"], "commit": None, "review": None}
RESET["propose"] = {**RESET["code"], "proposal": None}


def default_step(node: Node) -> str:
    """The earliest step whose work the node lacks; ``evaluate`` if it has it all
    (``code`` for a node the reviewer rejected)."""
    if node.proposal is None:
        return "propose"
    if node.commit is None or node.status is NodeStatus.REJECTED:
        return "code"
    return "evaluate"


def check_retry(run: RunInfo, nodes: dict[int, Node], node_id: int, step: str) -> Node:
    """The node to retry, or a clear error saying why it cannot be retried from ``step``."""
    where = f"node {node_id} of run {run.id}"
    if step not in RETRY_STEPS:
        raise RevtreeError(f"retry of {where}: --from must be one of {', '.join(RETRY_STEPS)}")
    node = nodes.get(node_id)
    if node is None:
        raise RevtreeError(f"run {run.id} has no node {node_id}")
    if not node.status.is_finished():
        raise RevtreeError(
            f"{where} is still {node.status.value}: `revtree resume {run.id}` finishes it; "
            "retry it once it is finished"
        )
    if node.parent_id is None and step != "evaluate":
        raise RevtreeError(f"{where} is the baseline: it can only be retried from evaluate")
    if step != "evaluate" and any(n.parent_id == node_id for n in nodes.values()):
        raise RevtreeError(
            f"{where} has children: a new commit would orphan theirs; retry it from "
            f"evaluate, or `revtree fork {run.id} --node {node.parent_id}`"
        )
    if step == "code" and node.proposal is None:
        raise RevtreeError(f"{where} has no proposal to code: retry it --from propose")
    if step == "evaluate" and node.commit is None:
        raise RevtreeError(f"{where} has no commit to evaluate: retry it --from code")
    if step == "evaluate" and node.status is NodeStatus.REJECTED:
        raise RevtreeError(f"{where} was rejected: retry it --from code")
    return node


def retry_spec(spec: TaskSpec, sets: Iterable[str]) -> TaskSpec:
    """``spec`` with ``--set`` assignments, refusing keys a retry may not change."""
    sets = list(sets)
    for item in sets:
        path = [p for p in item.partition("=")[0].strip().split(".") if p]
        key = ".".join(path[:2])
        if path and (path[0] in FIXED_KEYS or key in FIXED_PATHS):
            raise RevtreeError(
                f"--set {item!r}: a retry keeps the run's {key}; "
                "`revtree fork` starts a run with it changed"
            )
    return apply_sets(spec, sets)


def retry(
    store: Store,
    run_id: str,
    node_id: int,
    step: str | None = None,
    sets: Iterable[str] = (),
    home: Path | None = None,
    on_event: Any = None,
) -> Node:
    """Re-run node ``node_id`` of run ``run_id`` from ``step`` (default: see
    :func:`default_step`) as its next attempt, in this process; returns the node as it
    ends. Refused while a live process drives the run. The run's status is restored
    afterwards (a crashed run is marked failed, to be resumed)."""
    sets = list(sets)
    run = store.get_run(run_id)
    nodes = {n.id: n for n in store.nodes(run.id)}
    if node_id not in nodes:
        raise RevtreeError(f"run {run.id} has no node {node_id}")
    step = step or default_step(nodes[node_id])
    check_retry(run, nodes, node_id, step)
    spec = retry_spec(TaskSpec.stored(run.spec), sets) if sets else None
    store.claim_run(run.id, os.getpid(), socket.gethostname(), alive)
    try:
        if spec is not None:
            _store_sets(store, run.id, spec, sets, node_id)
        orch = Orchestrator(store, run.id, home=home, on_event=on_event)
    except BaseException:
        _release(store, run, None, "")
        raise
    try:
        check_retry(run, orch.nodes, node_id, step)  # again, now that no one else drives it
        node = _run_attempt(orch, node_id, step)
        if run.status is RunStatus.COMPLETED:
            _holdout(orch)
    except BaseException as e:
        _release(store, run, orch, f"retry of node {node_id} failed: {e}")
        raise
    _release(store, run, orch, _summary(node, run.id))
    return node


def _holdout(orch: Orchestrator) -> None:
    """A completed run holds out its best node: the retried node may be the new best."""
    try:
        orch.trust.final_holdout()
    except Exception as e:
        orch.store.add_event(orch.run_id, "error", f"holdout after the retry failed: {e}", None)


def _store_sets(store: Store, run_id: str, spec: TaskSpec, sets: list[str], node_id: int) -> None:
    store.update_run(
        run_id,
        (
            "run",
            f"config changed for the retry of node {node_id}: {', '.join(sets)}",
            {"set": sets},
        ),
        spec=spec.model_dump(mode="json"),
    )


def _run_attempt(orch: Orchestrator, node_id: int, step: str) -> Node:
    reason = orch.parts.budget.reason(starting=False)
    if reason is not None:
        raise RevtreeError(
            f"retry of node {node_id} of run {orch.run_id}: {reason}; raise it with "
            "--set budget.KEY=VALUE"
        )
    orch.parts.sandbox.reap()  # leftovers of a killed session of this run
    ticket = orch.nodes[node_id].thread_id or (ROOT_TICKET if node_id == 0 else None)
    if ticket is None:
        raise RevtreeError(f"node {node_id} of run {orch.run_id} has no pipeline thread")
    _reset(orch, node_id, step)
    rewind(orch, ticket, step)
    outcome = orch.candidate(ticket)  # a failure is recorded on the node as its outcome
    node = orch.nodes[node_id]
    if outcome == "waiting":  # approval is on: the new attempt waits for a decision
        return node
    if not node.status.is_finished():
        raise RevtreeError(
            f"retry of node {node_id} of run {orch.run_id} did not finish ({outcome}); "
            f"`revtree resume {orch.run_id}` continues it"
        )
    return node


def _reset(orch: Orchestrator, node_id: int, step: str) -> Node:
    """Keep the earlier attempt's commit by a ref, then reset the node for the next
    attempt with one SQL write that also logs the ``retry`` event."""
    old = orch.nodes[node_id]
    if old.commit is not None:
        orch.git.set_ref(ATTEMPT_REF.format(node_id, old.attempt), old.commit)
    # the baseline (retried from evaluate only) is reviewed by definition
    status = NodeStatus.REVIEWED if old.parent_id is None else RESET_STATUS[step]
    attempt = old.attempt + 1
    what = f"{old.status.value}" + (
        f" with score {old.score:.6g}"
        if old.score is not None
        else f" ({old.error_kind}): {old.error}"
    )
    msg = (
        f"retry of node {node_id} from {step} (attempt {attempt}); "
        f"attempt {old.attempt} is kept: {what}"
    )
    previous = {
        "attempt": old.attempt,
        "status": old.status.value,
        "score": old.score,
        "error": old.error,
        "error_kind": old.error_kind,
        "commit": old.commit,
        "proposal": old.proposal,
    }
    data = {"from": step, "attempt": attempt, "previous": previous}
    return orch.mirror.set(
        node_id, ("retry", msg, data), status=status, attempt=attempt, **RESET[step]
    )


def rewind(orch: Orchestrator, ticket: str, step: str) -> bool:
    """Fork the candidate's LangGraph thread at its newest checkpoint that was about to
    run ``step``, so the thread continues from there; False if there is none (pruned
    by ``revtree gc``): the thread then starts over, each step skipping the work the
    node already holds."""
    config = {"configurable": {"thread_id": f"{orch.run_id}:{ticket}"}}
    before = REWIND_AFTER[step]
    for snap in orch.graph.get_state_history(config):
        if snap.next == (step,):
            # what the steps before it handed on, cleared (as where the thread starts
            # over: ``pipeline.HANDED_ON``), and the edge ``before`` takes with nothing
            # handed on (each step routes itself, by a ``Command``: the fork names it)
            goto = reviewed(orch.graph.nodes) if step == "evaluate" else step
            orch.graph.update_state(
                snap.config, Command(update=HANDED_ON, goto=goto), as_node=before
            )
            return True
    return False


def _summary(node: Node, run_id: str) -> str:
    if not node.status.is_finished():
        return (
            f"retry of node {node.id} (attempt {node.attempt}): waits for approval; "
            f"`revtree approve {run_id} {node.id}`, then `revtree resume {run_id}`"
        )
    if node.status is NodeStatus.SUCCEEDED:
        return f"retry of node {node.id} (attempt {node.attempt}): scored {node.score:.6g}"
    return (
        f"retry of node {node.id} (attempt {node.attempt}): {node.status.value} "
        f"({node.error_kind}): {node.error}"
    )


def _release(store: Store, run: RunInfo, orch: Orchestrator | None, message: str) -> Event | None:
    """Give the run back with the status it had (a crashed run: failed, resumable)."""
    status, reason = run.status, run.reason
    if status is RunStatus.RUNNING:
        status, reason = RunStatus.FAILED, "its process died; `revtree resume` continues"
    values: dict[str, Any] = {"status": status, "reason": reason, "pid": None}
    if orch is not None:
        values["wall_used"] = orch.parts.budget.wall_used()
        with contextlib.suppress(Exception):
            orch.close()
    event = ("run", f"{message}; run {status.value} again", None) if message else None
    return store.update_run(run.id, event, **values)
