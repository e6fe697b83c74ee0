"""Runs: create, drive, resume. The one place where agents, sandbox, memory meet.

The scheduler keeps ``parallel`` candidates in flight in steady state: a new one
starts as soon as a slot frees, with no generation barrier. Budgets are checked
before a candidate starts; a run that reaches one stops starting work, lets the
candidates in flight finish and ends ``completed`` with the reason recorded. A stop
request (Ctrl-C, SIGTERM) cancels the evaluations in flight without recording them,
so ``resume`` re-runs exactly what was not stored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sqlite3
import statistics
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from revtree.agents import Evaluator, KnobProposer, Proposal, StaticReviewer, read_knobs
from revtree.agents.evaluator import FULL, GUARD, HOLDOUT, Outcome
from revtree.agents.lessons import lesson_for
from revtree.agents.llm import BudgetExhausted
from revtree.agents.mutate import MutationProposer, offline_agents
from revtree.errors import Cancelled, EditError, RevtreeError, SandboxError
from revtree.memory import EvalResult, Event, GitStore, Node, NodeStatus, RunInfo, RunStatus, Store
from revtree.memory.db import normalize_url, revtree_home
from revtree.memory.gitstore import HOLDOUT_REF, PROTECTED_REF, file_mode
from revtree.orchestrator.gpus import GpuPool
from revtree.orchestrator.pipeline import CandidateState, build_pipeline
from revtree.orchestrator.policies import Selection, make_policy
from revtree.orchestrator.team import Team, offline_reason, uses_llm
from revtree.orchestrator.tree import Tree
from revtree.orchestrator.trust import holdout_alarm, infra_cause, rank_alarm
from revtree.sandboxes import BackendChoice, Sandbox, choose_backend, make_sandbox
from revtree.tasks import TaskSpec, code_files, holdout_files, matches
from revtree.tasks.load import source_dir

EventSink = Callable[[Event], None]  # called after commit, in seq order
HEARTBEAT = 2.0
ROOT_TICKET = "root"
FINAL_TRIES = 10  # new bests verified and guarded at the end, at most


class InfraFailure(Exception):
    """A step failed for a reason outside the candidate: its node stays unfinished."""


class BaselineFailed(Exception):
    """The baseline cannot be scored: nothing can be compared, the run stops."""


@dataclasses.dataclass(frozen=True)
class RunPaths:
    home: Path
    run_id: str

    @property
    def dir(self) -> Path:
        return self.home / "runs" / self.run_id

    @property
    def repo(self) -> Path:
        return self.dir / "repo.git"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def work(self) -> Path:
        return self.dir / "work"


def read_source(spec: TaskSpec, paths: list[str]) -> tuple[dict[str, bytes], dict[str, int]]:
    src = source_dir(spec)
    files, modes = {}, {}
    for rel in paths:
        p = src / rel
        modes[rel] = file_mode(p)
        files[rel] = os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
    return files, modes


def create_run(
    store: Store, spec: TaskSpec, home: Path | None = None, run_id: str | None = None
) -> RunInfo:
    """Snapshot the task's code as the root commit and record a new run with its root node."""
    home = home or revtree_home()
    run_id = run_id or f"{spec.name}-{uuid.uuid4().hex[:6]}"
    paths = RunPaths(home, run_id)
    git = GitStore(paths.repo)
    files, modes = read_source(spec, code_files(spec))
    root_sha = git.commit_files(files, f"{spec.name}: baseline (untouched source)", modes)
    git.set_node_ref(0, root_sha)
    if spec.holdout and spec.holdout.files:
        hfiles, hmodes = read_source(spec, holdout_files(spec))
        git.set_ref(HOLDOUT_REF, git.commit_files(hfiles, "holdout files", hmodes))
    git.close()
    root = Node(
        run_id,
        0,
        None,
        "baseline",
        NodeStatus.REVIEWED,
        commit=root_sha,
        thread_id=ROOT_TICKET,
        created_at=time.time(),
        proposal=Proposal(
            "baseline: the untouched source", read_knobs(spec.knobs, files)
        ).to_json(),
    )
    return store.create_run(  # the run and its root node in one transaction
        run_id,
        spec.name,
        spec.search.policy,
        spec.evaluate.direction,
        spec.search.seed,
        spec.model_dump(mode="json"),
        root=(root, ("select", "node 0: baseline (the untouched source)", None)),
    )


def _subtree_alarm(ancestor: int, score: float | None) -> dict[str, Any]:
    return {
        "kind": "subtree",
        "message": f"descends from node {ancestor}, which carries a drift alarm",
        "dev": score,
        "holdout": None,
    }


def _alive(pid: int, host: str | None) -> bool:
    if host != socket.gethostname():
        return True  # cannot tell: assume alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def make_checkpointer(url: str) -> Any:
    """LangGraph's saver on the run database: SQLite's in the same file; on PostgreSQL,
    ``PostgresSaver`` with its tables in their own schema (``langgraph``), apart from
    revtree's; in memory for other backends. ``.conn`` is closed by ``Orchestrator.close``.
    """
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(parsed.database, check_same_thread=False, timeout=60)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        saver = SqliteSaver(conn)
        saver.setup()
        return saver
    if parsed.get_backend_name() == "postgresql":
        return _postgres_checkpointer(parsed)
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()


CHECKPOINT_SCHEMA = "langgraph"
CHECKPOINT_LOCK = 0x6C677270  # advisory lock key ("lgrp") held while creating the tables


def _postgres_checkpointer(parsed: URL) -> Any:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    conninfo = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    conn = psycopg.connect(
        conninfo,
        autocommit=True,  # as PostgresSaver requires (its migrations create indexes CONCURRENTLY)
        prepare_threshold=0,
        row_factory=dict_row,
        options=f"-c search_path={CHECKPOINT_SCHEMA}",
    )
    try:
        # Several runs (processes, machines) may start at once: set up one at a time. Poll
        # for the lock rather than wait in a transaction: the holder's CREATE INDEX
        # CONCURRENTLY waits for every open transaction, a waiting one included (deadlock).
        deadline = time.monotonic() + 300
        while not _try_lock(conn, CHECKPOINT_LOCK):
            if time.monotonic() > deadline:
                raise RevtreeError("timed out waiting to set up LangGraph's PostgreSQL tables")
            time.sleep(0.05)
        try:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {CHECKPOINT_SCHEMA}")
            saver = PostgresSaver(conn)
            saver.setup()
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (CHECKPOINT_LOCK,))
    except BaseException:
        conn.close()
        raise
    return saver


def _try_lock(conn: Any, key: int) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (key,)).fetchone()
    return bool(row and row["ok"])


class Orchestrator:
    """Drives one run until its budget is spent or a stop is requested."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        home: Path | None = None,
        sandbox: Sandbox | None = None,
        on_event: EventSink | None = None,
        parallel: int | None = None,
    ) -> None:
        self.store, self.home = store, home or revtree_home()
        self.run = store.get_run(run_id)
        self.run_id = self.run.id
        self.spec = TaskSpec.model_validate(self.run.spec)
        self.paths = RunPaths(self.home, self.run_id)
        self.parallel = parallel or self.spec.search.parallel
        look = self.spec.search.lookahead
        self.lookahead = (0 if self.parallel == 1 else self.parallel) if look is None else look
        self.slots = threading.Semaphore(self.parallel)
        if on_event is not None:
            store.listeners.append(on_event)
        self.git = GitStore(self.paths.repo)
        gpus = GpuPool() if self.spec.sandbox.gpus else None
        self.choice = (
            BackendChoice(sandbox.name, "given by the caller")
            if sandbox is not None
            else choose_backend(self.spec.sandbox.backend, self.spec.sandbox)
        )
        self.sandbox = sandbox or make_sandbox(
            self.choice.name,
            base_dir=self.paths.work,
            config=self.spec.sandbox,
            task_root=self.spec.root,
            gpu_pool=gpus,
            labels={"revtree.run": self.run_id},
        )
        self.policy = make_policy(self.spec.search)
        self.policy.load_state(self.run.policy_state or {})
        self.proposer, self.coder = offline_agents(self.spec)
        self.reviewer = StaticReviewer(self.spec)
        self.nodes: dict[int, Node] = {n.id: n for n in store.nodes(self.run_id)}
        self.by_ticket = {n.thread_id: n.id for n in self.nodes.values() if n.thread_id}
        self.resumed = {n.id for n in self.nodes.values() if not n.status.is_finished()}
        self.proposer.rebuild(self.nodes.values())
        self.lock = threading.RLock()
        self.policy_lock = threading.Lock()
        self._tree = Tree.of(list(self.nodes.values()), self.spec.maximize)
        self.idle: set[str] = set()  # tickets for which the policy chose nothing
        self.verifying: set[int] = set()
        self._changed: list[int] = []
        self.cancel = threading.Event()
        self.unselected: set[str] = set()
        self.timings: dict[int, dict[str, float]] = {}
        self.sandbox_seconds = store.sandbox_seconds(self.run_id)
        self.fatal: str | None = None  # why the run must stop as failed
        self.infra_streak = 0
        spent = store.evaluations_by_kind(self.run_id, self.spec.evaluate.repeats)
        # evaluations spent on verification and guards, and in all: their shares decide,
        # in counts (not seconds), so a resumed run decides as an uninterrupted one
        self.trust_evals = {"verify": spent.get("verify", 0), GUARD: spent.get(GUARD, 0)}
        self.n_evals = sum(spent.values())
        self.guarded = self._stored_guards()  # node -> the mean of its guard holdout runs
        self._guard_locks: dict[int, threading.Lock] = {}  # one guard run per node at once
        root = self.nodes[0]
        assert root.commit is not None
        if isinstance(self.proposer, KnobProposer):  # improve of the root starts here
            knob_files = sorted({k.file for k in self.spec.knobs})
            self.proposer.baseline = read_knobs(
                self.spec.knobs, self.git.read_files(root.commit, knob_files)
            )
        # protected files: the task's own (a fork with --task), else the root's
        protected_from = self.git.find(PROTECTED_REF) or root.commit
        self.overlay = {
            p: d
            for p, d in self.git.read_files(protected_from).items()
            if matches(p, self.spec.protected)
        }
        # generated protected files (compatibility shims of imported task formats)
        self.overlay.update({p: t.encode() for p, t in self.spec.support_files.items()})
        self.evaluator = Evaluator(self.spec, self.sandbox, self.paths.logs, protected=self.overlay)
        self.team = Team(self) if uses_llm(self.spec) else None
        attach = getattr(self.policy, "attach", None)
        if attach is not None and self.team is not None:
            attach(self.team.ask_policy)
        self.checkpointer = make_checkpointer(store.url)
        self.durability = os.environ.get("REVTREE_DURABILITY", "async")
        self.graph = build_pipeline(self, self.checkpointer)
        self.started = time.monotonic()
        self.best_id = self._best_id()

    # -- state changes (SQL first, then the mirror, then the live log) ------------
    def _set(self, node_id: int, event: tuple[str, str, Any] | None, **values: Any) -> Node:
        self.store.update_node(self.run_id, node_id, event, **values)
        with self.lock:
            if "status" in values:
                values["status"] = NodeStatus(values["status"])
            values.pop("timings", None)
            node = dataclasses.replace(self.nodes[node_id], **values)
            self.nodes[node_id] = node
            self._changed.append(node_id)
        return node

    def _finish(
        self,
        node_id: int,
        status: NodeStatus,
        message: str,
        analysis: str | None = None,
        **values: Any,
    ) -> Node:
        timings = {k: round(v, 4) for k, v in self.timings.pop(node_id, {}).items()}
        done = dataclasses.replace(self.nodes[node_id], status=status, **values)
        parent = self.nodes.get(done.parent_id) if done.parent_id is not None else None
        if status is NodeStatus.SUCCEEDED and parent is not None and parent.alarm is not None:
            values["alarm"] = _subtree_alarm(parent.id, values.get("score"))
        values["lesson"] = lesson_for(done, parent, self.spec.maximize)
        if analysis:
            values["lesson"] += f" | analysis: {analysis}"
        node = self._set(
            node_id,
            (
                "node",
                message,
                {
                    "status": status.value,
                    "score": values.get("score"),
                    "error_kind": values.get("error_kind"),
                },
            ),
            status=status,
            finished_at=time.time(),
            timings=timings,
            **values,
        )
        self.proposer.observe(node)
        with self.lock:
            self.policy.update(node)
            current = self.nodes.get(self.best_id) if self.best_id is not None else None
            new_best = node.status is NodeStatus.SUCCEEDED and (
                current is None
                or node.score_of(self.spec.maximize) > current.score_of(self.spec.maximize)
            )
            if new_best:
                self.best_id = node_id
        if new_best:
            self.store.add_event(
                self.run_id,
                "best",
                f"new best: node {node_id} scores {node.score:.6g}",
                node_id,
                {"score": node.score},
            )
        return node

    def _best_id(self) -> int | None:
        best = self.snapshot().best()
        return best.id if best else None

    def snapshot(self) -> Tree:
        """The tree as the policy sees it: grown from the last snapshot by the nodes that
        changed since (no O(n) rebuild per select)."""
        with self.lock:
            changed = [self.nodes[i] for i in dict.fromkeys(self._changed)]
            self._changed.clear()
            self._tree = self._tree.extend(changed, self.budget_fraction())
            return self._tree

    # -- the pipeline steps ---------------------------------------------------------
    def candidate_done(self, state: CandidateState) -> bool:
        node_id = state.get("node_id")
        return node_id is None or self.nodes[node_id].status.is_finished()

    def run_step(self, step: str, state: CandidateState) -> dict[str, Any]:
        t0 = time.monotonic()
        node_id = state.get("node_id")
        if self.cancel.is_set():  # stopping: no new model calls or evaluations
            raise Cancelled("the run is stopping")
        try:
            return dict(getattr(self, f"_step_{step}")(state) or {})
        except (Cancelled, BudgetExhausted, InfraFailure, BaselineFailed):
            raise
        except Exception as e:  # the candidate boundary: record, and the run goes on
            node_id = state.get("node_id", node_id)
            if (cause := infra_cause(e)) is not None:  # not the candidate's: left unfinished
                raise InfraFailure(cause) from e
            if node_id == 0:
                detail = "".join(traceback.format_exception_only(e)).strip()
                raise BaselineFailed(f"{step}: {detail}") from e
            if node_id is None or self.nodes[node_id].status.is_finished():
                raise
            kind = (
                "code"
                if isinstance(e, EditError)
                else "sandbox"
                if isinstance(e, SandboxError)
                else step
                if isinstance(e, RevtreeError)
                else "internal"
            )
            detail = "".join(traceback.format_exception_only(e)).strip()
            self._finish(
                node_id,
                NodeStatus.FAILED,
                f"node {node_id} failed in {step}: {detail}",
                error=f"{step}: {detail}",
                error_kind=kind,
            )
            return {}
        finally:
            if node_id is not None:
                spent = self.timings.setdefault(node_id, {})
                spent[step] = spent.get(step, 0.0) + time.monotonic() - t0

    def _step_select(self, state: CandidateState) -> dict[str, Any]:
        ticket = state["ticket"]
        slow = bool(getattr(self.policy, "slow", False))
        # A fast policy selects and its node is created in one critical section; a slow
        # one (a model call) selects outside the tree lock, one select at a time.
        with contextlib.nullcontext() if slow else self.lock:
            with self.lock:
                if ticket in self.by_ticket:
                    self.unselected.discard(ticket)
                    return {"node_id": self.by_ticket[ticket]}
                snapshot = self.snapshot()
            with self.policy_lock if slow else contextlib.nullcontext():
                before = self.policy.state()
                choice = self.policy.select(snapshot)
                note = getattr(self.policy, "note", None)
            with self.lock:
                if choice is None or (
                    choice.operator == "verify" and choice.parent_id in self.verifying
                ):
                    self.unselected.discard(ticket)
                    self.idle.add(ticket)
                    return {"node_id": None}
                if choice.operator == "verify":
                    self.unselected.discard(ticket)
                    self.verifying.add(choice.parent_id)
                    self.store.update_run(self.run_id, policy_state=self.policy.state())
                else:
                    node = self._add_selected(ticket, choice, before, note)
                    return {"node_id": node.id}
        self._verify_for_policy(choice.parent_id)
        return {"node_id": None}

    def _add_selected(
        self, ticket: str, choice: Selection, before: dict[str, Any], note: str | None
    ) -> Node:
        parent = self.nodes[choice.parent_id]
        node = Node(
            self.run_id,
            max(self.nodes) + 1,
            parent.id,
            choice.operator,
            NodeStatus.PENDING,
            depth=parent.depth + 1,
            thread_id=ticket,
            created_at=time.time(),
            extra_parents=choice.extra_parents,
        )
        score = parent.score_of(self.spec.maximize)
        msg = f"node {node.id}: {choice.operator} from node {parent.id} (score {score})"
        if note:
            msg += f"; {note}"
        try:
            self.store.add_node(
                node,
                ("select", msg, {"parent": parent.id, "operator": choice.operator, "note": note}),
                policy_state=self.policy.state(),
            )
        except BaseException:
            self.policy.load_state(before)
            raise
        self.nodes[node.id] = node
        self._changed.append(node.id)
        self.by_ticket[ticket] = node.id
        self.unselected.discard(ticket)
        return node

    def _step_propose(self, state: CandidateState) -> None:
        node = self.nodes[state["node_id"] or 0]
        if node.proposal is not None:
            return
        assert node.parent_id is not None
        if self.team is not None:
            proposal = self.team.propose(node)
        else:
            proposal = self.proposer.propose(node.id, self.nodes[node.parent_id], node.operator)
        self._set(
            node.id,
            ("propose", f"node {node.id}: {proposal.hypothesis}", proposal.to_json()),
            proposal=proposal.to_json(),
            status=NodeStatus.PROPOSED,
        )

    def _step_code(self, state: CandidateState) -> None:
        node = self.nodes[state["node_id"] or 0]
        if node.commit is not None:
            return
        assert node.parent_id is not None and node.proposal is not None
        parent = self.nodes[node.parent_id]
        assert parent.commit is not None
        proposal = Proposal(**node.proposal)
        if self.team is not None:
            changes = self.team.code(node, proposal)
        else:
            changes = self.coder.code(proposal, self.git.read_files(parent.commit))
        message = (
            f"node {node.id}: {node.operator} from node {parent.id}\n\n{proposal.hypothesis}\n"
        )
        if node.attempt > 1:  # a retry: a distinct commit, the earlier one stays reachable
            message += f"\n(attempt {node.attempt}, by `revtree retry`)\n"
        sha = self.git.commit(parent.commit, changes, message, when=node.created_at)
        if not self.git.changed_paths(parent.commit, sha):
            raise EditError(
                f"the edit changes nothing: the code is identical to node {parent.id}'s "
                "(not evaluated: its score could only differ by the evaluator's noise)"
            )
        self.git.set_node_ref(node.id, sha)
        self._set(
            node.id,
            (
                "commit",
                f"node {node.id}: commit {sha[:10]} changes {sorted(changes) or 'nothing'}",
                {"commit": sha},
            ),
            commit=sha,
            status=NodeStatus.CODED,
        )

    def _step_review(self, state: CandidateState) -> None:
        node = self.nodes[state["node_id"] or 0]
        if node.status is not NodeStatus.CODED:
            return
        assert node.parent_id is not None and node.commit is not None
        parent_commit = self.nodes[node.parent_id].commit
        assert parent_commit is not None
        diff = self.git.diff(parent_commit, node.commit)
        verdict = self.reviewer.review(self.git.changed_paths(parent_commit, node.commit), diff)
        if verdict.accepted and self.team is not None and node.proposal is not None:
            llm_verdict = self.team.review(node, Proposal(**node.proposal), diff)
            if llm_verdict is not None:
                verdict = llm_verdict
                if verdict.accepted:
                    self._set(
                        node.id, None, review={"accepted": True, "reasons": list(verdict.reasons)}
                    )
        if not verdict.accepted:
            reason = "; ".join(verdict.reasons)
            self._finish(
                node.id,
                NodeStatus.REJECTED,
                f"node {node.id} rejected: {reason}",
                error=f"review: {reason}",
                error_kind="rejected",
                review={"accepted": False, "reasons": list(verdict.reasons)},
            )
            return
        # Accepted: nothing to store. The evaluate step records it with its own status
        # change, and a replay after a crash reviews again (the check is pure).

    def _step_evaluate(self, state: CandidateState) -> dict[str, Any]:
        node = self.nodes[state["node_id"] or 0]
        assert node.commit is not None
        done = {}
        if node.id in self.resumed:  # only a resumed node can have stored evaluations
            done = {
                (e.stage, e.repeat): e
                for e in self.store.evaluations(self.run_id, node.id)
                if e.stage not in (HOLDOUT, GUARD) and e.attempt == node.attempt
            }
            if node.id == 0 and any(not e.ok for e in done.values()):
                node = self._set(
                    0,
                    (
                        "retry",
                        f"baseline: its last evaluation failed; evaluating it again "
                        f"(attempt {node.attempt + 1})",
                        None,
                    ),
                    attempt=node.attempt + 1,
                )
                done = {}
        assert node.commit is not None
        archive = self.git.archive(node.commit, self.overlay)
        self._acquire_slot()
        try:
            if node.status is not NodeStatus.EVALUATING:
                what = "baseline" if node.id == 0 else "review passed"
                msg = f"node {node.id}: {what}, evaluating"
                node = self._set(node.id, ("evaluate", msg, None), status=NodeStatus.EVALUATING)
            outcome = self.evaluator.evaluate(
                node.id,
                archive,
                done,
                lambda r: self._record_eval(r),
                self.cancel,
                {"revtree.run": self.run_id, "revtree.node": str(node.id)},
            )
        finally:
            self.slots.release()
        if node.id == 0 and not outcome.ok:
            raise BaselineFailed(outcome.error or "no score")
        return {"outcome": dataclasses.asdict(outcome)}

    def _acquire_slot(self) -> None:
        """Wait for a free evaluation slot: candidates prepared ahead queue here. The
        budget is checked again once the slot is had: preparing may have taken long."""
        while not self.slots.acquire(timeout=0.1):
            if self.cancel.is_set():
                raise Cancelled("the run is stopping")
        reason = self.budget_reason(starting=False)
        if reason is not None:
            self.slots.release()
            raise BudgetExhausted(reason)

    def _record_eval(self, result: EvalResult) -> None:
        result = dataclasses.replace(result, attempt=self.nodes[result.node_id].attempt)
        what = (
            f"{result.score:.6g}"
            if result.ok and result.score is not None
            else (f"failed ({result.error_kind}): {result.error}")
        )
        where = f"node {result.node_id} {result.stage}#{result.repeat}"
        msg = f"{where}: {what} in {result.duration:.2f}s"
        self.store.record_evaluation(
            self.run_id,
            result,
            (
                "eval",
                msg,
                {
                    "stage": result.stage,
                    "repeat": result.repeat,
                    "score": result.score,
                    "ok": result.ok,
                    "duration": result.duration,
                },
            ),
        )
        with self.lock:
            self.sandbox_seconds += result.duration
            self.n_evals += 1

    def _step_record(self, state: CandidateState) -> None:
        node = self.nodes[state["node_id"] or 0]
        if node.status.is_finished():  # a replay: finish the checks a kill interrupted
            if node.status is NodeStatus.SUCCEEDED and self.best_id == node.id:
                self.trust_best(node.id)
            return
        o = Outcome(**(state.get("outcome") or {}))
        if o.ok:
            assert o.score is not None
            gain = self._gain(node, o.score)
            msg = f"node {node.id} scored {o.score:.6g}{gain}"
            self._finish(
                node.id,
                NodeStatus.SUCCEEDED,
                msg,
                score=o.score,
                score_std=o.score_std,
                n_evals=o.n_evals,
            )
            if self.best_id == node.id:
                self.trust_best(node.id)
        else:
            self._finish(
                node.id,
                NodeStatus.FAILED,
                f"node {node.id} failed: {o.error}",
                analysis=self._analyse(node) if o.error_kind != "gated" else None,
                error=o.error,
                error_kind=o.error_kind,
                n_evals=o.n_evals,
            )

    def _analyse(self, node: Node) -> str | None:
        """The analyst's reading of a failed evaluation; its own failure is only logged."""
        if self.team is None:
            return None
        try:
            return self.team.analyse(node)
        except Exception as e:  # the analysis is optional; the node's own reason stays
            self.store.add_event(
                self.run_id, "error", f"node {node.id}: analysis failed: {e}", node.id
            )
            return None

    def _gain(self, node: Node, score: float) -> str:
        root = self.nodes[0]
        if node.id == 0 or root.score is None:
            return " (baseline)" if node.id == 0 else ""
        delta = score - root.score
        pct = f" ({delta / abs(root.score):+.1%})" if root.score else ""
        return f", {delta:+.6g} vs baseline{pct}"

    # -- budgets ----------------------------------------------------------------------
    def wall_used(self) -> float:
        return self.run.wall_used + time.monotonic() - self.started

    def budget_reason(self, starting: bool = True) -> str | None:
        """Why no new work may start, if a budget is spent. ``starting=False`` checks an
        evaluation of a node that already exists (the node count does not apply)."""
        if self.team is not None and (spent := self.team.meter.exhausted()) is not None:
            return spent
        b = self.spec.budget
        if (
            starting
            and b.max_nodes is not None
            and len(self.nodes) + len(self.unselected) >= b.max_nodes
        ):
            return f"budget: max_nodes={b.max_nodes} reached"
        if b.max_wall is not None and self.wall_used() >= b.max_wall:
            return f"budget: max_wall={b.max_wall:g}s reached"
        if b.max_sandbox_seconds is not None and self.sandbox_seconds >= b.max_sandbox_seconds:
            return f"budget: max_sandbox_seconds={b.max_sandbox_seconds:g} reached"
        return None

    def budget_fraction(self) -> float:
        b, used = self.spec.budget, [0.0]
        if b.max_nodes:
            used.append(len(self.nodes) / b.max_nodes)
        if b.max_wall:
            used.append(self.wall_used() / b.max_wall)
        if b.max_sandbox_seconds:
            used.append(self.sandbox_seconds / b.max_sandbox_seconds)
        return min(1.0, max(used))

    # -- the scheduler ----------------------------------------------------------------
    def _candidate(self, ticket: str) -> str:
        config = {"configurable": {"thread_id": f"{self.run_id}:{ticket}"}}
        try:
            if self.graph.get_state(config).next:
                self.graph.invoke(None, config, durability=self.durability)
            else:
                self.graph.invoke({"ticket": ticket}, config, durability=self.durability)
            with self.lock:
                self.infra_streak = 0
            return "done"
        except Cancelled:
            return "cancelled"
        except BudgetExhausted:
            return "budget"  # the node stays unfinished: a resume with more budget goes on
        except BaselineFailed as e:
            self._stop_failed(f"the baseline (node 0) cannot be scored: {e}")
            return "fatal"
        except InfraFailure as e:
            if self.by_ticket.get(ticket) == 0:  # no baseline, nothing to compare: stop now
                self._stop_failed(f"the baseline (node 0) could not be evaluated: {e}")
                return "fatal"
            self._infra_failure(ticket, str(e))
            return "infra"
        except Exception as e:
            try:
                self._candidate_failed(ticket, e)
            except Exception:  # the store itself is failing: stop the run, loudly
                self.cancel.set()
                raise
            return "error"

    def _infra_failure(self, ticket: str, cause: str) -> None:
        """Count a failure outside the candidate (its node stays unfinished, for resume);
        too many in a row stop the run."""
        node_id = self.by_ticket.get(ticket)
        with self.lock:
            self.infra_streak += 1
            streak = self.infra_streak
        with contextlib.suppress(Exception):  # the store may be what failed
            self.store.add_event(
                self.run_id,
                "infra",
                f"infrastructure failure (node {node_id} stays unfinished, not counted "
                f"against it): {cause}",
                node_id,
                {"cause": cause, "streak": streak},
            )
        if streak >= self.spec.trust.infra_failures:
            self._stop_failed(f"{streak} infrastructure failures in a row; the last: {cause}")

    def _stop_failed(self, reason: str) -> None:
        """Stop the run as failed (the first reason wins): no new work, and the work in
        flight is cancelled unrecorded, so ``resume`` redoes it once the cause is fixed."""
        with self.lock:
            if self.fatal is None:
                self.fatal = reason
        self.cancel.set()

    def _candidate_failed(self, ticket: str, e: Exception) -> None:
        node_id = self.by_ticket.get(ticket)
        detail = "".join(traceback.format_exception_only(e)).strip()
        self.store.add_event(
            self.run_id,
            "error",
            f"candidate {ticket[:8]} (node {node_id}): {detail}",
            node_id,
            {"traceback": traceback.format_exc()[-4000:]},
        )
        if node_id is not None and not self.nodes[node_id].status.is_finished():
            self._finish(
                node_id,
                NodeStatus.FAILED,
                f"node {node_id} failed: {detail}",
                error=detail,
                error_kind="internal",
            )

    def drive(self, stop: threading.Event | None = None) -> RunInfo:
        """Run until the budget is spent, the search is exhausted or ``stop`` is set."""
        stop = stop or threading.Event()
        self.run = self.store.claim_run(self.run_id, os.getpid(), socket.gethostname(), _alive)
        self.sandbox.reap()  # leftovers of a killed session of this run
        self.started = time.monotonic()
        resume = sorted(
            (n for n in self.nodes.values() if not n.status.is_finished()), key=lambda n: n.id
        )
        verb = "resumed" if len(self.nodes) > 1 or (resume and resume[0].id != 0) else "started"
        self.store.add_event(
            self.run_id,
            "run",
            f"run {verb}: policy {self.policy.name}, agents {self._agents_label()}, "
            f"parallel {self.parallel} "
            f"(+{self.lookahead} prepared ahead), "
            f"sandbox {self.sandbox.name} ({self.choice.reason}), "
            f"{len(resume)} candidate(s) to resume",
            None,
        )
        if verb == "started":
            self._start_warnings()
        try:
            reason = self._schedule([n.thread_id or "" for n in resume], stop)
        except BaseException as e:  # the orchestrator itself failed: say so, resumable
            self.cancel.set()
            detail = "".join(traceback.format_exception_only(e)).strip()
            with contextlib.suppress(Exception):
                self.store.update_run(
                    self.run_id,
                    ("run", f"run failed: {detail}", None),
                    status=RunStatus.FAILED,
                    reason=detail,
                    pid=None,
                    wall_used=self.wall_used(),
                )
            self.close()
            raise
        return self._close(reason, stop.is_set(), stop)

    def _agents_label(self) -> str:
        if self.team is not None:
            return "LLM"
        return (
            "offline code mutations"
            if isinstance(self.proposer, MutationProposer)
            else ("offline Optuna knobs")
        )

    def _start_warnings(self) -> None:
        """Said once, when a run starts: what its sandbox and its scoring channel do not
        protect against."""
        if self.choice.warning:
            self.store.add_event(self.run_id, "warning", self.choice.warning, None)
        if self.team is None and not self.spec.knobs and self.spec.agents.mode == "knobs":
            self.store.add_event(
                self.run_id,
                "warning",
                "agents: mode 'knobs' but the task declares no [[knobs]]: every candidate "
                "would be the unchanged code, refused unevaluated; declare knobs, or use "
                "mode 'mutate' or a model",
                None,
            )
        if (why := offline_reason(self.spec)) is not None:
            self.store.add_event(
                self.run_id,
                "warning",
                f"agents: {why}; the offline agents drive this run (set the key, or "
                '`--model`/`[agents] mode = "llm"` to insist)',
                None,
            )
        h = self.spec.holdout
        if h is not None and h.grade is None and not self.spec.evaluate.forgeable:
            self.store.add_event(
                self.run_id,
                "warning",
                "the holdout has no [holdout.grade]: it reads its score from the candidate's "
                "own run, so a candidate can forge its guard and final holdout (and so dodge "
                "the drift alarm); declare [holdout.grade] as for [evaluate.grade]",
                None,
            )
        if self.spec.evaluate.forgeable:
            self.store.add_event(
                self.run_id,
                "warning",
                "single-step evaluator: the evaluator runs in the same sandbox as the "
                "candidate's code, so a candidate can forge its score (an atexit hook, a write "
                "to the metrics channel, patching the evaluator in memory, an early exit); "
                "declare [evaluate.grade] to score its outputs in a fresh sandbox that never "
                "holds its code (README: the grade step)",
                None,
            )

    def _schedule(self, resume: list[str], stop: threading.Event) -> str | None:
        in_flight: dict[Future[str], str] = {}
        starved, reason, last_beat = False, None, time.monotonic()
        width = self.parallel + self.lookahead
        with ThreadPoolExecutor(width, thread_name_prefix="candidate") as pool:
            while not stop.is_set() and self.fatal is None:
                while len(in_flight) < width:
                    if resume:
                        ticket = resume.pop(0)
                    elif starved or (reason := self.budget_reason()) is not None:
                        break
                    else:
                        ticket = uuid.uuid4().hex
                        with self.lock:
                            self.unselected.add(ticket)
                    in_flight[pool.submit(self._candidate, ticket)] = ticket
                if not in_flight:
                    reason = reason or "search exhausted: the policy proposes nothing more"
                    break
                finished, _ = wait(in_flight, timeout=0.5, return_when=FIRST_COMPLETED)
                tickets = [in_flight.pop(fut) for fut in finished]
                for fut in finished:
                    fut.result()
                starved = all(t in self.idle for t in tickets)
                with self.lock:
                    self.unselected.difference_update(tickets)
                if time.monotonic() - last_beat > HEARTBEAT:
                    last_beat = time.monotonic()
                    self.store.update_run(
                        self.run_id, heartbeat_at=time.time(), wall_used=self.wall_used()
                    )
            if stop.is_set() or self.fatal is not None:
                self.cancel.set()
                wait(in_flight)
        return reason

    def _finalize_unless(self, stop: threading.Event | None) -> None:
        """``_finalize``, cancelled (``Cancelled``) if ``stop`` is set meanwhile."""
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                if stop is not None and stop.wait(0.1):
                    self.cancel.set()
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            self._finalize()
        finally:
            done.set()
            watcher.join()

    def _close(
        self, reason: str | None, stopped: bool, stop: threading.Event | None = None
    ) -> RunInfo:
        if self.fatal is not None:
            status, reason = RunStatus.FAILED, f"{self.fatal}; fix it, then `revtree resume`"
        elif stopped:
            status, reason = RunStatus.STOPPED, "stopped by the user; `revtree resume` continues"
        else:
            status = RunStatus.COMPLETED
            try:
                self._finalize_unless(stop)
            except Cancelled:
                status, reason = (
                    RunStatus.STOPPED,
                    "stopped by the user during the final checks; `revtree resume` runs them",
                )
            except Exception as e:  # the best is unchecked: never report it as done
                detail = infra_cause(e) or "".join(traceback.format_exception_only(e)).strip()
                status = RunStatus.FAILED
                reason = f"the final checks of the best failed: {detail}; `revtree resume` "
                reason += "runs them again"
        best = self.best_id
        msg = f"run {status.value}: {reason}" + (f"; best node {best}" if best is not None else "")
        try:
            self.store.update_run(
                self.run_id,
                ("run", msg, {"status": status.value}),
                status=status,
                reason=reason,
                wall_used=self.wall_used(),
                pid=None,
            )
        except Exception:  # the store itself failed (a full disk): say so all the same
            if self.fatal is None:
                raise
            self.close()
            return dataclasses.replace(
                self.store.get_run(self.run_id), status=status, reason=reason
            )
        self.close()
        return self.store.get_run(self.run_id)

    def _finalize(self) -> None:
        """Before a best is reported: the best (each new one, up to ``FINAL_TRIES``) is
        verified and guarded whatever the budget shares, the baseline verified, and the
        final holdout run on the node that is recommended."""
        for _ in range(FINAL_TRIES):
            best = self.best_id
            if best is None:
                break
            self.trust_best(best, final=True)
            if self.best_id == best:
                break
        if self.spec.trust.verify_repeats > 1 and self.nodes[0].status is NodeStatus.SUCCEEDED:
            self.verify(0, self.spec.trust.verify_repeats)
        self._final_holdout()

    # -- trust: verification and the holdout guard (see orchestrator.trust) ----------
    def _stored_guards(self) -> dict[int, float]:
        """The guard score of each guarded node (its current attempt), from SQL: only the
        guard rows are read, as a resume at 10k nodes must start fast."""
        runs: dict[int, list[float]] = {}
        for e in self.store.evaluations(self.run_id, stage=GUARD):
            node = self.nodes.get(e.node_id)
            if e.score is None or not e.ok or node is None:
                continue
            if e.attempt == node.attempt:
                runs.setdefault(e.node_id, []).append(e.score)
        return {i: statistics.fmean(v) for i, v in runs.items()}

    def _share_ok(self, kind: str, share: float, n_new: int) -> bool:
        """Whether ``n_new`` more ``kind`` evaluations stay within ``share`` of the run's
        evaluations (counted, not timed: the same decision on every replay)."""
        with self.lock:
            return self.trust_evals[kind] + n_new <= share * (self.n_evals + n_new)

    def trust_best(self, node_id: int, final: bool = False) -> None:
        """A new best: verified (repeats) and guarded (holdout), each within its budget
        share during the run, and regardless of it when ``final``; the baseline's guard
        always runs (the reference of every drift alarm)."""
        t = self.spec.trust
        always = final or node_id == 0
        if t.verify_repeats > 1 and (
            final or self._share_ok("verify", t.verify_share, t.verify_repeats - 1)
        ):
            self.verify(node_id, t.verify_repeats, slot=not final)
            if self.best_id != node_id and not final:
                return  # verification moved the best elsewhere
        if self.spec.holdout is None or not t.guard:
            return
        if node_id != 0 and 0 not in self.guarded:
            self._guard(0, slot=not final)
        first = not any(i != 0 for i in self.guarded)  # the first best is always guarded
        if self.nodes[node_id].alarm is None and (
            always or first or self._share_ok(GUARD, t.guard_share, 1)
        ):
            self._guard(node_id, slot=not final)

    def _guard(self, node_id: int, slot: bool) -> None:
        """Run (or reuse) the guard holdout of a node, then check it for a drift alarm.
        Candidates that need the same node's guard (the baseline's) wait for one run.
        The baseline's guard is tried twice (it is every alarm's reference); a node
        whose guard fails where the baseline's succeeds is alarmed (``holdout-failed``:
        hard-coded answers often crash on inputs they have not seen)."""
        failed = self._guard_repeat(node_id, 0, slot)
        if node_id == 0 and failed is not None:
            failed = self._guard_repeat(0, 1, slot)
            if failed is not None and 0 not in self.guarded:
                self.store.add_event(
                    self.run_id,
                    "warning",
                    f"drift alarms are off for this run: the baseline's guard holdout fails "
                    f"({failed})",
                    0,
                )
        if node_id in self.guarded:
            self._check_alarm(node_id, slot)
        elif node_id != 0 and failed is not None and 0 in self.guarded:
            node = self.nodes[node_id]
            if node.alarm is None and node.score is not None:
                self._raise_alarm(
                    node_id,
                    {
                        "kind": "holdout-failed",
                        "message": f"its guard holdout fails where the baseline's succeeds "
                        f"({failed})",
                        "dev": node.score,
                        "holdout": None,
                    },
                )

    def _guard_repeat(self, node_id: int, repeat: int, slot: bool) -> str | None:
        """Guard run ``repeat`` of a node (stored once, reused on replay); the node's
        guard score is the mean of its runs. One run per node at once. Returns the
        run's error, if it failed."""
        with self.lock:
            once = self._guard_locks.setdefault(node_id, threading.Lock())
        with once:
            node = self.nodes[node_id]
            runs = {
                e.repeat: e
                for e in self.store.evaluations(self.run_id, node_id)
                if e.stage == GUARD and e.attempt == node.attempt
            }
            if repeat not in runs:
                if slot:
                    self._acquire_slot()
                try:
                    result = self.holdout(node_id, split=GUARD, repeat=repeat)
                finally:
                    if slot:
                        self.slots.release()
                if result is None:
                    return None
                runs[repeat] = result
                with self.lock:
                    self.trust_evals[GUARD] += node_id != 0  # the reference is not counted
                    self.n_evals += 1
                    self.sandbox_seconds += result.duration
            scores = [e.score for e in runs.values() if e.ok and e.score is not None]
            if scores:
                with self.lock:
                    self.guarded[node_id] = statistics.fmean(scores)
            run = runs[repeat]
            return None if run.ok else (run.error or "no score")

    def _check_alarm(self, node_id: int, slot: bool = False) -> None:
        node, root = self.nodes[node_id], self.nodes[0]
        t, h = self.spec.trust, self.guarded.get(node_id)
        base_h = self.guarded.get(0)
        if node_id == 0 or h is None or base_h is None or node.score is None:
            return
        if root.score is None or node.alarm is not None:
            return
        kind, msg = (
            "holdout-worse",
            holdout_alarm(node.score, h, root.score, base_h, self.spec.maximize, t.tolerance),
        )
        if msg is not None:  # confirm on a second guard run of both before alarming
            self._guard_repeat(0, 1, slot)
            self._guard_repeat(node_id, 1, slot)
            h, base_h = self.guarded[node_id], self.guarded[0]
            msg = holdout_alarm(node.score, h, root.score, base_h, self.spec.maximize, t.tolerance)
        if msg is None:
            with self.lock:
                dev = {
                    i: (self.nodes[i].score or 0.0, s)
                    for i, s in self.guarded.items()
                    if self.nodes[i].score is not None and self.nodes[i].alarm is None
                }
            kind, msg = "rank", rank_alarm(node_id, dev, self.spec.maximize, t.min_rank_agreement)
        if msg is not None:
            self._raise_alarm(
                node_id, {"kind": kind, "message": msg, "dev": node.score, "holdout": h}
            )

    def _raise_alarm(self, node_id: int, alarm: dict[str, Any]) -> None:
        """Mark the node and its finished subtree alarmed; the best moves elsewhere."""
        node = self._set(
            node_id,
            ("alarm", f"drift alarm on node {node_id}: {alarm['message']}", alarm),
            alarm=alarm,
        )
        marked = [node]
        todo = [c.id for c in self.snapshot().children(node_id)]
        while todo:
            child = self.nodes[todo.pop()]
            todo += [c.id for c in self.snapshot().children(child.id)]
            if child.status is NodeStatus.SUCCEEDED and child.alarm is None:
                sub = _subtree_alarm(node_id, child.score)
                marked.append(
                    self._set(
                        child.id, ("alarm", f"node {child.id}: {sub['message']}", sub), alarm=sub
                    )
                )
        with self.lock:
            for n in marked:
                self.policy.update(n)
            before, self.best_id = self.best_id, self._best_id()
        if self.best_id is not None and self.best_id != before:
            top = self.nodes[self.best_id]
            self.store.add_event(
                self.run_id,
                "best",
                f"new best: node {top.id} scores {top.score:.6g} (node {node_id} carries a "
                "drift alarm)",
                top.id,
                {"score": top.score},
            )

    def _final_holdout(self) -> None:
        if self.spec.holdout is None or self.best_id is None:
            return
        attempt = self.nodes[self.best_id].attempt
        done = {
            (e.node_id, e.stage)
            for e in self.store.evaluations(self.run_id, self.best_id)
            if e.attempt == attempt
        }
        if (self.best_id, HOLDOUT) not in done:
            self.holdout(self.best_id)

    def _verify_for_policy(self, node_id: int) -> None:
        """The policy asked for more repeats of a promising node before exploiting it."""
        try:
            repeats = int(getattr(self.spec.search, "verify_repeats", 3))
            node = self.verify(node_id, repeats, slot=True)
            with self.lock:
                self.policy.update(node)
        finally:
            with self.lock:
                self.verifying.discard(node_id)

    def verify(self, node_id: int, repeats: int, slot: bool = False) -> Node:
        """Run the node's full stage until it has ``repeats`` repeats, then store their mean
        and spread as its score (idempotent by repeat, like every evaluation)."""
        node = self.nodes[node_id]
        assert node.commit is not None
        ev = self.spec.evaluate
        done = {
            e.repeat: e
            for e in self.store.evaluations(self.run_id, node_id)
            if e.stage == FULL and e.attempt == node.attempt
        }
        if all(r in done for r in range(repeats)) and node.n_evals >= len(done):
            return node  # verified already: nothing new to say
        if not done and node.n_evals > 0:
            return node  # its score is a cascade stage's ("keep"): no full stage to repeat
        archive = self.git.archive(node.commit, self.overlay)
        for r in range(repeats):
            if r in done:
                continue
            if slot:
                self._acquire_slot()
            try:
                done[r] = self.evaluator.run_one(
                    node_id, archive, FULL, r, ev.command, ev.metric, ev.timeout, self.cancel
                )
            finally:
                if slot:
                    self.slots.release()
            self._record_eval(done[r])
            with self.lock:
                self.trust_evals["verify"] += 1
        scores = [e.score for e in done.values() if e.ok and e.score is not None]
        if not scores or node.status is not NodeStatus.SUCCEEDED:
            return self.nodes[node_id]
        mean = scores[0] if len(set(scores)) == 1 else statistics.fmean(scores)
        std = statistics.stdev(scores) if len(scores) > 1 else None
        spread = f" ± {std:.3g}" if std is not None else ""
        node = self._set(
            node_id,
            (
                "verify",
                f"node {node_id} over {len(scores)} repeats: {mean:.6g}{spread}",
                {"score": mean, "std": std},
            ),
            score=mean,
            score_std=std,
            n_evals=len(done),
        )
        with self.lock:
            best, self.best_id = self.best_id, self._best_id()
        if self.best_id is not None and self.best_id != best:
            top = self.nodes[self.best_id]
            self.store.add_event(
                self.run_id,
                "best",
                f"new best: node {top.id} scores {top.score:.6g} (after verification)",
                top.id,
                {"score": top.score},
            )
        return node

    def holdout(self, node_id: int, split: str = HOLDOUT, repeat: int = 0) -> EvalResult | None:
        """Run the hidden holdout evaluation on a node and record it (``split``: the
        final judge, or the guard during the search)."""
        node = self.nodes[node_id]
        if self.spec.holdout is None or node.commit is None:
            return None
        overlay = dict(self.overlay)
        if self.spec.holdout.files:
            overlay.update(self.git.read_files(self.git.resolve(HOLDOUT_REF)))
        archive = self.git.archive(node.commit, overlay)
        result = self.evaluator.holdout(node_id, archive, self.cancel, overlay, split, repeat)
        if result is not None:
            result = dataclasses.replace(result, attempt=node.attempt)
            self.store.record_evaluation(self.run_id, result)
            what = f"{result.score:.6g}" if result.ok else f"failed: {result.error}"
            label = "guard holdout" if split == GUARD else "holdout"
            self.store.add_event(
                self.run_id,
                "holdout",
                f"{label} of node {node_id}: {what}",
                node_id,
                {"score": result.score, "ok": result.ok},
            )
        return result

    def close(self) -> None:
        self.git.close()
        self.sandbox.close()
        conn = getattr(self.checkpointer, "conn", None)
        if conn is not None:
            conn.close()
