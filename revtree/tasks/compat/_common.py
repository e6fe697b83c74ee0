"""What the OpenEvolve and ShinkaEvolve loaders share: names, YAML, Python sources, shims."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from revtree.errors import TaskSpecError
from revtree.tasks.spec import TaskSpec

SHIMS = "_revtree_compat"  # workspace folder of the shim packages (see shims/)
OPENAI_URL = "https://api.openai.com/v1"
#: Program file suffix -> the language named in the goal (a ``.py`` program is not named).
LANGUAGES = {
    ".py": "Python",
    ".rs": "Rust",
    ".go": "Go",
    ".jl": "Julia",
    ".f90": "Fortran",
    ".f95": "Fortran",
    ".f": "Fortran",
    ".cpp": "C++",
    ".cc": "C++",
    ".cxx": "C++",
    ".hpp": "C++",
    ".c": "C",
    ".cu": "CUDA C++",
    ".js": "JavaScript",
    ".ts": "TypeScript",
    ".java": "Java",
    ".kt": "Kotlin",
    ".scala": "Scala",
    ".swift": "Swift",
    ".rb": "Ruby",
    ".r": "R",
    ".lua": "Lua",
    ".hs": "Haskell",
    ".ml": "OCaml",
    ".cs": "C#",
    ".sv": "SystemVerilog",
    ".v": "Verilog",
    ".vhd": "VHDL",
    ".lean": "Lean",
    ".sh": "shell",
    ".sql": "SQL",
    ".zig": "Zig",
    ".nim": "Nim",
    ".m": "MATLAB",
}

_ALIASES = {"cpp": "C++", "c++": "C++", "cuda": "CUDA C++", "js": "JavaScript", "golang": "Go"}


class CompatNote(UserWarning):
    """What a compat loader mapped onto revtree settings: information, not a problem."""


class Loaded(NamedTuple):
    """A compat folder's task, the warnings naming what is not carried over, and what
    was mapped (``"their key -> revtree setting"``)."""

    spec: TaskSpec
    warnings: list[str]
    mapped: list[str]


def find_program(folder: Path, stem: str, suffix: str | None = None) -> str | None:
    """The program file ``STEM.SUFFIX`` of a folder: with ``suffix``, that file; else
    ``STEM.py``, else the one ``STEM.*`` file of a known language (None when there is
    none, or several)."""
    if suffix is not None:
        name = f"{stem}{suffix}"
        return name if (folder / name).is_file() else None
    if (folder / f"{stem}.py").is_file():
        return f"{stem}.py"
    found = [
        p.name for p in folder.glob(f"{stem}.*") if p.is_file() and p.suffix.lower() in LANGUAGES
    ]
    return found[0] if len(found) == 1 else None


def language(program: str, named: str | None = None) -> str:
    """The language of a program file, as the goal names it (``named`` wins)."""
    if named and named.strip():
        key = named.strip().lower()
        known = {v.lower(): v for v in LANGUAGES.values()}
        return known.get(key) or _ALIASES.get(key) or named.strip()
    return LANGUAGES.get(Path(program).suffix.lower(), Path(program).suffix.lstrip(".") or "?")


def language_note(program: str, named: str | None = None) -> str:
    """The sentence that names a non-Python program's language, for the goal ("" for Python)."""
    lang = language(program, named)
    if lang.lower() == "python":
        return ""
    return f" The program, {program}, is written in {lang}."


def model_name(name: str, base_url: str | None) -> str:
    """A revtree model from a bare model name: ``openai-compatible:NAME`` for a server
    other than OpenAI's, else ``openai:NAME``."""
    local = base_url is not None and base_url.rstrip("/") != OPENAI_URL
    return f"{'openai-compatible' if local else 'openai'}:{name}"


def task_name(folder: Path) -> str:
    """A valid task name from a folder name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", folder.name).lstrip("._-") or "task"


def support_files(sources: Mapping[str, str]) -> dict[str, str]:
    """Workspace path -> content, for ``sources``: workspace path -> file under shims/."""
    root = resources.files("revtree.tasks.compat.shims")
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


# -- type checks of settings ------------------------------------------------------------


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_count(v: Any) -> bool:
    return is_int(v) and v >= 0


def is_positive_int(v: Any) -> bool:
    return is_int(v) and v >= 1


def is_parallel(v: Any) -> bool:
    return is_int(v) and 1 <= v <= 256


def is_retries(v: Any) -> bool:
    return is_int(v) and 0 <= v <= 20


def is_max_tokens(v: Any) -> bool:
    return is_int(v) and v >= 16


def is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def is_number_min0(v: Any) -> bool:
    return is_number(v) and v >= 0


def is_ratio(v: Any) -> bool:
    return is_number(v) and 0 <= v <= 1


def is_temperature(v: Any) -> bool:
    return is_number(v) and 0 <= v <= 2


def is_positive(v: Any) -> bool:
    return is_number(v) and v > 0


def is_str(v: Any) -> bool:
    return isinstance(v, str)


def is_suffix(v: Any) -> bool:
    return isinstance(v, str) and v.startswith(".") and "/" not in v and len(v) > 1


def is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def is_model_list(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(m, dict) and isinstance(m.get("name"), str) and m["name"] for m in v
    )


def is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def is_thresholds(v: Any) -> bool:
    return isinstance(v, list) and len(v) > 0 and all(is_number(x) for x in v)


class Settings:
    """The settings of config.yaml, type-checked on access; keys never read are ignored."""

    def __init__(
        self,
        data: dict[str, Any],
        file: Path,
        sections: tuple[str, ...] = (),
        llm: str = "",
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        self.data, self.file = data, file
        self.llm = llm  # the section of LLM settings, whose API keys are never read
        self.used: set[str] = set()
        self.mapped: list[str] = []  # "key -> revtree setting"
        self.unmapped: list[str] = []  # parts of used keys that have no counterpart
        # section -> the other name the file gives it (ShinkaEvolve's evo for evo_config):
        # keys are read, and named, as the file writes them
        self.rename = {
            name: alias
            for name, alias in (aliases or {}).items()
            if alias in data and name not in data
        }
        for section in sections:
            section = self.rename.get(section, section)
            if data.get(section) is not None and not isinstance(data[section], dict):
                raise TaskSpecError(f"{file}: key '{section}': expected a mapping of settings")

    def key(self, key: str) -> str:
        """``key`` as the file names it (its section renamed where the file uses an alias)."""
        section, dot, rest = key.partition(".")
        return self.rename.get(section, section) + dot + rest

    def get(
        self,
        key: str,
        check: Callable[[Any], bool],
        expected: str,
        accepts: Callable[[Any], bool] | None = None,
    ) -> Any:
        """The value at dotted ``key``, None when absent; raises when it fails ``check``,
        unless ``accepts`` (what the other system takes) allows it: then the key is
        named in the warning, with revtree's range, and None is returned."""
        key = self.key(key)
        self.used.add(key)
        value: Any = self.data
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        if value is not None and not check(value):
            if accepts is not None and accepts(value):
                self.unmapped.append(f"{key} (= {value!r:.40}; revtree takes {expected})")
                return None
            raise TaskSpecError(f"{self.file}: key '{key}': expected {expected}, got {value!r:.80}")
        return value

    def take(
        self,
        key: str,
        check: Callable[[Any], bool],
        expected: str,
        target: str,
        accepts: Callable[[Any], bool] | None = None,
    ) -> Any:
        """:meth:`get`, noting ``key -> target`` as mapped when the key is set."""
        value = self.get(key, check, expected, accepts)
        if value is not None:
            self.note(key, target)
        return value

    def drop(self, key: str) -> None:
        """Count a key that was read as not carried over (it is named in the warning)."""
        self.used.discard(self.key(key))

    def note(self, key: str, target: str) -> None:
        self.mapped.append(f"{self.key(key)} -> {target}")

    def _read(self, key: str) -> bool:
        """Whether ``key`` or a table holding it was read (a table is read whole)."""
        parts = key.split(".")
        return any(".".join(parts[:i]) in self.used for i in range(1, len(parts) + 1))

    def ignored(self) -> list[str]:
        """One warning per section, naming every key that was not used."""
        groups: dict[str, list[str]] = {}
        unused = [k for k in leaf_keys(self.data) if not self._read(k)]
        for key in [*unused, *self.unmapped]:
            groups.setdefault(key.split(".")[0] if "." in key else "", []).append(key)
        out = []
        for section, keys in groups.items():
            names = ", ".join(keys)
            if section and section == self.llm:
                secret = (
                    f" (API keys in {self.file.name} are never read: revtree reads them from "
                    "the environment)"
                    if has_key(self.data[section], "api_key")
                    else ""
                )
                out.append(
                    f"{self.file}: LLM settings without a revtree counterpart{secret}: {names}"
                )
            else:
                what = f"'{section}' settings" if section else "settings"
                out.append(f"{self.file}: {what} without a revtree counterpart, ignored: {names}")
        return out
