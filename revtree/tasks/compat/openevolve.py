"""OpenEvolve task folders, unchanged: ``initial_program.py``, ``evaluator.py``, ``config.yaml``.

The mapping onto a :class:`TaskSpec`:

- ``initial_program.py`` is editable, ``evaluator.py`` protected; other files are context
  the agents may read but not change. ``config.yaml`` stays out of the repository (it may
  hold an API key) and so does ``openevolve_output/``.
- Scoring: each stage runs ``python _revtree_openevolve_runner.py FUNCTION``, which calls
  that evaluator function on the program and reports ``combined_score`` (OpenEvolve's
  fitness; the mean of the numeric metrics when the evaluator gives none), maximized.
- Cascade: when ``evaluator.cascade_evaluation`` is on (OpenEvolve's default) and the
  evaluator defines ``evaluate_stage1``, that stage gates at ``cascade_thresholds[0]``, then
  ``evaluate_stage2`` at ``cascade_thresholds[1]``, then ``evaluate()`` gives the score. A
  stage function that only returns ``evaluate(program_path)`` is not run twice.

What differs from OpenEvolve: each stage is gated on its own metrics (OpenEvolve merges a
stage's metrics with the earlier ones); the score always comes from ``evaluate()`` (in
OpenEvolve's cascade, from the last stage reached, and ``evaluate()`` is not called), so
``evaluate_stage3`` is not run; a candidate below a threshold fails as "gated" (OpenEvolve
keeps its stage metrics as its score); an evaluator that raises or times out fails the
candidate (OpenEvolve scores it 0 after ``max_retries``).

``config.yaml`` keys with a revtree counterpart: ``max_iterations`` (``budget.max_nodes``,
plus one for the root), ``random_seed`` (``search.seed``), ``evaluator.timeout`` (default
300 s, OpenEvolve's), ``evaluator.parallel_evaluations`` (``search.parallel``),
``evaluator.cascade_evaluation`` and ``evaluator.cascade_thresholds``, and
``prompt.system_message`` (``goal``). Every other key is named in a warning.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

from revtree.errors import TaskSpecError
from revtree.tasks.compat._common import (
    SHIMS,
    default_goal,
    has_key,
    leaf_keys,
    parse_python,
    read_yaml,
    support_files,
    task_name,
    top_level_names,
)
from revtree.tasks.load import spec_from_dict
from revtree.tasks.spec import TaskSpec

PROGRAM = "initial_program.py"
EVALUATOR = "evaluator.py"
CONFIG = "config.yaml"
RUNNER = "_revtree_openevolve_runner.py"
SUPPORT = {
    RUNNER: "openevolve_runner.py",
    f"{SHIMS}/openevolve/__init__.py": "openevolve/__init__.py",
    f"{SHIMS}/openevolve/evaluation_result.py": "openevolve/evaluation_result.py",
}
DEFAULT_THRESHOLDS = (0.5, 0.75)
DEFAULT_TIMEOUT = 300.0
SECTIONS = ("llm", "prompt", "database", "evaluator", "evolution_trace")


def is_openevolve(folder: Path) -> bool:
    return (folder / PROGRAM).is_file() and (folder / EVALUATOR).is_file()


def command(function: str) -> str:
    return f"python {RUNNER} {function}"


def load_openevolve(path: str | Path) -> tuple[TaskSpec, list[str]]:
    """The task of an OpenEvolve folder, and warnings naming what is not carried over."""
    folder = Path(path).expanduser().resolve()
    for name in (PROGRAM, EVALUATOR):
        if not (folder / name).is_file():
            raise TaskSpecError(
                f"{folder / name}: no such file (an OpenEvolve task folder holds "
                f"{PROGRAM} and {EVALUATOR})"
            )
    evaluator = folder / EVALUATOR
    functions, star = top_level_names(parse_python(evaluator))
    if "evaluate" not in functions and not star:
        raise TaskSpecError(
            f"{evaluator}: defines no function 'evaluate(program_path)', "
            "which OpenEvolve calls to score a program"
        )
    config_file = folder / CONFIG
    config = _Config(read_yaml(config_file) if config_file.is_file() else {}, config_file)
    stages, notes = _stages(functions, config, evaluator)
    data: dict[str, Any] = {
        "name": task_name(folder),
        "goal": _goal(config, folder),
        "editable": [PROGRAM],
        "protected": [EVALUATOR],
        "exclude": [CONFIG, "openevolve_output/**"],
        "evaluate": {
            "command": command("evaluate"),
            "metric": "combined_score",
            "direction": "maximize",
            "timeout": config.get("evaluator.timeout", _positive, "a positive number of seconds")
            or DEFAULT_TIMEOUT,
            "stages": stages,
        },
        "support_files": support_files(SUPPORT),
    }
    search = {
        "seed": config.get("random_seed", _int, "an integer"),
        "parallel": config.get("evaluator.parallel_evaluations", _parallel, "an integer 1..256"),
    }
    if search := {k: v for k, v in search.items() if v is not None}:
        data["search"] = search
    iterations = config.get("max_iterations", _count, "a non-negative integer")
    if iterations is not None:
        data["budget"] = {"max_nodes": iterations + 1}
    spec = spec_from_dict(data, config_file if config_file.is_file() else evaluator)
    return spec, [*config.ignored(), *notes]


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _count(v: Any) -> bool:
    return _int(v) and v >= 0


def _parallel(v: Any) -> bool:
    return _int(v) and 1 <= v <= 256


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _positive(v: Any) -> bool:
    return _number(v) and v > 0


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _thresholds(v: Any) -> bool:
    return isinstance(v, list) and len(v) > 0 and all(_number(x) for x in v)


class _Config:
    """The settings of config.yaml, type-checked on access; keys never read are ignored."""

    def __init__(self, data: dict[str, Any], file: Path) -> None:
        self.data, self.file = data, file
        self.used: set[str] = set()
        for section in SECTIONS:
            if data.get(section) is not None and not isinstance(data[section], dict):
                raise TaskSpecError(f"{file}: key '{section}': expected a mapping of settings")

    def get(self, key: str, check: Callable[[Any], bool], expected: str) -> Any:
        """The value at dotted ``key``, None when absent; raises when it fails ``check``."""
        self.used.add(key)
        value: Any = self.data
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        if value is not None and not check(value):
            raise TaskSpecError(f"{self.file}: key '{key}': expected {expected}, got {value!r:.80}")
        return value

    def ignored(self) -> list[str]:
        """One warning per section, naming every key that was not used."""
        groups: dict[str, list[str]] = {}
        for key in leaf_keys(self.data):
            if key not in self.used:
                groups.setdefault(key.split(".")[0] if "." in key else "", []).append(key)
        out = []
        for section, keys in groups.items():
            names = ", ".join(keys)
            if section == "llm":
                secret = (
                    " (API keys in config.yaml are never read)"
                    if has_key(self.data["llm"], "api_key")
                    else ""
                )
                out.append(
                    f"{self.file}: LLM settings are not used yet; revtree's agents take their "
                    f"models from the task's [agents] settings{secret}: {names}"
                )
            else:
                what = f"'{section}' settings" if section else "settings"
                out.append(f"{self.file}: {what} without a revtree counterpart, ignored: {names}")
        return out


def _goal(config: _Config, folder: Path) -> str:
    message = config.get("prompt.system_message", _str, "a string")
    if message and " " in message.strip():
        return str(message).strip()
    if message:  # the name of a prompt template, not a text
        config.used.discard("prompt.system_message")
    return default_goal(folder, PROGRAM, EVALUATOR)


def _stages(
    functions: dict[str, ast.AST], config: _Config, evaluator: Path
) -> tuple[list[dict[str, Any]], list[str]]:
    """The gating stages, and notes on the stage functions that are not run."""
    cascade = config.get("evaluator.cascade_evaluation", _bool, "true or false")
    thresholds = config.get(
        "evaluator.cascade_thresholds", _thresholds, "a non-empty list of numbers"
    ) or list(DEFAULT_THRESHOLDS)
    if cascade is False or "evaluate_stage1" not in functions:
        return [], []
    stages, notes = [], []
    for i, function in enumerate(("evaluate_stage1", "evaluate_stage2")):
        if function not in functions or _returns_evaluate(functions[function]):
            continue
        if i >= len(thresholds):
            notes.append(
                f"{evaluator}: {function} is not run: evaluator.cascade_thresholds "
                f"has no value for it"
            )
            continue
        stages.append(
            {"name": f"stage{i + 1}", "command": command(function), "threshold": thresholds[i]}
        )
    if "evaluate_stage3" in functions and not _returns_evaluate(functions["evaluate_stage3"]):
        notes.append(
            f"{evaluator}: evaluate_stage3 is not run: revtree scores with evaluate() "
            "once the earlier stages pass"
        )
    return stages, notes


def _returns_evaluate(node: ast.AST) -> bool:
    """Whether a stage function is just ``evaluate``: an alias, or a body that only
    returns ``evaluate(program_path, ...)``."""
    if isinstance(node, ast.Name):
        return node.id == "evaluate"
    if not isinstance(node, ast.FunctionDef) or not node.args.args:
        return False
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return False
    call = body[0].value
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "evaluate"
        and bool(call.args)
        and isinstance(call.args[0], ast.Name)
        and call.args[0].id == node.args.args[0].arg
    )
