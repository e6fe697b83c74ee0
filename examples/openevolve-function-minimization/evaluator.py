"""OpenEvolve evaluator for the function minimization example (standard library only).

evaluate_stage1 is a cheap check (one run); evaluate_stage2 is the full evaluation, which
OpenEvolve runs when stage 1 passes its threshold; evaluate returns the same metrics plus
artifacts, as an EvaluationResult.
"""

import importlib.util
import math
import random
import time

from openevolve.evaluation_result import EvaluationResult

GLOBAL_MIN = (-1.7048, 0.6752)
GLOBAL_MIN_VALUE = -1.5187
TRIALS = 8


def load(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    return program


def one_trial(program, seed):
    random.seed(seed)
    x, y, value = (float(v) for v in program.run_search())
    if not all(math.isfinite(v) for v in (x, y, value)):
        raise ValueError(f"non-finite result ({x}, {y}, {value})")
    distance = math.hypot(x - GLOBAL_MIN[0], y - GLOBAL_MIN[1])
    return x, y, value, distance


def evaluate_stage1(program_path):
    """One trial: does it run, and does it land anywhere near the minimum?"""
    _, _, value, distance = one_trial(load(program_path), seed=0)
    return {
        "runs_successfully": 1.0,
        "value_score": 1.0 / (1.0 + abs(value - GLOBAL_MIN_VALUE)),
        "distance_score": 1.0 / (1.0 + distance),
    }


def evaluate(program_path):
    """Several seeded trials: closeness of the value and the point, and reliability."""
    program = load(program_path)
    start = time.perf_counter()
    trials = [one_trial(program, seed) for seed in range(1, TRIALS + 1)]
    elapsed = time.perf_counter() - start
    value_score = sum(1.0 / (1.0 + abs(t[2] - GLOBAL_MIN_VALUE)) for t in trials) / TRIALS
    distance_score = sum(1.0 / (1.0 + t[3]) for t in trials) / TRIALS
    reliability = sum(t[3] < 0.5 for t in trials) / TRIALS
    best = min(trials, key=lambda t: t[2])
    return EvaluationResult(
        metrics={
            "value_score": value_score,
            "distance_score": distance_score,
            "reliability_score": reliability,
            "combined_score": 0.4 * value_score + 0.4 * distance_score + 0.2 * reliability,
            "seconds": elapsed,
        },
        artifacts={"best_point": f"({best[0]:.5f}, {best[1]:.5f}) -> {best[2]:.5f}"},
    )


def evaluate_stage2(program_path):
    """The full evaluation."""
    return evaluate(program_path)
