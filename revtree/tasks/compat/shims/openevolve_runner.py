"""Run one function of an OpenEvolve ``evaluator.py`` and report revtree metrics.

Usage, in the evaluation workspace:
``python _revtree_openevolve_runner.py FUNCTION [PROGRAM] [--no-artifacts]``, where FUNCTION
is ``evaluate`` or ``evaluate_stage1`` / ``2`` / ``3`` and PROGRAM the program file
(default ``initial_program.py``; any language: the evaluator compiles or runs it). The
function is called with the program's absolute path, as OpenEvolve does. Its result (a
dict or an ``EvaluationResult``) becomes one JSON object, written to file descriptor 3
(revtree's metrics channel) and printed as the last line of stdout (a log: revtree reads
fd 3):

- every metric, made JSON-safe (numpy values become numbers or lists, other objects
  strings, long strings truncated);
- ``combined_score``: the evaluator's own when it is a number, else the mean of the
  numeric metrics except ``error`` (OpenEvolve's fallback), with ``combined_score_is_mean``
  set to true;
- ``artifacts``: the artifacts as strings, each truncated (none with ``--no-artifacts``).
  On stdout they are printed before that line instead, one ``### name`` section each, as
  OpenEvolve shows them to its model: the agents read them in the evaluation's output.

A function that raises, a missing function or a result that is neither a dict nor an
``EvaluationResult`` exits with code 1, the traceback and then a one-line reason on stderr.

Standard library only, Python 3.8 or later: this file runs under the sandbox's Python,
where revtree is not installed. ``openevolve.evaluation_result`` resolves to an installed
OpenEvolve if there is one, else to the shim in ``_revtree_compat/``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import traceback
from typing import Any

PROGRAM = "initial_program.py"
EVALUATOR = "evaluator.py"
SHIMS = "_revtree_compat"
FUNCTIONS = ("evaluate", "evaluate_stage1", "evaluate_stage2", "evaluate_stage3")
MAX_CHARS = 8000
MAX_JSON = 900_000
METRICS_FD = 3  # revtree's metrics channel


class Failure(Exception):
    """The evaluation failed; the message says why."""


def truncate(text: str, limit: int = MAX_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [{len(text) - limit} more characters]"


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-safe data: numpy scalars and arrays via ``tolist``, else ``str``."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return truncate(value)
    if isinstance(value, bytes):
        return truncate(value.decode("utf-8", errors="replace"))
    if depth > 20:
        return truncate(repr(value))
    if isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v, depth + 1) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        try:
            return plain(tolist(), depth + 1)
        except Exception:
            pass
    return truncate(str(value))


def is_number(value: Any) -> bool:
    """A number as OpenEvolve counts them (``bool`` included)."""
    return isinstance(value, (int, float))


def to_metrics(result: Any, function: str) -> dict[str, Any]:
    """The revtree metrics of one evaluator result."""
    artifacts: Any = {}
    if isinstance(result, dict):
        metrics = result
    elif isinstance(getattr(result, "metrics", None), dict):
        metrics, artifacts = result.metrics, getattr(result, "artifacts", None) or {}
    else:
        raise Failure(
            f"{function}() returned {type(result).__name__}, expected a dict or an EvaluationResult"
        )
    out = {str(k): plain(v) for k, v in metrics.items()}
    if not is_number(out.get("combined_score")):
        values = [
            float(v)
            for k, v in out.items()
            if k != "error" and is_number(v) and not math.isnan(float(v))
        ]
        if not values:
            raise Failure(
                f"{function}() returned no numeric metric to score "
                f"(keys: {sorted(out)[:10]}); return a 'combined_score'"
            )
        if "combined_score" in out:
            out["combined_score_reported"] = out["combined_score"]
        out["combined_score"] = sum(values) / len(values)
        out["combined_score_is_mean"] = True
    if artifacts:
        out["artifacts"] = {str(k): plain(v) for k, v in dict(artifacts).items()}
    return out


def load_evaluator(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("evaluation_module", path)
    if spec is None or spec.loader is None:
        raise Failure(f"cannot load {EVALUATOR}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["evaluation_module"] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        traceback.print_exc()
        raise Failure(f"importing {EVALUATOR} raised {type(e).__name__}: {e}") from e
    return module


def run(function: str, here: str, program: str = PROGRAM) -> dict[str, Any]:
    """Call ``function`` of the evaluator in ``here`` on ``program`` there."""
    if function not in FUNCTIONS:
        raise Failure(f"unknown function {function!r}; expected one of {FUNCTIONS}")
    module = load_evaluator(os.path.join(here, EVALUATOR))
    fn = getattr(module, function, None)
    if not callable(fn):
        raise Failure(f"{EVALUATOR} defines no function {function}(program_path)")
    try:
        result = fn(os.path.join(here, program))
    except (Exception, SystemExit) as e:
        traceback.print_exc()
        raise Failure(f"{function}() raised {type(e).__name__}: {e}") from e
    return to_metrics(result, function)


def show_artifacts(artifacts: Any) -> None:
    """The artifacts, readable, on stdout: the agents see them in the evaluation's output."""
    if not isinstance(artifacts, dict):
        return
    for name, value in artifacts.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        print(f"### {name}\n{text.rstrip()}")


def report(metrics: dict[str, Any]) -> None:
    show_artifacts(metrics.get("artifacts"))
    text = json.dumps(metrics, default=str)
    if len(text) > MAX_JSON and "artifacts" in metrics:
        metrics = {**metrics, "artifacts": {"note": "dropped: the metrics were too large"}}
        text = json.dumps(metrics, default=str)
    if len(text) > MAX_JSON:
        raise Failure(f"the metrics are too large ({len(text)} characters of JSON)")
    write_metrics(text)
    sys.stdout.flush()
    if "artifacts" in metrics:
        text = json.dumps({k: v for k, v in metrics.items() if k != "artifacts"}, default=str)
    print(text)


def write_metrics(text: str) -> None:
    """The metrics to file descriptor 3, if open (it is in every revtree sandbox)."""
    data = text.encode("utf-8")
    try:
        while data:
            data = data[os.write(METRICS_FD, data) :]
    except OSError:
        pass  # not run by revtree: the printed line stands alone


def main(argv: list[str]) -> int:
    artifacts = "--no-artifacts" not in argv
    args = [a for a in argv if a != "--no-artifacts"]
    if not 1 <= len(args) <= 2 or any(a.startswith("-") for a in args):
        print(
            f"usage: python {os.path.basename(__file__)} FUNCTION [PROGRAM] [--no-artifacts]",
            file=sys.stderr,
        )
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.append(os.path.join(here, SHIMS))
    try:
        metrics = run(args[0], here, *args[1:])
        if not artifacts:
            metrics.pop("artifacts", None)
        report(metrics)
    except Failure as e:
        sys.stdout.flush()
        print("revtree: " + " ".join(str(e).splitlines()), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # threads an evaluator left running must not hold the process
