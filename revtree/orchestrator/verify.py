"""Trust in a best: verification by repeats, the guard holdout with its drift alarms,
and the final holdout (the rules themselves are pure functions in ``trust``).

A new best is verified (re-run up to ``verify_repeats``, stopping where more repeats
would decide nothing: see ``Trust.verify``) and guarded (one run of the guard split of
the holdout), each within its budget share during the run and regardless of it at the
end; the baseline's guard always runs, as the reference of every drift alarm. Where the
evaluator has reproduced every other node's repeats bit for bit, a new best's re-run is
deferred to the end of the run (``trust.defer_verification``): the final best is
verified there, and the next one in turn while verification moves the best. While no
noise is measured yet, the verification that will measure it runs alone (``_measuring``,
the baseline's second run first): bests found at once wait for it. An alarmed node and
its finished subtree are never recommended or exploited. Every evaluation here is
stored once per (node, stage, repeat, attempt) and reused on replay.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import statistics
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

from revtree.errors import StoreError
from revtree.memory import EvalResult, Node, NodeStatus
from revtree.memory.gitstore import HOLDOUT_REF
from revtree.memory.records import finite_mean
from revtree.memory.stages import FULL, GUARD, HOLDOUT
from revtree.orchestrator.mirror import subtree_alarm
from revtree.orchestrator.trust import (
    decided,
    defer_verification,
    dev_only_alarm,
    eval_event,
    holdout_alarm,
    pooled_noise,
    rank_alarm,
)
from revtree.orchestrator.wiring import Parts

FINAL_TRIES = 10  # new bests verified and guarded at the end, at most (plus the deferred)


class Trust:
    """Verification and the holdout guard of one run."""

    def __init__(self, parts: Parts) -> None:
        self.p, self.spec, self.mirror = parts, parts.spec, parts.mirror
        self.store, self.run_id = parts.store, parts.run_id
        self._verifying: set[int] = set()  # nodes a policy or an early final check verifies
        self.guarded = self._stored_guards()  # node -> the mean of its guard holdout runs
        self._guard_locks: dict[int, threading.Lock] = {}  # one guard run per node at once
        self.deferred = 0  # new bests this session left unverified until the end
        self._unmeasured = threading.Lock()  # one verification at a time, noise unmeasured

    def record(
        self, result: EvalResult, kind: str | None = None, counted: bool = True
    ) -> EvalResult:
        """The one writer of evaluations (the candidate's, a verification's, a holdout's):
        store one evaluation as of the node's current attempt, with its event, and spend
        its sandbox time on the budget once, with ``kind``'s trust share where
        ``counted``. A duplicate of a stored evaluation (the same repeat run twice at
        once) is neither stored nor spent: the session's budget stays what SQL holds, which
        is what a resumed run counts. Returns the evaluation."""
        result = dataclasses.replace(result, attempt=self.mirror.get(result.node_id).attempt)
        if self.store.record_evaluation(self.run_id, result, eval_event(result)) is not None:
            self.p.budget.spend(result.duration, kind, counted)
        return result

    def _stored_guards(self) -> dict[int, float]:
        """The guard score of each guarded node (its current attempt), from SQL: only the
        guard rows are read, as a resume at 10k nodes must start fast."""
        runs: dict[int, list[float]] = {}
        for e in self.store.evaluations(self.run_id, stage=GUARD):
            node = self.mirror.nodes.get(e.node_id)
            if e.score is None or not e.ok or node is None:
                continue
            if e.attempt == node.attempt:
                runs.setdefault(e.node_id, []).append(e.score)
        return {i: statistics.fmean(v) for i, v in runs.items()}

    def best(self, node_id: int, final: bool = False) -> None:
        """A new best: verified (repeats) and guarded (holdout), each within its budget
        share during the run, and regardless of it when ``final``; the baseline's guard
        always runs (the reference of every drift alarm). During the run, a candidate's
        verification waits for the end where the other nodes' repeats show no noise
        (``_defer``)."""
        t, budget = self.spec.trust, self.p.budget
        always = final or node_id == 0
        if t.verify_repeats > 1 and (
            final or budget.share_ok("verify", t.verify_share, t.verify_repeats - 1)
        ):
            with self._measuring(final, node_id) as others:
                if not always and self.mirror.best_id != node_id:
                    return  # another became the best while this one waited its turn
                if others is not None and pooled_noise(others) is None:
                    others = self._baseline_first(node_id, others)
                verified = others is None or not self._defer(node_id, others)
                if verified:
                    repeats = t.verify_repeats
                    self.verify(node_id, repeats, slot=not final, until=final, others=others)
            if verified and self.mirror.best_id != node_id and not final:
                return  # verification moved the best elsewhere
        if self.spec.holdout is None or not t.guard:
            return
        if node_id != 0 and 0 not in self.guarded:
            self._guard(0, slot=not final)
        first = not any(i != 0 for i in self.guarded)  # the first best is always guarded
        if self.mirror.get(node_id).alarm is None and (
            always or first or budget.share_ok(GUARD, t.guard_share, 1)
        ):
            self._guard(node_id, slot=not final)

    def finalize(self) -> None:
        """Before a best is reported: the best (each new one, up to ``FINAL_TRIES``) is
        verified and guarded whatever the budget shares, the baseline verified (beside
        them where ``parallel`` allows two evaluations at once: the run's last seconds
        were otherwise one evaluation after another), and the final holdout run on the
        node that is recommended. Each best this session deferred is one more try: a run
        of bests good on their first run only is each verified once, at the end rather
        than as found. A best is unverified while its
        repeats fall short (``verify`` reads them from SQL), so a resumed session verifies
        a best an earlier one deferred (though only its own deferrals raise the bound)."""
        root = self.mirror.get(0)
        base = self.spec.trust.verify_repeats > 1 and root.status is NodeStatus.SUCCEEDED
        # two evaluations at once fit, and the loop below does not verify the baseline too
        beside = base and self.spec.search.parallel > 1 and self.mirror.best_id not in (0, None)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            baseline = pool.submit(self._verify_baseline) if beside else None
            for _ in range(FINAL_TRIES + self.deferred):
                best = self.mirror.best_id
                if best is None:
                    break
                if best == 0 and baseline is not None:
                    baseline.result()  # the baseline became the best: one thread verifies it
                self.best(best, final=True)
                if self.mirror.best_id == best:
                    break
            if baseline is not None:
                baseline.result()
            elif base:
                self._verify_baseline()
        self.final_holdout()

    def _verify_baseline(self) -> None:
        """The baseline's repeats, the reference of the reported gain, until more would
        decide nothing (one re-run with no noise shown; two or more for a t-test)."""
        self.verify(0, self.spec.trust.verify_repeats, until=True)

    def early(self, node_id: int) -> None:
        """``finalize``'s verification of the baseline or the best (succeeded), begun in
        a slot the last candidates leave free (``Scheduler._early``). A stop or a failure
        here leaves it to ``finalize``."""
        with self.mirror.lock:  # (not while a policy's ticket verifies it: ``claim``)
            if not self.claim(node_id):
                return
        with contextlib.suppress(Exception):  # (``Cancelled`` too)
            self.verify(node_id, self.spec.trust.verify_repeats, slot=True, until=True)
        with self.mirror.lock:
            self._verifying.discard(node_id)

    @contextlib.contextmanager
    def _measuring(self, final: bool, node_id: int) -> Iterator[list[list[float]] | None]:
        """The other nodes' repeats for a new best's verification (None where it is
        verified whatever they show: a final best, the baseline). While they measure no
        noise yet, the verification that will measure it runs alone: bests found at once
        at ``parallel`` > 1 wait here, then read the noise it measured (and may wait for
        the end: ``_defer``) instead of each measuring it; once it is measured, they
        verify side by side."""
        if final:
            yield None
            return
        with contextlib.ExitStack() as held:
            if pooled_noise(others := self._others(node_id)) is None:
                held.enter_context(self._unmeasured)
                others = self._others(node_id)  # the one before may have measured it
                if pooled_noise(others) is not None:
                    held.close()  # measured meanwhile: no need to run alone
            yield None if node_id == 0 else others

    def _baseline_first(self, node_id: int, others: list[list[float]]) -> list[list[float]]:
        """While the noise is unmeasured, before a new best's re-runs: the baseline's second
        run (``finalize`` reuses it), so that one re-run of the best gives two degrees of
        freedom; where the share has room for both and no thread verifies the baseline. (A
        best whose own code has a few discrete outcomes now passes one re-run, not two; the
        final best is re-run at the end all the same.) The other nodes' repeats, again."""
        root, t = self.mirror.get(0), self.spec.trust
        if node_id == 0 or root.status is not NodeStatus.SUCCEEDED or root.commit is None:
            return others
        if len(self._full(root)) >= 2:
            return others
        if not self.p.budget.share_ok("verify", t.verify_share, 2):  # with the best's one
            return others
        with self.mirror.lock:
            if not self.claim(0):  # the final checks begun early verify it (``early``)
                return others
        try:
            self.verify(0, 2, slot=True)
        finally:
            with self.mirror.lock:
                self._verifying.discard(0)
        return self._others(node_id)

    def _defer(self, node_id: int, others: list[list[float]]) -> bool:
        """Whether a new best's verification waits for the end of the run
        (``trust.defer_verification`` of the noise over ``others``, the other nodes'
        repeats); counts it, and says why in the live log the first time a session
        defers."""
        if not defer_verification(pooled_noise(others)):
            return False
        with self.mirror.lock:
            self.deferred += 1
            first = self.deferred == 1
        if first:
            self.store.add_event(
                self.run_id,
                "verify",
                "the evaluator reproduced every repeat bit for bit: new bests are re-run at "
                "the end of the run, not as they are found",
                node_id,
                {"deferred": node_id},
            )
        return True

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
            node = self.mirror.get(node_id)
            if node.alarm is None and node.score is not None:
                self.alarm(
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
        with self.mirror.lock:
            once = self._guard_locks.setdefault(node_id, threading.Lock())
        with once:
            node = self.mirror.get(node_id)
            runs = {
                e.repeat: e
                for e in self.store.evaluations(self.run_id, node_id)
                if e.stage == GUARD and e.attempt == node.attempt
            }
            if repeat not in runs:
                with self.p.slots.maybe(slot):
                    result = self.holdout(node_id, split=GUARD, repeat=repeat)
                if result is None:
                    return None
                runs[repeat] = result
            scores = [e.score for e in runs.values() if e.ok and e.score is not None]
            if scores:
                with self.mirror.lock:
                    self.guarded[node_id] = statistics.fmean(scores)
            run = runs[repeat]
            return None if run.ok else (run.error or "no score")

    def _check_alarm(self, node_id: int, slot: bool = False) -> None:
        node, root = self.mirror.get(node_id), self.mirror.get(0)
        t, h = self.spec.trust, self.guarded.get(node_id)
        base_h, maximize = self.guarded.get(0), self.spec.maximize
        if node_id == 0 or h is None or base_h is None or node.score is None:
            return
        if root.score is None or node.alarm is not None:
            return
        kind, rule = "holdout-worse", cast(Callable[..., str | None], holdout_alarm)
        msg = rule(node.score, h, root.score, base_h, maximize, t.tolerance)
        if msg is None:
            kind, rule = "dev-only", dev_only_alarm
            msg = rule(node.score, h, root.score, base_h, maximize, t.tolerance)
        if msg is not None:  # confirm on a second guard run of both before alarming
            self._guard_repeat(0, 1, slot)
            self._guard_repeat(node_id, 1, slot)
            h, base_h = self.guarded[node_id], self.guarded[0]
            msg = rule(node.score, h, root.score, base_h, maximize, t.tolerance)
        if msg is None:
            with self.mirror.lock:
                nodes = self.mirror.nodes
                dev = {
                    i: (nodes[i].score or 0.0, s)
                    for i, s in self.guarded.items()
                    if nodes[i].score is not None and nodes[i].alarm is None
                }
            kind, msg = "rank", rank_alarm(node_id, dev, maximize, t.min_rank_agreement)
        if msg is not None:
            self.alarm(node_id, {"kind": kind, "message": msg, "dev": node.score, "holdout": h})

    def alarm(self, node_id: int, alarm: dict[str, Any]) -> None:
        """Mark the node and its finished subtree alarmed; the best moves elsewhere."""
        node = self.mirror.set(
            node_id,
            ("alarm", f"drift alarm on node {node_id}: {alarm['message']}", alarm),
            alarm=alarm,
        )
        marked = [node]
        for child in self.mirror.subtree(node_id):
            if child.status is NodeStatus.SUCCEEDED and child.alarm is None:
                sub = subtree_alarm(node_id, child.score)
                event = ("alarm", f"node {child.id}: {sub['message']}", sub)
                marked.append(self.mirror.set(child.id, event, alarm=sub))
        self.mirror.revise(marked)
        self.mirror.rebest(f"node {node_id} carries a drift alarm")

    def final_holdout(self) -> None:
        """The hidden holdout of the recommended node, and of the baseline as its
        reference (a recommendation no better there is not called an improvement),
        each once per attempt."""
        best = self.mirror.best_id
        if self.spec.holdout is None or best is None:
            return
        nodes = [best] if best == 0 or self.mirror.get(0).score is None else [0, best]
        for node_id in nodes:
            attempt = self.mirror.get(node_id).attempt
            evals = self.store.evaluations(self.run_id, node_id)
            if not any(e.stage == HOLDOUT and e.attempt == attempt for e in evals):
                self.holdout(node_id)

    def claim(self, node_id: int) -> bool:
        """Take a node the policy asks to verify (under the tree lock); False where it is
        being verified already. ``for_policy`` lets it go."""
        if node_id in self._verifying:
            return False
        self._verifying.add(node_id)
        return True

    def for_policy(self, node_id: int) -> None:
        """The policy asked for more repeats of a promising node (``claim``ed) before
        exploiting it."""
        try:
            repeats = int(getattr(self.spec.search, "verify_repeats", 3))
            self.mirror.revise([self.verify(node_id, repeats, slot=True)])
        finally:
            with self.mirror.lock:
                self._verifying.discard(node_id)

    def verify(
        self,
        node_id: int,
        repeats: int,
        slot: bool = False,
        until: bool | None = None,
        others: list[list[float]] | None = None,
    ) -> Node:
        """Run the node's full stage until it has ``repeats`` repeats, then store their mean
        and spread as its score (idempotent by repeat, like every evaluation).

        With ``until`` (not None) it stops earlier, once more repeats would decide
        nothing (``trust.decided``): at least one re-run, then none where the run's
        evaluator has shown no noise, or fewer where the node's margin over its rival
        (the previous best; the best, for the baseline) is many standard errors wide.
        ``until=True`` (a final best) asks two re-runs of a noisy evaluator, which the
        reported gain's t-test needs. Repeats already made are reused, never re-run.
        ``others``: the other nodes' repeats (``_others``), where the caller read them."""
        node = self.mirror.get(node_id)
        assert node.commit is not None
        ev = self.spec.evaluate
        done = self._full(node)
        if all(r in done for r in range(repeats)) and node.n_evals >= len(done):
            return node  # verified already: nothing new to say
        if not done and node.n_evals > 0:
            return node  # its score is a cascade stage's ("keep"): no full stage to repeat
        if others is None:
            others = self._others(node_id) if until is not None else []
        archive, ran = None, False
        for r in range(repeats):
            if r in done:
                continue
            if until is not None and self._enough(node, done, others, final=until):
                break
            archive = archive or self.p.git.archive(node.commit, self.p.overlay)
            with self.p.slots.maybe(slot):
                done[r] = self.p.evaluator.run_one(
                    node_id, archive, FULL, r, ev.command, ev.metric, ev.timeout, self.p.cancel
                )
            self.record(done[r], "verify")
            ran = True
        if not ran and node.n_evals >= len(done):
            return node  # enough repeats were made earlier: nothing new to say
        scores = [e.score for e in done.values() if e.ok and e.score is not None]
        mean = finite_mean(scores)  # exact where every repeat agrees
        if mean is None or node.status is not NodeStatus.SUCCEEDED:
            return self.mirror.get(node_id)
        std = statistics.stdev(scores) if len(scores) > 1 else None
        spread = f" ± {std:.3g}" if std is not None else ""
        node = self.mirror.set(
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
        self.mirror.rebest("after verification")
        return node

    def _full(self, node: Node) -> dict[int, EvalResult]:
        """The node's full-stage evaluations of its current attempt, by repeat."""
        return {
            e.repeat: e
            for e in self.store.evaluations(self.run_id, node.id, stage=FULL)
            if e.attempt == node.attempt
        }

    def _others(self, node_id: int) -> list[list[float]]:
        """The full-stage scores of every other node with repeats (current attempts):
        what the run's noise is pooled from."""
        groups: dict[int, list[float]] = {}
        for e in self.store.evaluations(self.run_id, stage=FULL):
            node = self.mirror.nodes.get(e.node_id)
            if node is None or e.node_id == node_id or e.attempt != node.attempt:
                continue
            if e.ok and e.score is not None:
                groups.setdefault(e.node_id, []).append(e.score)
        return [g for g in groups.values() if len(g) > 1]

    def _enough(
        self, node: Node, done: dict[int, EvalResult], others: list[list[float]], final: bool
    ) -> bool:
        """Whether the node's repeats so far decide its verification (``trust.decided``);
        a failed repeat never does (the full count is run)."""
        scores = {r: e.score for r, e in done.items() if e.ok and e.score is not None}
        if len(scores) < len(done):
            return False
        first = self.spec.evaluate.repeats  # the repeats that selected it
        sample = [s for r, s in scores.items() if r >= first]
        noise = pooled_noise([*others, list(scores.values())])
        rival = self._rival(node.id)
        ref = None if rival is None else rival.score
        n_ref = 1 if rival is None else max(1, rival.n_evals)
        return decided(sample, ref, n_ref, noise, min_n=2 if final else 1)

    def _rival(self, node_id: int) -> Node | None:
        """What a verified node is compared with: the best for the baseline, the best
        other node (the previous best) for any other."""
        with self.mirror.lock:
            if node_id == 0:
                best = self.mirror.best_id
                return None if best in (None, 0) else self.mirror.nodes[best]
            good = [
                n
                for n in self.mirror.nodes.values()
                if n.id != node_id
                and n.status is NodeStatus.SUCCEEDED
                and n.alarm is None
                and n.score is not None
            ]
        return max(good, key=lambda n: n.score_of(self.spec.maximize), default=None)

    def holdout(self, node_id: int, split: str = HOLDOUT, repeat: int = 0) -> EvalResult | None:
        """Run the hidden holdout evaluation on a node and record it (``split``: the
        final judge, or the guard during the search, whose runs count in the guard share
        but for the baseline's, the reference)."""
        node = self.mirror.get(node_id)
        if self.spec.holdout is None or node.commit is None:
            return None
        git = self.p.git
        overlay = dict(self.p.overlay)
        if self.spec.holdout.files:
            files = git.find(HOLDOUT_REF)
            if files is None:
                raise StoreError(f"the holdout files ({HOLDOUT_REF}) are missing from the run")
            overlay.update(git.read_files(files))
        archive = git.archive(node.commit, overlay)
        result = self.p.evaluator.holdout(node_id, archive, self.p.cancel, overlay, split, repeat)
        if result is None:
            return None
        guard = split == GUARD
        return self.record(result, GUARD if guard else None, counted=guard and node_id != 0)
