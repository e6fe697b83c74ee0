"""OpenEvolve evaluator with a cascade: a cheap stage 1, then the full evaluation.

The baseline scores 0.29 at stage 1, below the first threshold (0.5): in OpenEvolve (and
in revtree, which maps the folder with ``evaluate.cascade = "keep"``) it keeps that score
and stops there. Both stages return artifacts that the agents read.
"""

import importlib.util

from openevolve.evaluation_result import EvaluationResult

TARGET = 3.0


def _guess(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return float(module.guess())


def _score(value):
    return 1.0 / (1.0 + abs(value - TARGET))


def evaluate_stage1(program_path):
    value = _guess(program_path)
    hint = "higher" if value < TARGET else "lower" if value > TARGET else "exact"
    return EvaluationResult(
        metrics={"combined_score": _score(value)},
        artifacts={"feedback": f"guess {value:g}: the hidden number is {hint}"},
    )


def evaluate(program_path):
    value = _guess(program_path)
    return EvaluationResult(
        metrics={"combined_score": _score(value), "error": abs(value - TARGET)},
        artifacts={"feedback": f"guess {value:g} is {abs(value - TARGET):g} away"},
    )
