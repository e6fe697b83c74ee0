"""Pilot-run diagnostics: what a small budget says about a task, and which policy to use.

A pilot run spends a few evaluations: repeats of the baseline (node 0) to measure the
evaluator's noise, and proposals from the root (policy ``optuna``: every candidate is
the root with new knob values) to see how proposals spread. :func:`analyse` reads the
finished run's nodes and evaluations (``Store.nodes``, ``Store.evaluations``) and
returns a :class:`PilotReport`; :func:`recommend` turns it into a policy, its
parameters and the reasons.

What it measures: evaluation time (mean and p90 of the full stage, gated stages
excluded), the noise sigma (standard deviation of the baseline's full-stage repeats;
None with fewer than two), the spread of the proposals' scores, their improvement rate
(share better than the baseline mean by more than the noise), the failure rate
(failed / finished proposals, rejected ones included) and the signal-to-noise ratio
spread / sigma.

Who proposes decides whether the policy matters. With the offline Optuna knob proposer
and its ``tpe`` (default) or ``random`` sampler, a proposal ignores its parent: every
policy evaluates the same candidates and scores the same (README, Benchmarks), so the
recommendation is ``optuna``, the plainest, and says so. Where the parent shapes the
child (LLM agents, code mutations, the knob proposer's ``local`` sampler) the policy is
chosen as below. The driver is passed in (:func:`driver_of` a task), else read from the
pilot's proposals: knob values in every one means the knob proposer.

Not measured: whether the landscape is deceptive or needs deep chains (a pilot only
sees one level); the recommendation falls back on the synthetic benchmark
(``benchmarks/policies.py``), where exts ranked first over the suite at small budgets.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from revtree.agents.driver import DRIVERS, KNOBS, KNOBS_LOCAL, LLM, MUTATE, driver
from revtree.memory.records import EvalResult, Node, NodeStatus, directed
from revtree.memory.stages import FULL
from revtree.tasks.spec import TaskSpec

# Who proposes the candidates (agents/driver.py): the knob proposer that ignores the
# parent (tpe, random), the one that perturbs it (local), code mutations, LLM agents.
__all__ = ["DRIVERS", "KNOBS", "KNOBS_LOCAL", "LLM", "MUTATE", "driver_of"]


@dataclass(frozen=True)
class PilotReport:
    n_evals: int
    eval_seconds: float | None
    eval_seconds_p90: float | None
    baseline: float | None
    noise_sigma: float | None
    spread: float | None
    improvement_rate: float | None
    failure_rate: float | None
    n_proposals: int
    policy: str = "exts"
    params: dict[str, Any] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    driver: str | None = None  # one of DRIVERS; None: not known
    driver_inferred: bool = False  # read from the proposals, not from the task

    @property
    def snr(self) -> float | None:
        """Proposal spread over evaluation noise (None when either is unknown or 0)."""
        if not self.spread or not self.noise_sigma:
            return None
        return self.spread / self.noise_sigma


def driver_of(spec: TaskSpec) -> str:
    """Who proposes the candidates of a run of ``spec``, as the run's wiring decides."""
    return driver(spec).name


def driver_from(nodes: list[Node]) -> str | None:
    """The knob proposer when every proposal of the pilot set knob values, else None
    (LLM agents and code mutations set none; which of them cannot be told apart)."""
    proposals = [n.proposal for n in nodes if n.id != 0 and n.proposal is not None]
    if proposals and all(p.get("knobs") for p in proposals):
        return KNOBS
    return None


def analyse(
    nodes: list[Node],
    evaluations: list[EvalResult],
    maximize: bool,
    budget_evals: int | None = None,
    driver: str | None = None,
) -> PilotReport:
    """Diagnostics of a finished pilot run, with a recommendation (see :func:`recommend`).
    ``driver`` (one of DRIVERS, e.g. ``driver_of(spec)``): who proposed; by default read
    from the proposals."""
    if driver is not None and driver not in DRIVERS:
        raise ValueError(f"driver {driver!r} is not one of {DRIVERS}")
    inferred = driver is None
    driver = driver or driver_from(nodes)
    full = [e for e in evaluations if e.stage == FULL]
    times = sorted(e.duration for e in full)
    base = [e.score for e in full if e.node_id == 0 and e.ok and e.score is not None]
    baseline = statistics.fmean(base) if base else None
    sigma = statistics.stdev(base) if len(base) > 1 else None
    props = [n for n in nodes if n.id != 0 and n.status.is_finished()]
    scores = [n.score for n in props if n.status is NodeStatus.SUCCEEDED and n.score is not None]
    spread = statistics.stdev(scores) if len(scores) > 1 else None
    improved = None
    if baseline is not None and scores:
        margin = sigma or 0.0
        improved = sum(directed(s - baseline, maximize) > margin for s in scores) / len(scores)
    failed = sum(n.status is not NodeStatus.SUCCEEDED for n in props)
    report = PilotReport(
        n_evals=len(full),
        eval_seconds=statistics.fmean(times) if times else None,
        eval_seconds_p90=times[min(len(times) - 1, math.ceil(0.9 * len(times)) - 1)]
        if times
        else None,
        baseline=baseline,
        noise_sigma=sigma,
        spread=spread,
        improvement_rate=improved,
        failure_rate=failed / len(props) if props else None,
        n_proposals=len(props),
        driver=driver,
        driver_inferred=inferred and driver is not None,
    )
    policy, params, reasons = recommend(report, budget_evals)
    return PilotReport(
        **{**report.__dict__, "policy": policy, "params": params, "reasons": reasons}
    )


def recommend(
    report: PilotReport, budget_evals: int | None = None
) -> tuple[str, dict[str, Any], tuple[str, ...]]:
    """(policy, [search] parameters, reasons) for the measured task."""
    if report.driver == KNOBS:
        return _any_policy(report)
    params: dict[str, Any] = {}
    reasons = [
        "exts: first over the synthetic suite at budgets <= 100 (benchmarks/policies.py); "
        "it widens where children keep improving and goes deep where they do not"
    ]
    policy = "exts"
    snr = report.snr
    if report.noise_sigma and (snr is None or snr < 3):
        repeats = max(2, min(5, math.ceil((3 / snr) ** 2) if snr else 3))
        params.update(verify_top_k=2, verify_repeats=repeats, noise_z=1.0)
        reasons.append(
            f"noise sigma {report.noise_sigma:.3g} is large against the proposal spread "
            f"(ratio {snr or 0:.2g} < 3): repeat the top 2 nodes {repeats} times before "
            "exploiting them and rank by mean - 1 standard error"
        )
    if report.failure_rate is not None and report.failure_rate >= 0.3:
        params.update(max_debug_depth=3, debug_prob=0.7)
        reasons.append(
            f"{report.failure_rate:.0%} of proposals failed: debug failed leaves more often"
        )
    if report.improvement_rate is not None and report.improvement_rate < 0.1:
        params.update(base_children=3, widen=3.0)
        reasons.append(
            f"only {report.improvement_rate:.0%} of proposals beat the baseline: "
            "allow more children per node (wider search)"
        )
    if budget_evals is not None and budget_evals >= 200:
        policy = "evolution"
        params = {k: v for k, v in params.items() if k.startswith(("verify", "noise"))}
        reasons.append(
            f"a budget of {budget_evals} evaluations leaves room for islands to diverge "
            "(evolution led on deceptive landscapes)"
        )
    if report.driver is not None:
        reasons.append(BUILDS_ON_PARENT[report.driver])
    if report.eval_seconds:
        reasons.append(f"one evaluation takes {report.eval_seconds:.3g}s on average")
    return policy, params, tuple(reasons)


BUILDS_ON_PARENT: dict[str, str] = {
    KNOBS_LOCAL: "the knob proposer's local sampler perturbs the parent's values, "
    "so where the search expands matters",
    MUTATE: "code mutations edit the parent's code, so where the search expands matters",
    LLM: "LLM agents build on the parent's code, so where the search expands matters",
}


def _any_policy(report: PilotReport) -> tuple[str, dict[str, Any], tuple[str, ...]]:
    """The recommendation when the knob proposer ignores the parent: the policy does not
    change which candidates are evaluated, so ``optuna`` (any would do)."""
    source = (
        "the pilot's proposals all set knob values, so the offline Optuna knob proposer "
        "decides them"
        if report.driver_inferred
        else "this task is driven by the offline Optuna knob proposer, which decides the values"
    )
    reasons = [
        f"{source}; with its tpe "
        "(default) or random sampler a proposal ignores its parent: every policy evaluates "
        "the same candidates and scores the same, so any policy will do; optuna is the "
        "plainest",
        'for the policy to matter, set agents.knobs.sampler = "local" in the task '
        "(improvements perturb the parent's values) or use LLM agents, then run the pilot "
        "again"
        + (
            " (a task that already uses the local sampler: the policy matters, exts is the pick)"
            if report.driver_inferred
            else ""
        ),
    ]
    snr = report.snr
    if report.noise_sigma and (snr is None or snr < 3):
        reasons.append(
            f"noise sigma {report.noise_sigma:.3g} is large against the proposal spread "
            f"(ratio {snr or 0:.2g} < 3): the best score may be partly luck (a holdout "
            "re-scores it: `revtree holdout`)"
        )
    if report.failure_rate is not None and report.failure_rate >= 0.3:
        reasons.append(
            f"{report.failure_rate:.0%} of proposals failed: narrow the knob ranges that fail"
        )
    if report.eval_seconds:
        reasons.append(f"one evaluation takes {report.eval_seconds:.3g}s on average")
    return "optuna", {}, tuple(reasons)


def format_report(report: PilotReport) -> list[str]:
    """Lines for the terminal."""

    def num(x: float | None, fmt: str = ".4g") -> str:
        return "-" if x is None else format(x, fmt)

    lines = [
        f"evaluations      {report.n_evals} ({report.n_proposals} proposals)",
        f"eval time        mean {num(report.eval_seconds)}s, p90 {num(report.eval_seconds_p90)}s",
        f"baseline         {num(report.baseline)} (noise sigma {num(report.noise_sigma)})",
        f"proposal spread  {num(report.spread)} (spread / sigma {num(report.snr, '.3g')})",
        f"improvement rate {num(report.improvement_rate, '.0%')}",
        f"failure rate     {num(report.failure_rate, '.0%')}",
        " ".join(
            [f"recommended      policy = {report.policy!r}"]
            + [f"{k} = {v!r}" for k, v in report.params.items()]
            + (["(any policy: the knob proposer decides)"] if report.driver == KNOBS else [])
        ),
    ]
    return lines + [f"  because {r}" for r in report.reasons]
