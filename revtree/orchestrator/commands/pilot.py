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

Not measured: whether the landscape is deceptive or needs deep chains (a pilot only
sees one level); the recommendation falls back on the synthetic benchmark
(``benchmarks/policies.py``), where exts ranked first over the suite at small budgets.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from revtree.memory.records import EvalResult, Node, NodeStatus

FULL = "full"


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

    @property
    def snr(self) -> float | None:
        """Proposal spread over evaluation noise (None when either is unknown or 0)."""
        if not self.spread or not self.noise_sigma:
            return None
        return self.spread / self.noise_sigma


def analyse(
    nodes: list[Node],
    evaluations: list[EvalResult],
    maximize: bool,
    budget_evals: int | None = None,
) -> PilotReport:
    """Diagnostics of a finished pilot run, with a recommendation (see :func:`recommend`)."""
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
        sign = 1 if maximize else -1
        improved = sum(sign * (s - baseline) > margin for s in scores) / len(scores)
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
    )
    policy, params, reasons = recommend(report, budget_evals)
    return PilotReport(
        **{**report.__dict__, "policy": policy, "params": params, "reasons": reasons}
    )


def recommend(
    report: PilotReport, budget_evals: int | None = None
) -> tuple[str, dict[str, Any], tuple[str, ...]]:
    """(policy, [search] parameters, reasons) for the measured task."""
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
    if report.eval_seconds:
        reasons.append(f"one evaluation takes {report.eval_seconds:.3g}s on average")
    return policy, params, tuple(reasons)


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
        f"recommended      policy = {report.policy!r} "
        + " ".join(f"{k} = {v!r}" for k, v in report.params.items()),
    ]
    return lines + [f"  because {r}" for r in report.reasons]
