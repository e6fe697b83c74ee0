"""The steps of a candidate's pipeline: select, propose, code, review, approve,
evaluate, analyse, record, verify. ``pipeline`` wires them into the graph; its edges decide
what comes next from what a step returns (see there).

Each step reads its node from the mirror and is idempotent against SQL: a step whose
work is stored already does nothing, so a thread replayed after a crash redoes only
what was lost. Every exception that is the candidate's fault is recorded on its node
(``failed``, with the step and a kind) at the candidate boundary in ``guarded``;
infrastructure failures leave the node unfinished for ``resume``. A recorded failure
that is not the candidate's code's (``trust.foreign_failure``: the model's, the
reviewer's, the parser's, the sandbox's) is also kept until the
scheduler reads it (``failure_of``) when the candidate's thread ends.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt

from revtree.agents.base import Change, Job, Proposal, Reviewer, Verdict
from revtree.agents.evaluator import Outcome
from revtree.agents.llm import BudgetExhausted
from revtree.errors import (
    BaselineFailed,
    Cancelled,
    EditError,
    EditUnreadable,
    InfraFailure,
)
from revtree.memory import Node, NodeStatus
from revtree.memory.records import TWIN
from revtree.memory.stages import GUARD, HOLDOUT
from revtree.orchestrator import repairs
from revtree.orchestrator.measures import gain, node_features
from revtree.orchestrator.novelty import Novelty, change_embeddings
from revtree.orchestrator.policies import Selection
from revtree.orchestrator.reviews import BESIDE, Beside, contains, rejection
from revtree.orchestrator.tickets import Chain, Tickets
from revtree.orchestrator.tree import Tree
from revtree.orchestrator.trust import Failure, detail_of, error_kind, foreign_failure, infra_cause
from revtree.orchestrator.verify import Trust
from revtree.orchestrator.wiring import Parts

State = dict[str, Any]  # the graph state (``pipeline.CandidateState``)
Picked = tuple[Selection | None, dict[str, Any], str | None]  # choice, policy state before, note
DIFF_LINES = 60  # of a candidate's diff, shown in the live log when it waits for approval
# seconds: where a run's evaluations take less, the next candidate starts as one is
# launched (its preparation, not the launch, is what the next evaluation waits for)
QUICK = 0.1


class Steps:
    """The pipeline steps of one run, over the run's parts."""

    def __init__(self, parts: Parts, trust: Trust, tickets: Tickets) -> None:
        self.p, self.trust, self.mirror, self.tickets = parts, trust, parts.mirror, tickets
        self.store, self.run_id, self.spec = parts.store, parts.run_id, parts.spec
        self.agents = parts.agents
        self.resumed = {n.id for n in self.mirror.nodes.values() if not n.status.is_finished()}
        self._failures: dict[int, Failure] = {}  # node -> its failure, where not its code's
        embeddings = change_embeddings(parts.spec, self._warn)
        self.novelty = Novelty(parts.spec, parts.git, parts.mirror, embeddings)
        beside = contains(parts.sandbox) and parts.spec.search.approve != "evaluate"
        self.beside = Beside(beside and bool(parts.agents.reviewers))
        self.chain = Chain(parts.chained())  # the next candidate beside an evaluation
        self.quick = False  # the last evaluation ran under QUICK seconds a run
        if self.agents.context is not None:  # a prompt that waits for a score held
            self.agents.context.tell_waits(self.chain.prepared)

    def _warn(self, message: str) -> None:
        self.store.add_event(self.run_id, "warning", message)

    # -- the candidate boundary --------------------------------------------------------
    def guarded(self, step: str, fn: Callable[[State], State | None]) -> Callable[[State], State]:
        """``fn`` as a graph node: timed, refused while the run stops, and with the
        candidate's own failures recorded on its node."""

        def run(state: State) -> State:
            t0 = time.monotonic()
            node_id = state.get("node_id")
            if self.p.cancel.is_set():  # stopping: no new model calls or evaluations
                raise Cancelled("the run is stopping")
            try:
                return dict(fn(state) or {})
            except (Cancelled, BudgetExhausted, InfraFailure, BaselineFailed, GraphBubbleUp):
                raise  # GraphBubbleUp: LangGraph's interrupt (a candidate waits for approval)
            except Exception as e:  # the candidate boundary: record, and the run goes on
                node_id = state.get("node_id", node_id)
                if (cause := infra_cause(e)) is not None:  # not the candidate's: unfinished
                    raise InfraFailure(cause) from e
                if node_id == 0:
                    raise BaselineFailed(f"{step}: {detail_of(e)}") from e
                if node_id is None or self.mirror.get(node_id).status.is_finished():
                    raise
                self.chain.wait_next(self.mirror.get(node_id).thread_id, self.p.cancel)
                self.fail(node_id, step, detail_of(e), error_kind(e, step))
                self._foreign(node_id, foreign_failure(e, step))
                return {}
            finally:  # a finished node's timings are stored already: no more are kept
                if node_id is not None and not self.mirror.get(node_id).status.is_finished():
                    self.mirror.time(node_id, step, time.monotonic() - t0)

        run.__name__ = step
        return run

    def fail(self, node_id: int, step: str, detail: str, kind: str) -> Node:
        msg, error = f"node {node_id} failed in {step}: {detail}", f"{step}: {detail}"
        return self.mirror.finish(node_id, NodeStatus.FAILED, msg, error=error, error_kind=kind)

    def _foreign(self, node_id: int, failure: Failure | None) -> None:
        if failure is not None:
            with self.mirror.lock:
                self._failures[node_id] = failure

    def failure_of(self, node_id: int) -> Failure | None:  # once: the scheduler's streak
        with self.mirror.lock:
            return self._failures.pop(node_id, None)

    def job(self, node: Node) -> Job:
        parent = self.mirror.parent(node)
        assert parent.commit is not None
        commit = parent.commit
        return Job(node, parent, lambda: self.p.git.read_files(commit), self.agents.context)

    # -- the steps ---------------------------------------------------------------------
    def select(self, state: State) -> State | None:
        """The policy's choice, and only that: a new node, a node to re-run before it is
        exploited (``verify``: that step, in a thread with no node), or nothing (idle).
        A slow policy (a model call) selects outside the tree lock, one at a time."""
        ticket, m, policy = state["ticket"], self.mirror, self.p.policy
        with m.lock:
            if ticket in m.by_ticket:
                self.tickets.selected(ticket)
                return {"node_id": m.by_ticket[ticket]}
            snapshot = m.snapshot()
            if not policy.slow:
                return self._take(ticket, self._choose(snapshot))
        with self.p.policy_lock:
            picked = self._choose(snapshot)
        with m.lock:
            return self._take(ticket, picked)

    def _choose(self, snapshot: Tree) -> Picked:
        policy = self.p.policy
        before = policy.state()
        return policy.select(snapshot), before, policy.note

    def _take(self, ticket: str, picked: Picked) -> State:
        """The node for a selection (under the tree lock), or the node to verify (one
        ticket at a time per node: ``Trust.claim``); no node: ``Chain.prepared``."""
        choice, before, note = picked
        verify = choice is not None and choice.operator == "verify"
        if choice is not None and verify and not self.trust.claim(choice.parent_id):
            choice = None  # verifying already, by another ticket
        self.tickets.selected(ticket, idle=choice is None)
        node_id = None
        try:
            if choice is not None and verify:
                self.store.update_run(self.run_id, policy_state=self.p.policy.state())
                return {"node_id": None, "verify": choice.parent_id}
            node_id = None if choice is None else self._add(ticket, choice, before, note).id
            return {"node_id": node_id}
        finally:
            if node_id is None:  # the outcome before it may be recorded (``tickets.Chain``)
                self.chain.prepared(ticket)

    def _add(
        self, ticket: str, choice: Selection, before: dict[str, Any], note: str | None
    ) -> Node:
        parent = self.mirror.get(choice.parent_id)
        node = Node(
            self.run_id,
            self.mirror.next_id(),
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
        data = {"parent": parent.id, "operator": choice.operator, "note": note}
        try:
            self.mirror.add(node, ("select", msg, data), self.p.policy.state())
        except BaseException:
            self.p.policy.load_state(before)
            raise
        return node

    def propose(self, state: State) -> None:
        node = self.mirror.get(state["node_id"])
        if node.proposal is not None:
            return
        proposal = self.agents.proposer.propose(self.job(node))
        self.mirror.set(
            node.id,
            ("propose", f"node {node.id}: {proposal.hypothesis}", proposal.to_json()),
            proposal=proposal.to_json(),
            status=NodeStatus.PROPOSED,
        )

    def code(self, state: State) -> State | None:
        """Commit the coder's changes. A refused answer goes back to the coder for a
        repair round while it has rounds left (the graph's ``code -> code`` edge); a
        replay after a kill resumes the rounds where the live log left them (``repairs``)."""
        node = self.mirror.get(state["node_id"])
        if node.commit is not None:
            return {"refusal": None}
        assert node.proposal is not None
        last, rounds = state.get("refusal"), self.agents.coder.repairs
        if node.id in self.resumed:  # a replay: the rounds SQL kept may be ahead of it
            last = repairs.latest(self.store, self.run_id, node, last)
            if last is not None and not repairs.due(last, rounds):
                return {"refusal": last}  # refused for good before the kill: to record
        job, proposal, refusal = self.job(node), Proposal(**node.proposal), repairs.of_state(last)
        try:
            changes = self.agents.coder.code(job, proposal, refusal)
        except EditError as e:
            out = repairs.refused(e, refusal, detail_of(e))
            repairs.say(self.store, self.spec, self.run_id, node, out, rounds)
            return {"refusal": out}
        self._commit(node, job.parent, proposal, changes)
        return {"refusal": None}

    def _commit(
        self, node: Node, parent: Node, proposal: Proposal, changes: dict[str, bytes | None]
    ) -> None:
        git = self.p.git
        assert parent.commit is not None
        message = (
            f"node {node.id}: {node.operator} from node {parent.id}\n\n{proposal.hypothesis}\n"
        )
        if node.attempt > 1:  # a retry: a distinct commit, the earlier one stays reachable
            message += f"\n(attempt {node.attempt}, by `revtree retry`)\n"
        sha = git.commit(parent.commit, changes, message, when=node.created_at)
        if not git.changed_paths(parent.commit, sha):
            raise EditError(
                f"the edit changes nothing: the code is identical to node {parent.id}'s "
                "(not evaluated: its score could only differ by the evaluator's noise)"
            )
        git.set_node_ref(node.id, sha)
        self.mirror.set(
            node.id,
            (
                "commit",
                f"node {node.id}: commit {sha[:10]} changes {sorted(changes) or 'nothing'}",
                {"commit": sha},
            ),
            commit=sha,
            status=NodeStatus.CODED,
        )

    def change(self, node: Node) -> Change:
        parent = self.mirror.parent(node)
        assert parent.commit is not None and node.commit is not None
        git = self.p.git
        paths = tuple(git.changed_paths(parent.commit, node.commit))
        return Change(paths, git.diff(parent.commit, node.commit))

    def review(self, state: State) -> State | None:
        """The near-twin check (``novelty``) and the pure checks, then the reviewers
        that may call a model, in turn, here or beside the evaluation (``reviews``); the
        first rejection is the verdict, and goes to ``record``. A replay after a crash
        reads a stored verdict (``_verdict``), else runs the (pure) checks again."""
        node = self.mirror.get(state["node_id"])
        if node.status is not NodeStatus.CODED:
            return None
        if node.review is not None:  # a verdict stored as given: no reviewer asked again
            return {"verdict": rejection(node.review)}
        if (twin := self.novelty.twin(node)) is not None:
            return {"verdict": {"accepted": False, "reasons": [twin.reason()], "by": "novelty"}}
        verdict = self._verdict(node, self.agents.checks)
        if verdict is None and not self.beside.start(
            (node.id, node.attempt), lambda: self._model_verdict(node)
        ):
            verdict = self._verdict(node, self.agents.reviewers)
        return {"verdict": verdict}

    def _model_verdict(self, node: Node) -> State | None:
        """The model reviewers' rejection, run beside the evaluation (None: accepted)."""
        return self._verdict(node, self.agents.reviewers, BESIDE)

    def _verdict(
        self, node: Node, reviewers: tuple[Reviewer, ...], by: str | None = None
    ) -> State | None:
        """The first rejection of ``reviewers`` (a graph-state verdict), else None; it, or
        a model's acceptance, is stored as given (a crash loses none: ``reviews``)."""
        assert node.proposal is not None
        job, proposal, change = self.job(node), Proposal(**node.proposal), self.change(node)
        verdict = Verdict(True, stored=False)
        for reviewer in reviewers:
            verdict = reviewer.review(job, proposal, change) or verdict
            if not verdict.accepted:
                rejected = {"accepted": False, "reasons": list(verdict.reasons)}
                rejected |= {"by": by} if by else {}
                self.mirror.set(node.id, None, review=rejected)
                return rejected
        if verdict.stored:
            review = {"accepted": True, "reasons": list(verdict.reasons)}
            self.mirror.set(node.id, None, review=review)
        return None

    def _reviewed_beside(self, node: Node, outcome: Outcome) -> State:
        """The evaluation's outcome, with the verdict of the review that ran beside it
        (raised as the review step's failure where the review failed)."""
        key = (node.id, node.attempt)
        if not self.beside.started(key):
            return {"outcome": dataclasses.asdict(outcome)}
        review = self.guarded("review", lambda s: {"verdict": self.beside.verdict(key)})
        return {"outcome": dataclasses.asdict(outcome), **review({"node_id": node.id})}

    def approve(self, state: State) -> State | None:
        """Human approval (``[search] approve = "evaluate"``): the candidate waits, its
        hypothesis and diff in the live log, until ``revtree approve`` or ``reject``
        writes a decision to SQL. The decision is read from SQL, so a stop and resume
        while waiting loses nothing; the graph's interrupt only parks the thread."""
        node = self.mirror.get(state["node_id"])
        if node.id == 0 or self.spec.search.approve != "evaluate" or node.commit is None:
            return None
        if node.status is not NodeStatus.CODED:
            return None  # evaluating already (a replay): it was approved
        decision = self.store.decision(self.run_id, node.id, node.attempt)
        if decision is None:  # park the thread; the scheduler re-runs this step (and so
            self._announce(node)  # reads SQL again) once a decision is stored
            interrupt({"node": node.id, "attempt": node.attempt})
            return None  # not reached: ``interrupt`` pauses the graph here
        if decision.accepted:
            return {"verdict": None}
        reasons = [f"rejected by the user: {decision.why or 'no reason given'}"]
        return {"verdict": {"accepted": False, "reasons": reasons, "by": "user"}}

    def _announce(self, node: Node) -> None:
        if not self.tickets.announce(node.id, node.attempt):
            return
        hypothesis = (node.proposal or {}).get("hypothesis", "")
        lines = self.change(node).diff.splitlines()
        shown = "\n".join(lines[:DIFF_LINES])
        more = f"\n… {len(lines) - DIFF_LINES} more diff lines" if len(lines) > DIFF_LINES else ""
        self.store.add_event(
            self.run_id,
            "approval",
            f"node {node.id} waits for approval: {hypothesis}\n{shown}{more}\n"
            f"`revtree approve {self.run_id} {node.id}` or "
            f"`revtree reject {self.run_id} {node.id} --why TEXT`",
            node.id,
            {"waiting": True, "attempt": node.attempt},
        )

    def evaluate(self, state: State) -> State | None:
        node = self.mirror.get(state["node_id"])
        assert node.commit is not None
        key = (node.id, node.attempt)
        if node.id != 0 and not self.beside.started(key):  # a replay, or reviewed first
            if node.review is None and self.beside.enabled:  # lost with its process
                self.beside.start(key, lambda: self._model_verdict(node))
            elif (verdict := rejection(node.review)) is not None:  # given before a crash
                return {"verdict": verdict}
        done = {}
        if node.id in self.resumed:  # only a resumed node can have stored evaluations
            done = {
                (e.stage, e.repeat): e
                for e in self.store.evaluations(self.run_id, node.id)
                if e.stage not in (HOLDOUT, GUARD) and e.attempt == node.attempt
            }
            if node.id == 0 and any(not e.ok for e in done.values()):
                msg = (
                    f"baseline: its last evaluation failed; evaluating it again "
                    f"(attempt {node.attempt + 1})"
                )
                node = self.mirror.set(0, ("retry", msg, None), attempt=node.attempt + 1)
                done = {}
        assert node.commit is not None
        self.chain.prepared(state["ticket"])  # reviewed: the outcome before it may be recorded
        archive = self.p.git.archive(node.commit, self.p.overlay)
        said: list[bool] = []

        def begin() -> None:  # once: where the launch begins, or as its process runs
            if not said:
                said.append(True)
                self._evaluating(node, state["ticket"])

        staged = self.p.evaluator.staged(archive, done, begin)  # unpacked while it waits
        with staged as later, self.p.slots.turns(self.chain.on) as turns:  # parallel 1: per run
            # else as its first run's process starts: the next one waits for that (two
            # cores: its proposal slows the start), but where evaluations are quick
            if not later or (self.quick and self.chain.on):
                begin()
            with self.beside.dropped_on_error(key), self.chain.readied(state["ticket"]):
                outcome = self.p.evaluator.evaluate(
                    node.id,
                    archive,
                    done,
                    self.chain.in_turn(
                        state["ticket"], self.p.cancel, self.trust.record, self.p.slots.check
                    ),
                    self.p.cancel,
                    {"revtree.run": self.run_id, "revtree.node": str(node.id)},
                    turns.run,
                )
        if outcome.ok and outcome.n_evals:  # (a candidate that crashes at once says nothing)
            self.quick = outcome.sandbox_seconds / outcome.n_evals < QUICK
        if node.id == 0 and not outcome.ok:
            raise BaselineFailed(outcome.error or "no score")
        return self._reviewed_beside(node, outcome)

    def _evaluating(self, node: Node, ticket: str) -> None:
        """Say that ``node`` is evaluated, and let the next candidate start."""
        if node.status is not NodeStatus.EVALUATING:
            what = (
                "baseline"
                if node.id == 0
                else "checks passed, evaluating while the reviewer reads it; then"
                if self.beside.started((node.id, node.attempt))
                else "review passed"
            )
            why = ("evaluate", f"node {node.id}: {what}, evaluating", None)
            self.mirror.set(node.id, why, status=NodeStatus.EVALUATING)
        self.chain.ready(ticket)  # the next candidate may start

    def analyse(self, state: State) -> State | None:
        """The analyst's reading of a failed evaluation; its own failure is only logged."""
        node = self.mirror.get(state["node_id"])
        if self.agents.analyst is None or node.status.is_finished():
            return None
        try:
            return {"analysis": self.agents.analyst.analyse(self.job(node))}
        except Exception as e:  # the analysis is optional; the node's own reason stays
            self.store.add_event(
                self.run_id, "error", f"node {node.id}: analysis failed: {e}", node.id
            )
            return None

    def record(self, state: State) -> None:
        """A refused edit, a rejection or the outcome, on the node; only that (a new best
        goes on to ``verify``). A replay of a finished node records nothing."""
        node = self.mirror.get(state["node_id"])
        if node.status.is_finished():
            return
        if node.status is NodeStatus.EVALUATING:  # (again, where a resume replays from here)
            self.chain.ready(state["ticket"])
        self.chain.wait_next(state["ticket"], self.p.cancel)
        if (refusal := state.get("refusal")) is not None:
            self.fail(node.id, "code", refusal["detail"], "code")
            if refusal.get("unreadable"):  # (a checkpoint from before the key has none)
                self._foreign(node.id, foreign_failure(EditUnreadable(refusal["error"]), "code"))
        elif (verdict := state.get("verdict")) is not None:
            reason = "; ".join(verdict["reasons"])
            self.mirror.finish(
                node.id,
                NodeStatus.REJECTED,
                f"node {node.id} rejected: {reason}",
                error=f"review: {reason}",
                error_kind=TWIN if verdict.get("by") == "novelty" else "rejected",
                review={k: verdict[k] for k in ("accepted", "reasons", "by") if k in verdict},
            )
        else:
            self._outcome(node, state)
        node = self.mirror.get(node.id)
        if node.status is NodeStatus.SUCCEEDED and self.mirror.best_id != node.id:
            self.chain.through(state["ticket"])  # no ``verify`` after (a failure: its end)

    def _outcome(self, node: Node, state: State) -> None:
        o = Outcome(**(state.get("outcome") or {}))
        if o.ok:
            assert o.score is not None
            msg = f"node {node.id} scored {o.score:.6g}{gain(self.mirror.get(0), node.id, o.score)}"
            self.mirror.finish(
                node.id,
                NodeStatus.SUCCEEDED,
                msg,
                score=o.score,
                score_std=o.score_std,
                n_evals=o.n_evals,
                features=node_features(self.p.git, self.spec, node, self.mirror.get, o.metrics),
            )
        else:
            kw: dict[str, Any] = {"error": o.error, "error_kind": o.error_kind}
            msg = f"node {node.id} failed: {o.error}"
            self.mirror.finish(
                node.id, NodeStatus.FAILED, msg, state.get("analysis"), n_evals=o.n_evals, **kw
            )

    def verify(self, state: State) -> None:
        """The repeats a policy asked of a node (from ``select``), or a new best's repeats
        and guard holdout (``record``'s "new best?" edge), unless another is the best now."""
        if (asked := state.get("verify")) is not None:
            self.chain.wait_turn(state["ticket"], self.p.cancel)
            self.trust.for_policy(asked)
        elif self.mirror.best_id == state["node_id"]:
            self.trust.best(state["node_id"])
