"""A stand-in for the parts of OpenEvolve that evaluators import: ``EvaluationResult``.

revtree's OpenEvolve runner puts this package at the end of ``sys.path``, so an installed
``openevolve`` takes precedence over it.
"""

from .evaluation_result import EVALUATION_FAILED_METRIC, EvaluationResult

__all__ = ["EVALUATION_FAILED_METRIC", "EvaluationResult"]
