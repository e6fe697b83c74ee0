"""Load a task folder (or a ``task.toml``) into a checked :class:`TaskSpec`.

Errors name the file, the key and what was expected. Beyond the schema, the loader
checks the file system: the source folder exists, each ``editable`` and ``protected``
glob matches a file, and each knob's file and location exist.
"""

from __future__ import annotations

import functools
import re
import tomllib
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from revtree.errors import TaskSpecError
from revtree.tasks.spec import Knob, TaskSpec

TASK_FILE = "task.toml"
ALWAYS_EXCLUDED = (
    ".git",
    ".git/**",
    "**/__pycache__/**",
    "__pycache__/**",
    "*.pyc",
    "**/*.pyc",
    TASK_FILE,
    ".revtree/**",
)


def load_task(path: str | Path) -> TaskSpec:
    """Read and check the task at ``path``: a folder holding task.toml, or the file, or an
    OpenEvolve or ShinkaEvolve task folder (see :mod:`revtree.tasks.compat`), whose loader
    warns (``UserWarning``) about every setting it does not carry over, then lists what
    it mapped in one ``CompatNote`` (a ``UserWarning`` subclass that is no problem)."""
    file = Path(path).expanduser().resolve()
    if file.is_dir() and not (file / TASK_FILE).exists():
        from revtree.tasks.compat import CompatNote, load_compat

        if (found := load_compat(file)) is not None:
            for message in found.warnings:
                warnings.warn(message, UserWarning, stacklevel=2)
            if found.mapped:
                note = f"{file}: mapped onto revtree settings: {', '.join(found.mapped)}"
                warnings.warn(note, CompatNote, stacklevel=2)
            return found.spec
    if file.is_dir():
        file = file / TASK_FILE
    if not file.is_file():
        raise TaskSpecError(
            f"{file}: no such task file (a task folder holds a {TASK_FILE}, or is an "
            "OpenEvolve folder with initial_program.* and evaluator.py, or a ShinkaEvolve "
            "folder with initial.* and evaluate.py)"
        )
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise TaskSpecError(f"{file}: not valid TOML: {e}") from e
    return spec_from_dict(data, file)


def spec_from_dict(data: dict[str, Any], file: Path) -> TaskSpec:
    """Validate ``data`` as the content of ``file`` and check it against the folder."""
    data = {**data, "root": str(file.parent)}
    try:
        spec = TaskSpec.model_validate(data)
    except ValidationError as e:
        raise TaskSpecError(format_validation_error(e, file)) from e
    check_files(spec, file)
    return spec


def format_validation_error(error: ValidationError, file: Path | str) -> str:
    """One line per problem: ``file: key 'a.b[2].c': what was expected (got ...)``."""
    lines = [f"{file}: {error.error_count()} problem(s) in the task"]
    for err in error.errors():
        key = _key(err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"  key '{key}': unknown key (check the spelling; see the README)")
        elif err["type"] == "missing":
            lines.append(f"  key '{key}': required key is missing")
        else:
            lines.append(f"  key '{key}': {err['msg']} (got {err.get('input')!r:.80})")
    return "\n".join(lines)


def _key(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("greedy", "random", "optuna", "function-after[_check_kind(), Knob]"):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def source_dir(spec: TaskSpec) -> Path:
    return (Path(spec.root) / spec.source).resolve()


def matches(path: str, globs: Iterable[str]) -> bool:
    """Whether a relative posix path matches any glob.

    Globs follow git and pathlib: ``*`` and ``?`` stay within one folder, ``**`` spans
    folders (``**/x`` also matches ``x`` at the top), ``[...]`` is a character class.
    """
    return any(_glob_regex(g).fullmatch(path) is not None for g in globs)


@functools.lru_cache(maxsize=1024)
def _glob_regex(glob: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := glob.find("]", i + 2)) != -1:
            body = glob[i + 1 : end]
            out.append(
                "[" + ("^" + body[1:] if body[0] in "!^" else body).replace("\\", "\\\\") + "]"
            )
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


def code_files(spec: TaskSpec) -> list[str]:
    """Relative paths of the files that make the root revision (holdout files excluded)."""
    excluded = (*ALWAYS_EXCLUDED, *spec.exclude, *(spec.holdout.files if spec.holdout else ()))
    return [p for p in _all_files(source_dir(spec)) if not matches(p, excluded)]


def holdout_files(spec: TaskSpec) -> list[str]:
    if spec.holdout is None or not spec.holdout.files:
        return []
    return [p for p in _all_files(source_dir(spec)) if matches(p, spec.holdout.files)]


def _all_files(root: Path) -> list[str]:
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if (p.is_file() or p.is_symlink()) and not matches(rel, ALWAYS_EXCLUDED[:2]):
            out.append(rel)
    return out


def check_files(spec: TaskSpec, file: Path) -> None:
    src = source_dir(spec)
    if not src.is_dir():
        raise TaskSpecError(f"{file}: key 'source': folder {src} does not exist")
    files = code_files(spec)
    for key in ("editable", "protected"):
        for glob in getattr(spec, key):
            if not any(matches(f, [glob]) for f in files):
                raise TaskSpecError(f"{file}: key '{key}': glob {glob!r} matches no file in {src}")
    for f in files:
        if matches(f, spec.editable) and matches(f, spec.protected):
            raise TaskSpecError(
                f"{file}: key 'protected': file {f!r} is also 'editable' "
                "(it must be one or the other)"
            )
    if spec.holdout and spec.holdout.files and not holdout_files(spec):
        raise TaskSpecError(f"{file}: key 'holdout.files': no file matches {spec.holdout.files}")
    for i, knob in enumerate(spec.knobs):
        _check_knob(knob, f"knobs[{i}]", src, spec, file)


def _check_knob(knob: Knob, key: str, src: Path, spec: TaskSpec, file: Path) -> None:
    if not matches(knob.file, spec.editable):
        raise TaskSpecError(f"{file}: key '{key}.file': {knob.file!r} is not an editable file")
    target = src / knob.file
    if not target.is_file():
        raise TaskSpecError(f"{file}: key '{key}.file': {knob.file!r} does not exist in {src}")
    text = target.read_text(encoding="utf-8")
    if knob_regex(knob).search(text) is None:
        where = f"pattern {knob.pattern!r}" if knob.pattern else f"assignment '{knob.target} = ...'"
        raise TaskSpecError(f"{file}: key '{key}': {where} not found in {knob.file}")


def knob_regex(knob: Knob) -> re.Pattern[str]:
    """The regex whose group 1 spans the knob's value in its file."""
    if knob.pattern is not None:
        return re.compile(knob.pattern, re.M)
    name = re.escape(knob.target)
    return re.compile(rf"^{name}\s*(?::[^=\n]+)?=\s*([^#\n]*?)\s*(?:#.*)?$", re.M)
