"""The evaluator: runs a candidate's stages and repeats in a sandbox and reads the metrics.

Metrics protocol: the evaluated command writes a JSON object to the file named by
``$REVTREE_METRICS``, or prints it as the last non-empty line of stdout. The task's
metric must be a finite number in it. Anything else (a crash, a timeout, no JSON, a
missing, non-numeric or NaN metric) makes a failed evaluation whose ``error`` says
why; nothing raises out of :meth:`Evaluator.evaluate` but ``Cancelled``.

Each (stage, repeat) already in ``done`` is reused, never run again, and each new
result is handed to ``record`` as soon as it exists, so a resumed candidate loses
nothing and repeats nothing.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from revtree.memory.records import EvalResult
from revtree.sandboxes.base import ExecRequest, ExecResult, Limits, Sandbox
from revtree.tasks.spec import TaskSpec

TAIL = 4000
FULL = "full"
HOLDOUT = "holdout"


@dataclass(frozen=True)
class Outcome:
    """The verdict on a node after all its stages."""

    ok: bool
    score: float | None
    score_std: float | None
    n_evals: int
    error: str | None = None
    error_kind: str | None = None
    sandbox_seconds: float = 0.0


def parse_metrics(
    result: ExecResult, metric: str
) -> tuple[dict[str, Any], float | None, str | None]:
    """(metrics, score, error) from a finished execution."""
    text = result.metrics_text
    source = "$REVTREE_METRICS"
    if text is None or not text.strip():
        lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
        text, source = (lines[-1] if lines else ""), "the last stdout line"
    try:
        metrics = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return {}, None, f"no metrics: {source} is not JSON ({text[-120:]!r})"
    if not isinstance(metrics, dict):
        return {}, None, f"metrics in {source} must be a JSON object, got {type(metrics).__name__}"
    if metric not in metrics:
        return (
            metrics,
            None,
            f"metric {metric!r} missing from metrics (keys: {sorted(metrics)[:10]})",
        )
    value = metrics[metric]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return metrics, None, f"metric {metric!r} is not a number: {value!r:.80}"
    if not math.isfinite(value):
        return metrics, None, f"metric {metric!r} is {value} (not finite)"
    return metrics, float(value), None


def _failure(result: ExecResult, timeout: float) -> tuple[str, str] | None:
    if result.timed_out:
        return "timeout", f"killed after the {timeout:g}s timeout"
    if result.exit_code != 0:
        last = next((ln for ln in reversed(result.stderr.splitlines()) if ln.strip()), "")
        return "crash", f"exit code {result.exit_code}" + (f": {last[-300:]}" if last else "")
    return None


class Evaluator:
    """Runs the task's evaluation cascade for one node."""

    def __init__(self, spec: TaskSpec, sandbox: Sandbox, log_dir: Path | None = None) -> None:
        self.spec, self.sandbox, self.log_dir = spec, sandbox, log_dir
        sb = spec.sandbox
        self.base_env = {**{k: os.environ[k] for k in sb.pass_env if k in os.environ}, **sb.env}

    def run_one(
        self,
        node_id: int,
        archive: bytes,
        stage: str,
        repeat: int,
        command: str,
        metric: str,
        timeout: float,
        cancel: threading.Event | None,
        labels: Mapping[str, str] | None = None,
    ) -> EvalResult:
        sb = self.spec.sandbox
        env = {
            **self.base_env,
            "REVTREE_NODE": str(node_id),
            "REVTREE_STAGE": stage,
            "REVTREE_REPEAT": str(repeat),
            "REVTREE_SEED": str(self.spec.search.seed + repeat),
        }
        limits = Limits(
            timeout=timeout,
            memory_bytes=sb.memory,
            cpu_seconds=sb.cpu_seconds,
            output_cap=sb.output_cap,
        )
        request = ExecRequest(archive, command, limits, env, dict(labels or {}))
        result = self.sandbox.execute(request, cancel)
        metrics, score, error = parse_metrics(result, metric)
        kind = "metrics" if error else None
        if (failure := _failure(result, timeout)) is not None:
            kind, error = failure
        return EvalResult(
            node_id=node_id,
            stage=stage,
            repeat=repeat,
            ok=error is None,
            score=score,
            metrics=_jsonable(metrics),
            exit_code=result.exit_code,
            duration=result.duration,
            stdout_tail=result.stdout[-TAIL:],
            stderr_tail=result.stderr[-TAIL:],
            error=error,
            error_kind=kind,
            log_path=self._log(node_id, stage, repeat, command, result, error),
        )

    def _log(
        self,
        node_id: int,
        stage: str,
        repeat: int,
        command: str,
        result: ExecResult,
        error: str | None,
    ) -> str | None:
        """The whole captured output in a file (the database keeps only tails)."""
        if self.log_dir is None:
            return None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"node{node_id}-{stage}-{repeat}.log"
        path.write_text(
            f"$ {command}\nexit code: {result.exit_code}  duration: {result.duration:.3f}s  "
            f"timed out: {result.timed_out}  truncated: {result.truncated}\n"
            f"error: {error}\n--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}\n",
            encoding="utf-8",
            errors="replace",
        )
        return str(path)

    def evaluate(
        self,
        node_id: int,
        archive: bytes,
        done: Mapping[tuple[str, int], EvalResult],
        record: Callable[[EvalResult], None],
        cancel: threading.Event | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Outcome:
        ev = self.spec.evaluate
        results: list[EvalResult] = []

        def run(stage: str, repeat: int, command: str, metric: str, timeout: float) -> EvalResult:
            res = done.get((stage, repeat))
            if res is None:
                res = self.run_one(
                    node_id, archive, stage, repeat, command, metric, timeout, cancel, labels
                )
                record(res)
            results.append(res)
            return res

        for st in ev.stages:
            res = run(st.name, 0, st.command, st.metric or ev.metric, st.timeout or ev.timeout)
            if not res.ok:
                return self._outcome(results, f"stage {st.name!r}: {res.error}", res.error_kind)
            assert res.score is not None
            better = res.score >= st.threshold if self.spec.maximize else res.score <= st.threshold
            if not better:
                msg = (
                    f"stage {st.name!r}: {res.score:.6g} does not reach threshold {st.threshold:g}"
                )
                return self._outcome(results, msg, "gated")
        scores = []
        for r in range(ev.repeats):
            res = run(FULL, r, ev.command, ev.metric, ev.timeout)
            if not res.ok:
                return self._outcome(results, f"repeat {r}: {res.error}", res.error_kind)
            assert res.score is not None
            scores.append(res.score)
        std = statistics.stdev(scores) if len(scores) > 1 else None
        return self._outcome(results, None, None, statistics.fmean(scores), std)

    def _outcome(
        self,
        results: list[EvalResult],
        error: str | None,
        kind: str | None,
        score: float | None = None,
        std: float | None = None,
    ) -> Outcome:
        return Outcome(
            ok=error is None,
            score=score,
            score_std=std,
            n_evals=len(results),
            error=error,
            error_kind=kind,
            sandbox_seconds=sum(r.duration for r in results),
        )

    def holdout(
        self, node_id: int, archive: bytes, cancel: threading.Event | None = None
    ) -> EvalResult | None:
        h = self.spec.holdout
        if h is None:
            return None
        metric, timeout = (
            h.metric or self.spec.evaluate.metric,
            h.timeout or self.spec.evaluate.timeout,
        )
        return self.run_one(node_id, archive, HOLDOUT, 0, h.command, metric, timeout, cancel)


def _jsonable(metrics: dict[str, Any]) -> dict[str, Any]:
    """Metrics as storable JSON (NaN and infinities become strings)."""

    def fix(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return str(v)
        if isinstance(v, dict):
            return {str(k): fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        return v

    out: dict[str, Any] = fix(metrics)
    return out
