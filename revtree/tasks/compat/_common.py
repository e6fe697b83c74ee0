"""What the OpenEvolve and ShinkaEvolve loaders share: names, YAML, Python sources, shims."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from revtree.errors import TaskSpecError

SHIMS = "_revtree_compat"  # workspace folder of the shim packages (see _sandbox/)


def task_name(folder: Path) -> str:
    """A valid task name from a folder name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", folder.name).lstrip("._-") or "task"


def support_files(sources: Mapping[str, str]) -> dict[str, str]:
    """Workspace path -> content, for ``sources``: workspace path -> file under _sandbox/."""
    root = resources.files("revtree.tasks.compat._sandbox")
    return {
        dest: root.joinpath(*src.split("/")).read_text("utf-8") for dest, src in sources.items()
    }


def default_goal(folder: Path, program: str, evaluator: str, also: str = "") -> str:
    """The goal when the folder states none, pointing at EVOLVE-BLOCK markers if any."""
    text = (folder / program).read_text(encoding="utf-8", errors="replace")
    where = " (the code between the EVOLVE-BLOCK markers)" if "EVOLVE-BLOCK-START" in text else ""
    return f"Improve {program}{where} so that {evaluator} gives it a higher combined_score{also}."


def read_yaml(file: Path) -> dict[str, Any]:
    """The mapping in a YAML file (empty for an empty file)."""
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise TaskSpecError(f"{file}: not valid YAML: {e}") from e
    except OSError as e:
        raise TaskSpecError(f"{file}: cannot be read: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TaskSpecError(
            f"{file}: expected a mapping of settings at the top level, got {type(data).__name__}"
        )
    return data


def parse_python(file: Path) -> ast.Module:
    try:
        return ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    except SyntaxError as e:
        raise TaskSpecError(f"{file}: not valid Python: {e.msg} (line {e.lineno})") from e
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise TaskSpecError(f"{file}: cannot be read as Python source: {e}") from e


def top_level_names(tree: ast.Module) -> tuple[dict[str, ast.AST], bool]:
    """(name -> its definition, whether a ``*`` import may define more) at module level,
    looking into ``if``/``try``/``with``/loop blocks but not into functions or classes."""
    names: dict[str, ast.AST] = {}
    star = False
    for node in _statements(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node.value or node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                star = star or alias.name == "*"
                names[alias.asname or alias.name.split(".")[0]] = node
    return names, star


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for node in body:
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(node, field, None) or [])
        for handler in getattr(node, "handlers", None) or []:
            yield from _statements(handler.body)


def leaf_keys(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of the non-mapping values of nested mappings (lists are leaves)."""
    keys = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            keys.extend(leaf_keys(value, path + "."))
        else:
            keys.append(path)
    return keys


def has_key(data: Any, name: str) -> bool:
    """Whether ``name`` is a key anywhere in nested mappings and lists."""
    if isinstance(data, dict):
        return name in data or any(has_key(v, name) for v in data.values())
    if isinstance(data, list):
        return any(has_key(v, name) for v in data)
    return False
