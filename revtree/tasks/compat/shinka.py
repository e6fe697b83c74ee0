"""ShinkaEvolve task folders, unchanged: ``initial.*`` and ``evaluate.py``.

The mapping onto a :class:`TaskSpec`: the program, ``initial.py`` or the one ``initial.*``
of another language (``.go``, ``.rs``, ``.cpp``, ...; ``evo_config.init_program_path``
picks one), is editable, and a non-Python program's language is named in the goal;
``evaluate.py`` is protected, other files are read-only context. The score is
``combined_score`` from the ``metrics.json`` that ``evaluate.py --program_path PROGRAM
--results_dir DIR`` writes, maximized; ``python _revtree_shinka_runner.py [PROGRAM]`` runs
it and reads ``correct.json`` too, so a program that Shinka marks incorrect fails (with
Shinka's error message). Evaluators that import ``shinka.core.run_shinka_eval`` work
without ShinkaEvolve installed: a small shim stands in for it. One model call per
candidate (``agents.calls = "one"``), as Shinka makes.

Run configuration: when the folder holds exactly one ``shinka*.yaml`` (``shinka_run``'s
``--config-fname`` format: sections ``evo_config``/``db_config``/``job_config`` or their
short names ``evo``/``db``/``job``, keys named as the file writes them, and runner keys
at the top), its keys with a revtree counterpart are mapped (the loader lists them):
``evo_config.task_sys_msg`` (goal), ``language``, ``init_program_path``,
``num_generations`` (``budget.max_nodes``, plus the root), ``max_parallel_jobs`` (older
releases) and the top-level ``max_evaluation_jobs`` (``search.parallel``),
``max_api_costs`` (``budget.max_usd``), ``patch_types`` (only ``full``: whole-file
rewrites; only ``diff``: SEARCH/REPLACE), ``llm_models`` (OpenAI and Anthropic names,
and ``local-NAME-URL``; several make the coder's ensemble), ``llm_kwargs.max_tokens``
and a single ``llm_kwargs.temperatures``; ``db_config.num_islands``, ``archive_size``,
``migration_interval``, ``migration_rate`` and ``exploitation_ratio`` (the chance the
parent comes from the archive; exploration then gets at most what it leaves) set the
evolution policy; ``job_config.eval_program_path`` when it is ``evaluate.py``. Every
other key is named in a warning (:mod:`~revtree.tasks.compat.keys` lists them all); a
value ShinkaEvolve takes but outside revtree's range is named there too, not refused.
Several ``shinka*.yaml`` files, and ``run_evo*.py`` scripts, are not read (named in a
warning). All of them stay out of the repository.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from revtree.errors import TaskSpecError
from revtree.tasks.compat._common import (
    SHIMS,
    Loaded,
    Settings,
    default_goal,
    find_program,
    is_count,
    is_int,
    is_max_tokens,
    is_number,
    is_parallel,
    is_positive,
    is_positive_int,
    is_ratio,
    is_str,
    is_str_list,
    language_note,
    parse_python,
    read_yaml,
    support_files,
    task_name,
)
from revtree.tasks.load import spec_from_dict

STEM = "initial"
PROGRAM = "initial.py"
EVALUATOR = "evaluate.py"
RUNNER = "_revtree_shinka_runner.py"
SUPPORT = {
    RUNNER: "shinka_runner.py",
    f"{SHIMS}/shinka/__init__.py": "shinka/__init__.py",
    f"{SHIMS}/shinka/core/__init__.py": "shinka/core/__init__.py",
    f"{SHIMS}/shinka/core/wrap_eval.py": "shinka/core/wrap_eval.py",
}
YAML_CONFIGS = ("shinka*.yaml", "shinka*.yml")
RUN_CONFIGS = (*YAML_CONFIGS, "run_evo*.py")
LOCAL_MODEL = re.compile(r"^local-(.+)-(https?://.+)$")
DB_KEYS = (
    "num_islands",
    "archive_size",
    "migration_interval",
    "migration_rate",
    "exploitation_ratio",
)
SECTIONS = ("evo_config", "db_config", "job_config")
#: shinka_run's shorter names of the sections (evo/db/job), read as the file writes them
ALIASES = {"evo_config": "evo", "db_config": "db", "job_config": "job"}


def is_shinka(folder: Path) -> bool:
    return (folder / EVALUATOR).is_file() and find_program(folder, STEM) is not None


def load_shinka(path: str | Path) -> Loaded:
    """The task of a ShinkaEvolve folder, warnings naming what is not carried over, and
    what was mapped."""
    folder = Path(path).expanduser().resolve()
    evaluator = folder / EVALUATOR
    if not evaluator.is_file():
        raise TaskSpecError(
            f"{evaluator}: no such file (a ShinkaEvolve task folder holds {STEM}.* and {EVALUATOR})"
        )
    parse_python(evaluator)
    files = sorted({p.name for glob in RUN_CONFIGS for p in folder.glob(glob) if p.is_file()})
    yamls = [f for f in files if f.endswith((".yaml", ".yml"))]
    read = folder / yamls[0] if len(yamls) == 1 else None
    config = Settings(
        read_yaml(read) if read else {},
        read or folder / "shinka.yaml",
        SECTIONS,
        aliases=ALIASES,
    )
    program = _program(folder, config)
    evaluator_named = config.get("job_config.eval_program_path", is_str, "a file name")
    if evaluator_named == EVALUATOR:
        config.note("job_config.eval_program_path", "the evaluator (protected)")
    elif evaluator_named is not None:
        config.drop("job_config.eval_program_path")  # revtree runs evaluate.py
    data: dict[str, Any] = {
        "name": task_name(folder),
        "goal": _goal(config, folder, program),
        "editable": [program],
        "protected": [EVALUATOR],
        "exclude": files,
        "evaluate": {
            "command": f"python {RUNNER}" + ("" if program == PROGRAM else f" {program}"),
            "metric": "combined_score",
            "direction": "maximize",
        },
        "agents": {"calls": "one", **_agents(config)},
        "support_files": support_files(SUPPORT),
    }
    for section, values in (("search", _search(config)), ("budget", _budget(config))):
        if values:
            data[section] = values
    warnings = [
        f"{folder / name}: ShinkaEvolve run settings are not read (revtree's own options set "
        "the budget, parallelism, seed and models); the file stays out of the repository"
        for name in files
        if folder / name != read
    ]
    spec = spec_from_dict(data, evaluator)
    return Loaded(spec, [*config.ignored(), *warnings], config.mapped)


def _program(folder: Path, config: Settings) -> str:
    named = config.take(
        "evo_config.init_program_path", is_str, "a file name", "the program (editable)"
    )
    if named is not None:
        if not (folder / named).is_file() or "/" in named.strip("./"):
            raise TaskSpecError(
                f"{config.file}: key 'evo_config.init_program_path': {named!r} is not a file "
                f"at the top of {folder}"
            )
        return Path(named).name
    program = find_program(folder, STEM)
    if program is None:
        found = sorted(p.name for p in folder.glob(f"{STEM}.*"))
        raise TaskSpecError(
            f"{folder}: {len(found)} candidate programs {found}: set "
            "evo_config.init_program_path in a shinka.yaml to pick one"
            if found
            else f"{folder / PROGRAM}: no such file (a ShinkaEvolve task folder holds "
            f"{STEM}.* and {EVALUATOR})"
        )
    return program


def _goal(config: Settings, folder: Path, program: str) -> str:
    message = config.take("evo_config.task_sys_msg", is_str, "a string", "goal")
    named = config.take("evo_config.language", is_str, "a language name", "the goal")
    goal = (message or "").strip() or default_goal(
        folder, program, EVALUATOR, ", keeping it correct"
    )
    return goal + language_note(program, named)


def _agents(config: Settings) -> dict[str, Any]:
    agents: dict[str, Any] = {}
    tokens = config.take(
        "evo_config.llm_kwargs.max_tokens",
        is_max_tokens,
        "an integer >= 16",
        "agents.max_tokens",
        is_int,
    )
    if tokens is not None:
        agents["max_tokens"] = tokens
    temps = config.get(
        "evo_config.llm_kwargs.temperatures", _temperatures, "numbers in [0, 2]", _numbers
    )
    if temps is not None and len(temps) == 1:
        config.note("evo_config.llm_kwargs.temperatures", "agents.temperature")
        agents["temperature"] = temps[0]
    elif temps is not None:
        config.drop("evo_config.llm_kwargs.temperatures")  # sampled per call: none
    kinds = config.get("evo_config.patch_types", is_str_list, "a list of patch types")
    if kinds:
        formats = {"diff": "search_replace", "full": "whole_file"}
        edit = {formats[k] for k in kinds if k in formats}
        if len(edit) == 1:
            agents["edit_format"] = edit.pop()
        config.note("evo_config.patch_types", f"agents.edit_format ({', '.join(kinds)})")
    return {**agents, **_models(config)}


def _models(config: Settings) -> dict[str, Any]:
    names = config.get("evo_config.llm_models", _names, "a model name or a list of them")
    if not names:
        return {}
    names = [names] if isinstance(names, str) else names
    models, urls, unknown = [], set(), []
    for name in names:
        if m := LOCAL_MODEL.match(name):
            models.append(f"openai-compatible:{m.group(1)}")
            urls.add(m.group(2))
        elif name.startswith("claude-"):
            models.append(f"anthropic:{name}")
        elif re.match(r"^(gpt-|o[1-9]|chatgpt-)", name):
            models.append(f"openai:{name}")
        else:
            unknown.append(name)
    mixed = urls and any(not m.startswith("openai-compatible:") for m in models)
    if unknown or len(urls) > 1 or mixed:
        config.drop("evo_config.llm_models")  # no one revtree endpoint serves them all
        return {}
    config.note("evo_config.llm_models", "agents.model and the coder's ensemble")
    agents: dict[str, Any] = {"model": models[0]}
    if urls:
        agents["base_url"] = urls.pop()
    if len(set(models)) > 1:
        agents["coder"] = {"ensemble": [{"model": m, "weight": 1.0} for m in models]}
    return agents


def _search(config: Settings) -> dict[str, Any]:
    search: dict[str, Any] = {}
    for key in ("max_evaluation_jobs", "evo_config.max_parallel_jobs"):
        value = config.take(key, is_parallel, "an integer 1..256", "search.parallel", is_int)
        if value is not None:
            search["parallel"] = value
    for key in DB_KEYS:
        check, expected, accepts = (
            (is_ratio, "a number in [0, 1]", is_number)
            if key.endswith(("_rate", "_ratio"))
            else (is_positive_int, "an integer >= 1", is_int)
        )
        value = config.take(f"db_config.{key}", check, expected, f"search.{key}", accepts)
        if value is not None:
            search.update(policy="evolution", **{key: value})
    if search.get("exploitation_ratio", 0) > 0.8:  # Shinka has no exploration ratio:
        search["exploration_ratio"] = round(1 - search["exploitation_ratio"], 12)  # leave room
    return search


def _budget(config: Settings) -> dict[str, Any]:
    budget: dict[str, Any] = {}
    generations = config.take(
        "evo_config.num_generations", is_count, "a non-negative integer", "budget.max_nodes", is_int
    )
    if generations is not None:
        budget["max_nodes"] = generations + 1
    usd = config.take(
        "evo_config.max_api_costs", is_positive, "a positive number", "budget.max_usd", is_number
    )
    if usd is not None:
        budget["max_usd"] = usd
    return budget


def _temperatures(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(x, int | float) and not isinstance(x, bool) and 0 <= x <= 2 for x in v
    )


def _numbers(v: Any) -> bool:
    return isinstance(v, list) and all(is_number(x) for x in v)


def _names(v: Any) -> bool:
    return isinstance(v, str) or is_str_list(v)
