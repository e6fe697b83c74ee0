"""Run a ShinkaEvolve ``evaluate.py`` on ``initial.py`` and report revtree metrics.

Usage, in the evaluation workspace: ``python _revtree_shinka_runner.py [PROGRAM]``
(default ``initial.py``; a program in another language is handed over by path the same
way). It runs ``python evaluate.py --program_path PROGRAM --results_dir DIR`` with a fresh
temporary
DIR (the evaluator's output goes to this process's stdout and stderr), then reads
``DIR/correct.json`` and ``DIR/metrics.json``:

- ``correct`` true: the metrics (``combined_score``, ``public``, ``private``,
  ``text_feedback``, ...), made JSON-safe with long strings truncated, are written to
  file descriptor 3 (revtree's metrics channel) and printed as the last line of stdout
  (a log: revtree reads fd 3); exit code 0.
- ``correct`` false: the same metrics are written, and the process exits with code 1 and
  the evaluator's error as the last line of stderr.
- ``evaluate.py`` failing, or a missing or malformed results file: exit code 1 with the
  reason as the last line of stderr.

Standard library only, Python 3.8 or later: this file runs under the sandbox's Python,
where revtree is not installed. When no ``shinka`` package is installed there, the shim in
``_revtree_compat/`` stands in for ``shinka.core.run_shinka_eval``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

PROGRAM = "initial.py"
EVALUATOR = "evaluate.py"
SHIMS = "_revtree_compat"
MAX_CHARS = 8000
MAX_JSON = 900_000
METRICS_FD = 3  # revtree's metrics channel


class Failure(Exception):
    """The evaluation failed; the message says why."""


def truncate(text: str, limit: int = MAX_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"... [{len(text) - limit} more characters]"


def plain(value: Any) -> Any:
    """Parsed JSON with every string truncated."""
    if isinstance(value, str):
        return truncate(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def evaluator_env(here: str) -> dict[str, str]:
    """This process's environment, plus the shinka shim when no shinka is installed."""
    env = dict(os.environ)
    if importlib.util.find_spec("shinka") is None:
        shims = os.path.join(here, SHIMS)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), shims) if p)
    return env


def read_json(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise Failure(f"{EVALUATOR} wrote no {what}") from None
    except (OSError, ValueError) as e:
        raise Failure(f"{EVALUATOR} wrote an unreadable {what}: {e}") from e


def evaluate(here: str, results: str, program: str = PROGRAM) -> tuple[dict[str, Any], str | None]:
    """(metrics, error): ``error`` is None when the program is correct."""
    command = [sys.executable, EVALUATOR, "--program_path", program, "--results_dir", results]
    sys.stdout.flush()
    code = subprocess.call(command, cwd=here, env=evaluator_env(here))
    if code != 0:
        raise Failure(f"{EVALUATOR} exited with code {code}")
    verdict = read_json(os.path.join(results, "correct.json"), "correct.json")
    metrics = read_json(os.path.join(results, "metrics.json"), "metrics.json")
    if not isinstance(verdict, dict) or not isinstance(verdict.get("correct"), bool):
        raise Failure(f'correct.json must hold {{"correct": true or false}}, got {verdict!r:.200}')
    if not isinstance(metrics, dict):
        raise Failure(f"metrics.json must hold a JSON object, got {type(metrics).__name__}")
    error = None if verdict["correct"] else str(verdict.get("error") or "no error message")
    return plain(metrics), error


def report(metrics: dict[str, Any]) -> None:
    text = json.dumps(metrics)
    if len(text) > MAX_JSON:
        raise Failure(f"metrics.json is too large ({len(text)} characters)")
    write_metrics(text)
    sys.stdout.flush()
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
    if len(argv) > 1:
        print(f"usage: python {os.path.basename(__file__)} [PROGRAM]", file=sys.stderr)
        return 2
    program = argv[0] if argv else PROGRAM
    here = os.path.dirname(os.path.abspath(__file__))
    results = tempfile.mkdtemp(prefix="shinka-results-")
    try:
        metrics, error = evaluate(here, results, program)
        report(metrics)
        if error is not None:
            raise Failure(f"{program} is not correct: {truncate(error, 2000)}")
    except Failure as e:
        sys.stdout.flush()
        print("revtree: " + " ".join(str(e).splitlines()), file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(results, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
