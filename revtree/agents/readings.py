"""What an execution of the evaluator says: its metrics (file descriptor 3, or the last
stdout line where the task allows it), the score in them, and why a run failed."""

from __future__ import annotations

import json
import math
from typing import Any

from revtree.memory.records import EvalResult, finite_mean, score_problem
from revtree.sandboxes.base import METRICS_FD, ExecResult

HOW_TO_REPORT = (
    f"write the metrics as one JSON object to file descriptor {METRICS_FD}: "
    f"os.write({METRICS_FD}, json.dumps(metrics).encode()) or "
    f'with open({METRICS_FD}, "w") as f: json.dump(metrics, f)'
)


def mean_metrics(results: list[EvalResult]) -> dict[str, float]:
    """The finite numeric metrics of ``results``, each averaged over those reporting it."""
    values: dict[str, list[float]] = {}
    for r in results:
        for k, v in r.metrics.items():
            if isinstance(v, int | float) and not isinstance(v, bool) and _finite(v):
                values.setdefault(k, []).append(float(v))
    means = {k: finite_mean(v) for k, v in values.items()}  # huge values do not overflow
    return {k: m for k, m in means.items() if m is not None}


def _finite(v: float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer beyond the largest double
        return False


def parse_metrics(
    result: ExecResult, metric: str, stdout: bool = False
) -> tuple[dict[str, Any], float | None, str | None]:
    """(metrics, score, error) from a finished execution: what it wrote to file
    descriptor 3, else, only when ``stdout`` allows it, its last non-empty stdout line."""
    text = result.metrics_text
    source = f"file descriptor {METRICS_FD}"
    if text is None or not text.strip():
        if not stdout:
            return (
                {},
                None,
                f"no metrics: nothing was written to file descriptor {METRICS_FD}; "
                f"{HOW_TO_REPORT}; or set [evaluate] stdout_metrics = true to read the last "
                "stdout line (which any code the command runs can forge)",
            )
        lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
        text, source = (lines[-1] if lines else ""), "the last stdout line"
    try:
        metrics = json.loads(text)
    except (ValueError, RecursionError):  # ValueError: also an integer of 4,300+ digits
        hint = f"; {HOW_TO_REPORT}" if not text.strip() else ""
        return {}, None, f"no metrics: {source} is not JSON ({text[-120:]!r}){hint}"
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
    try:
        value = float(value)  # an integer beyond the largest double does not convert
    except OverflowError:
        value = math.inf if value > 0 else -math.inf
    if (problem := score_problem(metric, value)) is not None:
        return metrics, None, problem
    return metrics, float(value), None


def failure_of(result: ExecResult, timeout: float) -> tuple[str, str] | None:
    if result.timed_out:
        return "timeout", f"killed after the {timeout:g}s timeout"
    if result.exit_code != 0:
        last = next((ln for ln in reversed(result.stderr.splitlines()) if ln.strip()), "")
        return "crash", f"exit code {result.exit_code}" + (f": {last[-300:]}" if last else "")
    return None
