"""OpenEvolve task folders, unchanged: ``initial_program.*``, ``evaluator.py``, ``config.yaml``.

The mapping onto a :class:`TaskSpec`:

- The program is ``initial_program.py``, or the one ``initial_program.*`` of another
  language (``.rs``, ``.go``, ``.jl``, ``.f90``, ``.cpp``, ``.js``, ...; ``file_suffix`` in
  config.yaml picks one); it is editable, and a non-Python program's language is named in
  the goal. ``evaluator.py`` is protected; other files are context the agents may read but
  not change. ``config.yaml`` stays out of the repository (it may hold an API key) and so
  does ``openevolve_output/``.
- Scoring: each stage runs ``python _revtree_openevolve_runner.py FUNCTION [PROGRAM]``,
  which calls that evaluator function on the program's absolute path, whatever its
  language (as OpenEvolve does), and reports ``combined_score`` (OpenEvolve's fitness; the
  mean of the numeric metrics when the evaluator gives none), maximized. Artifacts
  (``EvaluationResult.artifacts``) go into the metrics and are printed as the evaluation's
  output, which the agents read with the parent's evaluation.
- Cascade, with OpenEvolve's meaning (``evaluate.cascade = "keep"``): when
  ``evaluator.cascade_evaluation`` is on (OpenEvolve's default) and the evaluator defines
  ``evaluate_stage1``, a program below ``cascade_thresholds[0]`` keeps stage 1's score and
  stops there; above it, ``evaluate_stage2`` with ``cascade_thresholds[1]`` likewise, then
  ``evaluate()`` gives the score. A stage function that only returns
  ``evaluate(program_path)`` is not run twice.
- One model call per candidate (``agents.calls = "one"``), as OpenEvolve makes.

What differs from OpenEvolve: each stage is judged on its own metrics (OpenEvolve merges a
stage's metrics with the earlier ones); past the last stage the score comes from
``evaluate()`` (OpenEvolve returns the last stage's result and does not call it), so
``evaluate_stage3`` is not run; an evaluator that raises or times out fails the candidate
(OpenEvolve scores it 0 after ``max_retries``).

``config.yaml`` keys with a revtree counterpart (the loader lists what it mapped; every
other key is named in a warning): ``max_iterations`` (``budget.max_nodes``, plus one for
the root), ``random_seed`` / ``database.random_seed`` (``search.seed``), ``language``,
``file_suffix``, ``diff_based_evolution`` (false: ``agents.edit_format = "whole_file"``);
``llm.models`` / ``primary_model`` / ``secondary_model`` with their weights (the heaviest is
``agents.model``; several make the coder's weighted ensemble), ``llm.api_base``
(``agents.base_url``, and ``openai-compatible:`` models unless it is OpenAI's),
``llm.temperature``, ``max_tokens``, ``timeout`` and ``retries``; ``prompt.system_message``
(``goal``), ``prompt.include_artifacts`` and ``evaluator.enable_artifacts``;
``evaluator.timeout`` (default 300 s, OpenEvolve's), ``parallel_evaluations``
(``search.parallel``), ``cascade_evaluation`` and ``cascade_thresholds``;
``database.num_islands``, ``migration_interval``, ``migration_rate``, ``archive_size``,
``exploration_ratio`` and ``exploitation_ratio`` (floats in [0, 1]; exploitation gets at
most what exploration leaves, as OpenEvolve's single draw gives it),
``feature_dimensions`` and ``feature_bins`` set ``[search] policy = "evolution"``. API
keys are never read.

MAP-Elites features: each of ``feature_dimensions`` becomes one of the evolution
policy's features, with its own bins (``feature_bins``: one number, or a table per
dimension; OpenEvolve's 10 for a dimension the table leaves out; OpenEvolve's default
dimensions ``complexity`` and ``diversity`` when only the bins are given):
``complexity`` is ``code_size`` (characters of the program, OpenEvolve's ``len(code)``),
``diversity`` is ``drift`` (lines changed from the baseline: the nearest cheap measure
of OpenEvolve's edit distance to a reference set of programs), ``score`` is the node's
score, and any other name the evaluator metric ``metric:NAME``; like OpenEvolve's, they
are scaled between the lowest and highest value seen so far. Unlike OpenEvolve, an
evaluator metric named ``complexity`` or ``diversity`` does not replace the built-in one.

Every key of OpenEvolve's ``Config`` is in :mod:`~revtree.tasks.compat.keys`, mapped or
named in a warning; a value OpenEvolve's schema takes but outside revtree's range (a
temperature of 3, ``max_tokens: 8``, ``parallel_evaluations: 0``) is named in the
warning with revtree's range, not refused.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from revtree.errors import TaskSpecError
from revtree.tasks.compat._common import (
    OPENAI_URL,
    SHIMS,
    Loaded,
    Settings,
    default_goal,
    find_program,
    is_bool,
    is_count,
    is_int,
    is_max_tokens,
    is_model_list,
    is_number,
    is_parallel,
    is_positive,
    is_positive_int,
    is_ratio,
    is_retries,
    is_str,
    is_str_list,
    is_suffix,
    is_temperature,
    is_thresholds,
    language_note,
    model_name,
    parse_python,
    read_yaml,
    support_files,
    task_name,
    top_level_names,
)
from revtree.tasks.load import spec_from_dict

STEM = "initial_program"
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
#: OpenEvolve's built-in feature dimensions -> revtree's evolution features (any other
#: name is an evaluator metric: ``metric:NAME``)
FEATURES = {"complexity": "code_size", "diversity": "drift", "score": "score"}
OPENEVOLVE_BINS = 10  # OpenEvolve's feature_bins default, also for a dimension a table omits
#: database keys of the same name and meaning in revtree's evolution policy
DATABASE = (
    "num_islands",
    "migration_interval",
    "migration_rate",
    "archive_size",
    "exploration_ratio",
    "exploitation_ratio",
)


def is_openevolve(folder: Path) -> bool:
    return (folder / EVALUATOR).is_file() and find_program(folder, STEM) is not None


def command(function: str, program: str = PROGRAM, artifacts: bool = True) -> str:
    extra = ("" if program == PROGRAM else f" {program}") + ("" if artifacts else " --no-artifacts")
    return f"python {RUNNER} {function}{extra}"


def load_openevolve(path: str | Path) -> Loaded:
    """The task of an OpenEvolve folder, warnings naming what is not carried over, and
    what was mapped."""
    folder = Path(path).expanduser().resolve()
    config_file = folder / CONFIG
    settings = read_yaml(config_file) if config_file.is_file() else {}
    config = Settings(settings, config_file, SECTIONS, llm="llm")
    program = _program(folder, config)
    evaluator = folder / EVALUATOR
    if not evaluator.is_file():
        raise TaskSpecError(
            f"{evaluator}: no such file (an OpenEvolve task folder holds {STEM}.* and {EVALUATOR})"
        )
    functions, star = top_level_names(parse_python(evaluator))
    if "evaluate" not in functions and not star:
        raise TaskSpecError(
            f"{evaluator}: defines no function 'evaluate(program_path)', "
            "which OpenEvolve calls to score a program"
        )
    artifacts = _artifacts(config)
    run = functools.partial(command, program=program, artifacts=artifacts)
    stages, notes = _stages(functions, config, evaluator, run)
    data: dict[str, Any] = {
        "name": task_name(folder),
        "goal": _goal(config, folder, program),
        "editable": [program],
        "protected": [EVALUATOR],
        "exclude": [CONFIG, "openevolve_output/**"],
        "evaluate": {
            "command": run("evaluate"),
            "metric": "combined_score",
            "direction": "maximize",
            "timeout": config.take(
                "evaluator.timeout",
                is_positive,
                "a positive number of seconds",
                "evaluate.timeout",
                is_number,
            )
            or DEFAULT_TIMEOUT,
            "stages": stages,
            "cascade": "keep",
        },
        "agents": {"calls": "one", **_agents(config)},
        "support_files": support_files(SUPPORT),
    }
    if search := _search(config):
        data["search"] = search
    iterations = config.take(
        "max_iterations",
        is_count,
        "a non-negative integer",
        "budget.max_nodes (plus the root)",
        is_int,
    )
    if iterations is not None:
        data["budget"] = {"max_nodes": iterations + 1}
    spec = spec_from_dict(data, config_file if config_file.is_file() else evaluator)
    return Loaded(spec, [*config.ignored(), *notes], config.mapped)


def _program(folder: Path, config: Settings) -> str:
    suffix = config.take(
        "file_suffix", is_suffix, "a file suffix such as '.rs'", "the program", is_str
    )
    program = find_program(folder, STEM, suffix)
    if program is not None:
        return program
    if suffix is not None:
        raise TaskSpecError(
            f"{folder / (STEM + suffix)}: no such file (config.yaml's file_suffix names it)"
        )
    found = sorted(p.name for p in folder.glob(f"{STEM}.*"))
    if found:
        raise TaskSpecError(
            f"{folder}: {len(found)} candidate programs {found}: set file_suffix in "
            f"config.yaml to pick one"
        )
    raise TaskSpecError(
        f"{folder / PROGRAM}: no such file (an OpenEvolve task folder holds "
        f"{STEM}.* and {EVALUATOR})"
    )


def _artifacts(config: Settings) -> bool:
    """Whether artifacts reach the agents (both of OpenEvolve's switches must allow it)."""
    on = [
        config.take(key, is_bool, "true or false", "artifacts shown to the agents")
        for key in ("evaluator.enable_artifacts", "prompt.include_artifacts")
    ]
    return False not in on


def _agents(config: Settings) -> dict[str, Any]:
    """``[agents]`` settings from ``llm.*`` and ``diff_based_evolution``."""
    agents: dict[str, Any] = {}
    for key, field, check, expected, accepts in (
        ("llm.temperature", "temperature", is_temperature, "a number in [0, 2]", is_number),
        ("llm.max_tokens", "max_tokens", is_max_tokens, "an integer of at least 16", is_int),
        ("llm.timeout", "timeout", is_positive, "a positive number of seconds", is_number),
        ("llm.retries", "max_retries", is_retries, "an integer 0..20", is_int),
    ):
        value = config.take(key, check, expected, f"agents.{field}", accepts)
        if value is not None:
            agents[field] = value
    base = config.get("llm.api_base", is_str, "a URL")
    models = _models(config, base)
    local = base is not None and base.rstrip("/") != OPENAI_URL
    if base is not None:
        config.note("llm.api_base", "agents.base_url" if local else "(OpenAI's endpoint)")
    if local:
        agents["base_url"] = base
    if models:
        named = [(model_name(n, base), w) for n, w in models]
        agents["model"] = max(named, key=lambda m: m[1])[0]
        if len(named) > 1:
            agents["coder"] = {"ensemble": [{"model": m, "weight": w} for m, w in named]}
    diff = config.take("diff_based_evolution", is_bool, "true or false", "agents.edit_format")
    if diff is False:
        agents["edit_format"] = "whole_file"
    return agents


def _models(config: Settings, base: str | None) -> list[tuple[str, float]]:
    """(name, weight) of the evolution models: ``llm.models``, else ``primary_model`` and
    ``secondary_model`` (OpenEvolve's weights: 1.0 and 0.2 by default; weight 0 drops one)."""
    models = config.get("llm.models", is_model_list, "a list of {name, weight} mappings")
    out: list[tuple[str, float]] = []
    for i, m in enumerate(models or []):
        where = f"llm.models[{i}]"
        weight = m.get("weight", 1.0)
        if not is_number(weight):
            raise TaskSpecError(
                f"{config.file}: key '{where}.weight': expected a number, got {weight!r:.80}"
            )
        own_base = m.get("api_base")
        extra = sorted(set(m) - {"name", "weight", "api_base"})
        if own_base is not None and own_base != base:
            extra.insert(0, "api_base")
        config.unmapped.extend(f"{where}.{k}" for k in extra)
        if weight > 0:
            out.append((str(m["name"]), float(weight)))
    if models:
        config.note("llm.models", "agents.model and the coder's ensemble")
    for key, default in (("primary_model", 1.0), ("secondary_model", 0.2)):
        name = config.get(f"llm.{key}", is_str, "a model name")
        weight = config.get(f"llm.{key}_weight", is_number, "a number")
        if name is None:
            if weight is not None:  # the weight of no model
                config.unmapped.append(f"llm.{key}_weight (no llm.{key})")
            continue
        config.note(f"llm.{key}", "agents.model and the coder's ensemble")
        if weight is not None:
            config.note(f"llm.{key}_weight", "its weight in the coder's ensemble")
        if key == "primary_model":  # OpenEvolve: `primary_model_weight or 1.0`
            w = float(weight or default)
        else:
            w = default if weight is None else float(weight)
        if w > 0 and name not in (n for n, _ in out):
            out.append((name, w))
    return out


def _search(config: Settings) -> dict[str, Any]:
    """``[search]`` settings: seed, parallelism, and the evolution policy from ``database.*``."""
    seed = config.take("random_seed", is_int, "an integer", "search.seed")
    db_seed = config.get("database.random_seed", is_int, "an integer")
    if db_seed is not None:
        config.note("database.random_seed", "search.seed" if seed is None else "(random_seed)")
    search = {
        "seed": db_seed if seed is None else seed,
        "parallel": config.take(
            "evaluator.parallel_evaluations",
            is_parallel,
            "an integer 1..256",
            "search.parallel",
            is_int,
        ),
    }
    evolution: dict[str, Any] = {}
    for key in DATABASE:
        check, expected, accepts = (
            (is_ratio, "a number in [0, 1]", is_number)
            if key.endswith(("_rate", "_ratio"))
            else (is_positive_int, "an integer >= 1", is_int)
        )
        value = config.take(f"database.{key}", check, expected, f"search.{key}", accepts)
        if value is not None:
            evolution[key] = value
    explore = evolution.get("exploration_ratio", 0.2)  # OpenEvolve's default and revtree's
    if evolution.get("exploitation_ratio", 0.7) + explore > 1:
        # OpenEvolve draws one number: exploration below the first ratio, exploitation
        # below their sum, so exploitation gets what exploration leaves
        evolution["exploitation_ratio"] = round(1 - explore, 12)
    features = _features(config)
    if features:
        evolution["features"] = [f for f, _ in features]
        evolution["feature_bins"] = dict(features)
    if evolution:
        evolution["policy"] = "evolution"
    return {k: v for k, v in {**search, **evolution}.items() if v is not None}


def _features(config: Settings) -> list[tuple[str, int]]:
    """(revtree feature, bins) for each of ``database.feature_dimensions`` (OpenEvolve's
    default, complexity and diversity, when only ``feature_bins`` is given)."""
    bins = config.get("database.feature_bins", _is_bins, "a positive integer or a table of them")
    dims = config.get("database.feature_dimensions", is_str_list, "a list of names")
    if dims is None and bins is None:
        return []
    dims = dims if dims is not None else ["complexity", "diversity"]
    table = bins if isinstance(bins, dict) else {}
    default = bins if is_int(bins) else OPENEVOLVE_BINS
    out = [(FEATURES.get(d, f"metric:{d}"), table.get(d, default)) for d in dims]
    if dims:
        pairs = ", ".join(f"{d} as {f}" for d, (f, _) in zip(dims, out, strict=True))
        config.note("database.feature_dimensions", f"search.features ({pairs})")
    if bins is not None:
        config.note("database.feature_bins", "search.feature_bins (per feature)")
    if extra := sorted(set(table) - set(dims)):
        config.unmapped.append(f"database.feature_bins {extra} (not a feature dimension)")
    return list(dict(out).items())  # a dimension named twice is one feature


def _is_bins(v: Any) -> bool:
    return is_positive_int(v) or (
        isinstance(v, dict) and all(isinstance(k, str) and is_positive_int(n) for k, n in v.items())
    )


def _goal(config: Settings, folder: Path, program: str) -> str:
    message = config.get("prompt.system_message", is_str, "a string")
    named = config.take("language", is_str, "a language name", "the goal (the program's language)")
    if message and " " in message.strip():
        config.note("prompt.system_message", "goal")
        goal = str(message).strip()
    else:
        if message:  # the name of a prompt template, not a text
            config.drop("prompt.system_message")
        goal = default_goal(folder, program, EVALUATOR)
    return goal + language_note(program, named)


def _stages(
    functions: dict[str, ast.AST],
    config: Settings,
    evaluator: Path,
    command: Callable[[str], str],
) -> tuple[list[dict[str, Any]], list[str]]:
    """The cascade stages, and notes on the stage functions that are not run."""
    cascade = config.take(
        "evaluator.cascade_evaluation", is_bool, "true or false", "evaluate.stages"
    )
    thresholds = config.take(
        "evaluator.cascade_thresholds",
        is_thresholds,
        "a non-empty list of numbers",
        "evaluate.stages thresholds",
        lambda v: v == [],
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
