"""Load a task folder (or a ``task.toml``) into a checked :class:`TaskSpec`.

Errors name the file, the key and what was expected. Beyond the schema, the loader
checks the file system: the source folder exists, each ``editable`` and ``protected``
glob matches a file, and each knob's file and location exist.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
import types
import typing
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from revtree.errors import TaskSpecError
from revtree.tasks.names import matches
from revtree.tasks.profiles import apply_profile
from revtree.tasks.sandbox import BUILTIN as SANDBOX_MODELS
from revtree.tasks.sandbox import BadSandbox
from revtree.tasks.search import PLUGIN
from revtree.tasks.spec import POLICIES, Knob, TaskSpec

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
    """Validate ``data`` as the content of ``file`` (its ``[search] profile`` applied, see
    :mod:`revtree.tasks.profiles`) and check it against the folder."""
    data = {**apply_profile(data), "root": str(file.parent)}
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
        lines.append(f"  key '{_key(_loc(err))}': {_explain(err)}")
    return "\n".join(lines)


_WRAPPER = re.compile(r"^[a-z-]+\[.*\]$")  # pydantic's validator and union steps in a loc
TAGS = frozenset({*POLICIES, PLUGIN})  # the [search] union's steps in a loc
TAGGED = frozenset(  # (section, tag): the [search] and [sandbox] unions' steps in a loc
    {*(("search", t) for t in TAGS), *(("sandbox", t) for t in (*SANDBOX_MODELS, PLUGIN))}
)
_GLOB_KEYS = frozenset({"editable", "protected", "exclude", "files", "outputs"})


def _loc(err: Any) -> tuple[Any, ...]:
    """Where a problem is; a plugin backend's ``[sandbox]`` says which of its keys."""
    loc, error = tuple(err["loc"]), (err.get("ctx") or {}).get("error")
    return (*loc, error.key) if isinstance(error, BadSandbox) else loc


def _explain(err: Any) -> str:
    """What one pydantic error means, in the task file's words."""
    kind, got, loc = err["type"], err.get("input"), tuple(err["loc"])
    name = next((p for p in reversed(loc) if isinstance(p, str) and not _WRAPPER.match(p)), "")
    shown = f" (got {got!r:.80})"
    if kind == "extra_forbidden" and len(loc) == 3 and loc[0] == "sandbox":
        return _not_backends(str(loc[-1]), str(loc[1]))
    if kind == "extra_forbidden":
        known = _keys_at(loc[:-1])
        return "unknown key" + (_did_you_mean(str(loc[-1]), known) or _known(known))
    if kind == "missing":
        return "required key is missing"
    if kind in ("tuple_type", "list_type", "set_type"):
        globs = name in _GLOB_KEYS
        if isinstance(got, dict) and not globs:
            return f"expected a list: write each entry as its own [[{_key(loc)}]] table"
        if isinstance(got, str) or (not globs and isinstance(got, int | float)):
            example = f", e.g. {name} = {json.dumps([got])}"
        else:
            example = f', e.g. {name} = ["*.py"]' if globs else ""
        return f"expected {'a list of globs' if globs else 'a list'}{example}" + shown
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "expected a whole number, e.g. 3" + shown
    if kind in ("float_type", "float_parsing", "finite_number"):
        return "expected a number, e.g. 0.5" + shown
    if kind in ("bool_type", "bool_parsing"):
        return "expected true or false (without quotes)" + shown
    if kind == "string_type":
        return 'expected a string in quotes, e.g. "text"' + shown
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a table, e.g. [{_key(loc)}] or {name} = {{ key = ... }}" + shown
    if kind in ("literal_error", "enum"):
        return _one_of(err.get("ctx", {}).get("expected", ""), got) + shown
    if kind == "union_tag_invalid":
        ctx = err.get("ctx", {})
        field = str(ctx.get("discriminator", "")).strip("'")
        tag = got.get(field) if isinstance(got, dict) else got
        return f"unknown {field} {tag!r:.80}: " + _one_of(ctx.get("expected_tags", ""), tag)
    msg = str(err["msg"]).removeprefix("Value error, ")
    return msg if isinstance(got, dict) or repr(got) in msg else msg + shown


def _not_backends(key: str, backend: str) -> str:
    """A ``[sandbox]`` key that ``backend`` does not take: whose it is, and its keys."""
    owners = [n for n, m in SANDBOX_MODELS.items() if key in m.model_fields and n != "auto"]
    known = [k for k in SANDBOX_MODELS[backend].model_fields if k != "backend"]
    whose = f"a key of {' and '.join(map(repr, owners))}; " if owners else ""
    hint = _did_you_mean(key, known)
    return f"sandbox backend {backend!r} does not take {key!r}{hint} ({whose}its keys: " + (
        ", ".join(known) + ")"
    )


def _one_of(expected: str, got: Any) -> str:
    """``expected one of 'a', 'b' (did you mean 'a'?)`` from pydantic's list of choices."""
    choices = re.findall(r"'([^']*)'", expected)
    hint = _did_you_mean(got, choices) if isinstance(got, str) else ""
    return f"expected one of {', '.join(map(repr, choices))}{hint}"


def _did_you_mean(word: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.7)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _known(keys: list[str]) -> str:
    return f" (the keys here are: {', '.join(keys)})" if keys else " (check the spelling)"


def _keys_at(loc: tuple[Any, ...]) -> list[str]:
    """The keys the task format allows at ``loc`` (empty where that is unknown)."""
    tp: Any = TaskSpec
    for part in loc:
        if isinstance(part, str) and _WRAPPER.match(part):
            continue
        tp = _inner(tp, part)
        if tp is None:
            return []
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [k for k in tp.model_fields if k != "root"]
    return []


def _inner(tp: Any, part: str | int) -> Any:
    """The type one step (a key, or an index) inside ``tp``, or None."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _inner(args[0], part)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        for option in options:  # a tagged union: the part is the tag
            if typing.get_origin(option) is typing.Annotated:
                member, *meta = typing.get_args(option)
                if any(getattr(m, "tag", None) == part for m in meta):
                    return member
        return _inner(options[0], part) if len(options) == 1 else None
    if isinstance(part, int):
        return args[0] if origin in (tuple, list) and args else None
    if origin is dict:
        return args[1]
    if isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
        return tp.model_fields[part].annotation
    return None


def _key(loc: Iterable[Any]) -> str:
    out, parts = "", list(loc)
    for i, part in enumerate(parts):
        if isinstance(part, int):
            out += f"[{part}]"
        elif _WRAPPER.match(part) or (i > 0 and (parts[i - 1], part) in TAGGED):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def source_dir(spec: TaskSpec) -> Path:
    return (Path(spec.root) / spec.source).resolve()


def code_files(spec: TaskSpec) -> list[str]:
    """Relative paths of the files that make the root revision (holdout files excluded)."""
    return [p for p in _all_files(source_dir(spec)) if not matches(p, _excluded(spec))]


def _excluded(spec: TaskSpec) -> tuple[str, ...]:
    return (*ALWAYS_EXCLUDED, *spec.exclude, *(spec.holdout.files if spec.holdout else ()))


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
        _check_knob(knob, f"knobs[{i}]", src, spec, file, files)


def _check_knob(
    knob: Knob, key: str, src: Path, spec: TaskSpec, file: Path, files: list[str]
) -> None:
    target = src / knob.file
    if target.is_file() and knob.file not in files and matches(knob.file, _excluded(spec)):
        raise TaskSpecError(
            f"{file}: key '{key}.file': knob \"{knob.name}\": file {knob.file!r} is kept "
            "out of the run by 'exclude' or 'holdout.files'"
        )
    if not target.is_file():
        where = "task folder" if src == Path(spec.root).resolve() else f"source folder {src}"
        editable = [f for f in files if matches(f, spec.editable)]
        hint = _did_you_mean(knob.file, editable) or _did_you_mean(knob.file, files)
        raise TaskSpecError(
            f"{file}: key '{key}.file': knob \"{knob.name}\": file {knob.file!r} does not "
            f"exist in the {where}{hint}"
        )
    if not matches(knob.file, spec.editable):
        raise TaskSpecError(f"{file}: key '{key}.file': {knob.file!r} is not an editable file")
    text = read_text(target, f"{file}: key '{key}.file': knob \"{knob.name}\": file {knob.file!r}")
    if knob_regex(knob).search(text) is None:
        where = f"pattern {knob.pattern!r}" if knob.pattern else f"assignment '{knob.target} = ...'"
        raise TaskSpecError(f"{file}: key '{key}': {where} not found in {knob.file}")


def read_text(path: Path, label: str) -> str:
    """The UTF-8 text of ``path``; else a :class:`TaskSpecError`: ``label`` (what the
    file is) is not UTF-8, where its first bad byte is, and what to do."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise TaskSpecError(
            f"{label} is not UTF-8 text: byte 0x{raw[e.start]:02x} on line {line} "
            f"({e.reason}); knobs are read and written as UTF-8, so save {path} as UTF-8 "
            "(e.g. iconv -f latin1 -t utf-8 OLD > NEW, for a Latin-1 file)"
        ) from None


def link_problem(root: Path, rel: str) -> str | None:
    """Why the symlink ``rel`` under ``root`` cannot enter a run (it loops, is absolute,
    or points outside ``root``), or None."""
    link = root / rel
    target = os.readlink(link)
    try:
        real = link.resolve(strict=True)
    except FileNotFoundError:
        real = link.resolve()  # dangling: judged by where it points
    except (OSError, RuntimeError):  # ELOOP (RuntimeError before Python 3.13)
        return f"symlink {rel!r} -> {target!r} is a symlink loop"
    if not real.is_relative_to(root.resolve()):
        return f"symlink {rel!r} -> {target!r} points outside the task's source folder"
    if os.path.isabs(target):
        return f"symlink {rel!r} -> {target!r} is absolute: make it relative (ln -sr)"
    if real.is_dir() and link.parent.resolve().is_relative_to(real):
        return f"symlink {rel!r} -> {target!r} loops: it points to a folder that holds it"
    return None


def knob_regex(knob: Knob) -> re.Pattern[str]:
    """The regex whose group 1 spans the knob's value in its file."""
    if knob.pattern is not None:
        return re.compile(knob.pattern, re.M)
    name = re.escape(knob.target)
    return re.compile(rf"^{name}\s*(?::[^=\n]+)?=\s*([^#\n]*?)\s*(?:#.*)?$", re.M)
