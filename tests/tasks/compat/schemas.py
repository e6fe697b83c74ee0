"""OpenEvolve's and ShinkaEvolve's config schemas, read from their own packages, and the
configs generated from them that the compat tests load.

The packages live in ``.compat/`` (``pip install --no-deps --target .compat``, done by
``scripts/test``; ``REVTREE_TEST_COMPAT`` names another folder): not in the virtual
environment, so that no evaluator imports them instead of revtree's shims, and
without their heavy dependencies (ShinkaEvolve pulls pandas, boto3, matplotlib, ...).

- OpenEvolve: ``openevolve/config.py`` is imported by its path (it needs only
  ``dacite`` and ``yaml``); its ``Config`` dataclasses give the keys, their types and
  defaults, ``Config().to_dict()`` the full default config, and ``Config.from_dict``
  says which configs OpenEvolve accepts.
- ShinkaEvolve: its package cannot be imported without its dependencies, so the
  dataclasses ``EvolutionConfig``, ``DatabaseConfig`` and ``LocalJobConfig`` are read
  from their source (fields, annotations, defaults; ``shinka/defaults.py``, which needs
  nothing, is imported for the default factories), and ``shinka_run``'s own YAML
  loader (``shinka/cli/run_config.py``, imported by its path) says which files it
  accepts and gives its runner keys.
"""

from __future__ import annotations

import ast
import builtins
import copy
import dataclasses
import importlib.util
import os
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from .conftest import REPO

SOURCE = Path(os.environ.get("REVTREE_TEST_COMPAT") or REPO / ".compat")
HOW = "scripts/test installs them with pip install --no-deps --target .compat"


def missing() -> str | None:
    """Why the compat tests cannot run here, or None."""
    note = os.environ.get("REVTREE_TEST_NOTE_COMPAT")
    for path in ("openevolve/config.py", "shinka/core/config.py", "dacite/__init__.py"):
        if not (SOURCE / path).is_file():
            return note or f"no OpenEvolve and ShinkaEvolve packages in {SOURCE} ({HOW})"
    return None


def version(dist: str) -> str:
    found = sorted(SOURCE.glob(f"{dist}-*.dist-info"))
    return found[-1].name.removeprefix(f"{dist}-").removesuffix(".dist-info") if found else "?"


def by_path(name: str, file: Path) -> ModuleType:
    """Import one module file of a package without running its package's __init__."""
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    sys.path.insert(0, str(SOURCE))  # dacite, the one dependency
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SOURCE))
    return module


# -- OpenEvolve ----------------------------------------------------------------------
OE_SECTIONS = ("llm", "prompt", "database", "evaluator", "evolution_trace")


def openevolve() -> ModuleType:
    return by_path("_revtree_test_openevolve_config", SOURCE / "openevolve" / "config.py")


def oe_fields(oe: ModuleType) -> dict[str, tuple[Any, Any]]:
    """Every key of OpenEvolve's Config ("section.key" for a section's) -> (type, default)."""
    default = oe.Config()
    out: dict[str, tuple[Any, Any]] = {}
    for f in dataclasses.fields(oe.Config):
        if f.name in OE_SECTIONS:
            section = getattr(default, f.name)
            for g in dataclasses.fields(section):
                if not g.name.startswith("_"):
                    out[f"{f.name}.{g.name}"] = (g.type, getattr(section, g.name))
        else:
            out[f.name] = (f.type, getattr(default, f.name))
    return out


def oe_model_fields(oe: ModuleType) -> list[str]:
    return [f.name for f in dataclasses.fields(oe.LLMModelConfig) if not f.name.startswith("_")]


def oe_accepts(oe: ModuleType, data: dict[str, Any]) -> bool:
    try:
        oe.Config.from_dict(copy.deepcopy(data))
    except Exception:
        return False
    return True


TEXT = "Improve the program so that it scores higher, keeping it correct and short."
OE_STRINGS: dict[str, list[Any]] = {
    "llm.api_base": ["http://localhost:11434/v1", "https://api.openai.com/v1"],
    "llm.api_key": ["sk-not-a-real-key"],
    "llm.primary_model": ["gpt-4.1"],
    "llm.secondary_model": ["gpt-4.1-mini"],
    "llm.provider": ["openai"],
    "llm.reasoning_effort": ["low", "high"],
    "file_suffix": [".py"],
    "language": ["python"],
    "log_level": ["DEBUG", "WARNING"],
    "database.diversity_metric": ["feature_based"],
    "evolution_trace.format": ["json", "hdf5"],
    "prompt.system_message": [TEXT, "my_system_template"],
    "database.embedding_model": ["text-embedding-3-small"],
    "database.embedding_api_base": ["http://localhost:8000/v1"],
}
OE_LISTS: dict[str, list[Any]] = {
    "database.feature_dimensions": [["score"], ["complexity", "diversity", "my_metric"], []],
    "evaluator.cascade_thresholds": [[0.3], [0.2, 0.6, 0.9], []],
    "llm.models": [
        [{"name": "gpt-4.1", "weight": 0.7}, {"name": "o4-mini", "weight": 0.3}],
        [{"name": "qwen2.5-coder", "weight": 1.0, "temperature": 0.4, "max_tokens": 2048}],
    ],
    "llm.evaluator_models": [[{"name": "gpt-4.1-mini", "weight": 1.0}]],
}


def variants(key: str, kind: Any, default: Any) -> list[Any]:
    """Values of one key over its documented type and range (none for a key whose type
    YAML cannot write: a callable, a client object)."""
    if key in OE_STRINGS or key in OE_LISTS:
        return [*OE_STRINGS.get(key, []), *OE_LISTS.get(key, [])]
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    origin = typing.get_origin(kind)
    if args and (origin is typing.Union or type(kind).__name__ == "UnionType"):
        if {typing.get_origin(a) for a in args} == {dict} or (int in args and len(args) == 2):
            return [4, {"complexity": 3, "diversity": 5}, {"score": 2}]
        return [v for a in args for v in variants(key, a, default)]
    if kind is bool:
        return [not default]
    if kind is int:
        return [0, 1, 7, 100000]
    if kind is float:
        return [0.0, 0.35, 1.0, 2.5]
    if kind is str:
        return ["some_value"]
    if origin is dict:
        return [{"improvement": ["Make it faster", "Make it simpler"]}]
    if origin is list:
        return [[0.5], ["x", "y"]]
    return []


def oe_configs(oe: ModuleType) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, config) for the full default config, the default with one key varied,
    and the default with a whole section varied at once, that OpenEvolve accepts."""
    full = pruned(oe.Config().to_dict())  # OpenEvolve refuses its own nulls (language: null)
    yield "default", full
    fields = oe_fields(oe)
    for key, (kind, default) in fields.items():
        for i, value in enumerate(variants(key, kind, default)):
            data = copy.deepcopy(full)
            put(data, key, value)
            yield f"{key}#{i}", data
    for section in OE_SECTIONS:
        for i in range(4):
            data = copy.deepcopy(full)
            for key, (kind, default) in fields.items():
                if key.startswith(f"{section}.") and (values := variants(key, kind, default)):
                    put(data, key, values[i % len(values)])
            yield f"{section}*{i}", data


def pruned(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without its null values."""
    return {k: pruned(v) if isinstance(v, dict) else v for k, v in data.items() if v is not None}


def put(data: dict[str, Any], key: str, value: Any) -> None:
    *path, last = key.split(".")
    for part in path:
        data = data.setdefault(part, {})
    data[last] = value


# -- ShinkaEvolve --------------------------------------------------------------------
SHINKA_CLASSES = {
    "evo_config": ("core/config.py", "EvolutionConfig"),
    "db_config": ("database/dbase.py", "DatabaseConfig"),
    "job_config": ("launch/scheduler.py", "LocalJobConfig"),
}


def shinka_run_config() -> ModuleType:
    return by_path("_revtree_test_shinka_run_config", SOURCE / "shinka" / "cli" / "run_config.py")


def shinka_fields() -> dict[str, tuple[str, Any]]:
    """Every key shinka_run reads ("section.key", and its runner keys) -> (annotation, default)."""
    defaults = by_path("_revtree_test_shinka_defaults", SOURCE / "shinka" / "defaults.py")
    out: dict[str, tuple[str, Any]] = {}
    for section, (file, name) in SHINKA_CLASSES.items():
        tree = ast.parse((SOURCE / "shinka" / file).read_text())
        classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}
        chain, cls = [], classes[name]
        while True:  # the class and the bases defined in the same file
            chain.insert(0, cls)
            bases = [b.id for b in cls.bases if isinstance(b, ast.Name) and b.id in classes]
            if not bases:
                break
            cls = classes[bases[0]]
        for c in chain:
            for stmt in c.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    annotation = ast.unparse(stmt.annotation)
                    default = _default(stmt.value, defaults)
                    out[f"{section}.{stmt.target.id}"] = (annotation, default)
    runner = shinka_run_config()
    for key in runner._RUNNER_INT_KEYS:
        out[key] = ("int", None)
    for key in runner._RUNNER_BOOL_KEYS:
        out[key] = ("bool", False)
    return out


def _default(node: ast.expr | None, defaults: ModuleType) -> Any:
    if node is None:
        return None
    if isinstance(node, ast.Call):  # field(default_factory=...)
        factory = next(k.value for k in node.keywords if k.arg == "default_factory")
        if isinstance(factory, ast.Name):  # a function of shinka/defaults.py, or dict
            return (getattr(defaults, factory.id, None) or getattr(builtins, factory.id))()
        return ast.literal_eval(typing.cast(ast.Lambda, factory).body)
    if isinstance(node, ast.Name):
        return getattr(defaults, node.id)
    return ast.literal_eval(node)


SHINKA_VALUES: dict[str, list[Any]] = {
    "evo_config.task_sys_msg": [TEXT, ""],
    "evo_config.language": ["python"],
    "evo_config.init_program_path": ["initial.py"],
    "evo_config.llm_models": [
        ["gpt-4.1", "o4-mini"],
        ["claude-sonnet-4-20250514"],
        ["local-qwen2.5-coder-http://localhost:8000/v1"],
        ["gemini-2.5-pro", "gpt-4.1"],
    ],
    "evo_config.patch_types": [["diff"], ["full"], ["diff", "full", "cross"]],
    "evo_config.llm_kwargs": [
        {"temperatures": [0.5], "max_tokens": 8192},
        {"temperatures": [0.0, 0.5, 1.0], "reasoning_efforts": ["low", "high"]},
        {"max_tokens": 8},
    ],
    "evo_config.llm_dynamic_selection": ["ucb", "fixed", None],
    "db_config.archive_criteria": [{"combined_score": 1.0, "loc": -0.5}],
    "job_config.eval_program_path": ["evaluate.py", "evaluate_fast.py"],
    "job_config.extra_cmd_args": [{"seed": 3}],
}


def shinka_variants(key: str, annotation: str, default: Any) -> list[Any]:
    if key in SHINKA_VALUES:
        return SHINKA_VALUES[key]
    kind = annotation.removeprefix("Optional[").removesuffix("]")
    values: list[Any]
    if kind == "bool":
        values = [not default]
    elif kind == "int":
        values = [1, 7, 1000] + ([0] if key.startswith("evo_config.") else [])
    elif kind == "float":
        values = [0.0, 0.25, 1.0, 2.0]
    elif kind == "str":
        values = ["some_value"]
    elif kind.startswith("List[str"):
        values = [["gpt-4.1-mini"], ["diff", "full"]]
    elif kind.startswith("List[float"):
        values = [[0.5, 0.5], [1.0]]
    else:  # dict, Dict[str, ...]
        values = [{}, {"cost_aware_coef": 0.3}]
    return values + ([None] if annotation.startswith("Optional[") else [])


ALIASES = {"evo_config": "evo", "db_config": "db", "job_config": "job"}


def shinka_configs(fields: dict[str, tuple[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, config) for the full default config (in both of shinka_run's spellings of
    the sections) and the default with one key varied."""
    full: dict[str, Any] = {}
    for key, (_, default) in fields.items():
        if default is not None:
            put(full, key, copy.deepcopy(default))
    yield "default", full
    yield "default (evo/db/job)", {ALIASES.get(k, k): v for k, v in full.items()}
    for j, (key, (annotation, default)) in enumerate(fields.items()):
        for i, value in enumerate(shinka_variants(key, annotation, default)):
            data = copy.deepcopy(full)
            put(data, key, value)
            if (i + j) % 2:
                data = {ALIASES.get(k, k): v for k, v in data.items()}
            yield f"{key}#{i}", data
