"""``run_shinka_eval`` as ShinkaEvolve defines it, standard library only.

Covered: loading the program, ``num_runs`` sequential calls of the experiment function
(keyword arguments from ``get_experiment_kwargs(i)``, else ``seed=i + 1``), validation,
aggregation, timing statistics, the default metrics on error, ``extra_data`` pickled to
``extra.pkl``, and ``metrics.json`` / ``correct.json`` in ``results_dir``.

Not covered: ``plotting_fn``, early stopping and parallel runs (``run_workers``) are
accepted and ignored; every run is done, one after the other.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import statistics
import time
from collections.abc import Callable
from typing import Any

DEFAULT_METRICS_ON_ERROR: dict[str, Any] = {
    "combined_score": 0.0,
    "execution_time_mean": 0.0,
    "execution_time_std": 0.0,
    "num_successful_runs": 0,
    "num_valid_runs": 0,
    "num_invalid_runs": 0,
    "all_validation_errors": [],
}


def load_program(program_path: str) -> Any:
    """The program at ``program_path``, imported as module ``program``."""
    spec = importlib.util.spec_from_file_location("program", program_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"Could not load spec for module at {program_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jsonable(value: Any) -> Any:
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else str(value)


def save_json_results(
    results_dir: str, metrics: dict[str, Any], correct: bool, error: str | None = None
) -> None:
    """Write ``correct.json`` and ``metrics.json`` into ``results_dir``."""
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, "correct.json"), "w") as f:
        json.dump({"correct": correct, "error": error}, f, indent=4)
    with open(os.path.join(results_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=4, default=_jsonable)


def run_shinka_eval(
    program_path: str,
    results_dir: str,
    experiment_fn_name: str,
    num_runs: int,
    get_experiment_kwargs: Callable[[int], dict[str, Any]] | None = None,
    aggregate_metrics_fn: Callable[[list[Any]], dict[str, Any]] | None = None,
    validate_fn: Callable[[Any], tuple[bool, str | None]] | None = None,
    plotting_fn: Callable[[Any], list[Any]] | None = None,
    default_metrics_on_error: dict[str, Any] | None = None,
    **ignored: Any,
) -> tuple[dict[str, Any], bool, str | None]:
    """Run the experiment ``num_runs`` times, validate, aggregate and save the results.

    Returns ``(metrics, correct, first_error)``.
    """
    defaults = dict(default_metrics_on_error or DEFAULT_METRICS_ON_ERROR)
    correct, first_error = True, None
    errors: list[str] = []
    results: list[Any] = []
    times: list[float] = []
    valid = invalid = 0
    try:
        fn = getattr(load_program(program_path), experiment_fn_name, None)
        if fn is None:
            raise AttributeError(
                f"Experiment function '{experiment_fn_name}' not found in {program_path}"
            )
        for i in range(num_runs):
            kwargs = get_experiment_kwargs(i) if get_experiment_kwargs else {"seed": i + 1}
            start = time.perf_counter()
            result = fn(**kwargs)
            times.append(time.perf_counter() - start)
            results.append(result)
            if validate_fn is None:
                continue
            ok, message = validate_fn(result)
            if ok:
                valid += 1
                continue
            invalid += 1
            correct = False
            if message:
                first_error = first_error or f"Validation failed: {message}"
                if message not in errors:
                    errors.append(message)
        if aggregate_metrics_fn is not None:
            metrics = aggregate_metrics_fn(results)
        else:
            metrics = {
                "num_successful_runs": len(results),
                "first_run_result_type": str(type(results[0])) if results else "N/A",
                "raw_results_preview": str(results[:2]) if results else "N/A",
            }
        metrics["execution_time_mean"] = statistics.fmean(times) if times else 0.0
        metrics["execution_time_std"] = statistics.pstdev(times) if times else 0.0
        if validate_fn is not None:
            metrics.update(
                num_valid_runs=valid, num_invalid_runs=invalid, all_validation_errors=errors
            )
    except Exception as e:
        print(f"Evaluation error: {e}")
        metrics = {k: defaults.get(k, v) for k, v in DEFAULT_METRICS_ON_ERROR.items()}
        if validate_fn is not None:
            metrics["num_invalid_runs"] = len(results)
            metrics["all_validation_errors"] = [str(e)]
        correct, first_error = False, str(e)
    if "extra_data" in metrics:
        os.makedirs(results_dir, exist_ok=True)
        with open(os.path.join(results_dir, "extra.pkl"), "wb") as f:
            pickle.dump(metrics.pop("extra_data"), f)
    save_json_results(results_dir, metrics, correct, first_error)
    return metrics, correct, first_error
