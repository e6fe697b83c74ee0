"""The tunable constants of a program, found for ``revtree init`` as ``[[knobs]]``.

A constant is a module-level assignment of a literal to an UPPER_CASE name, made once,
on one line that the knob's default location regex finds (``NAME = 0.5  # comment``,
``NAME: int = 40``):

- a positive float spans a factor of ten each way on a log scale; a fraction (a name
  that says so: ``PROB``, ``FRAC``, ``RATIO``, ``SHARE``, ``FILL``, ``PCT``) at most 1 spans
  a tenth of it to 1, and a decay between 0.9 and 1 spans ten times its distance from 1
  each way (0.99 spans 0.9 to 0.999), both linear; zero spans -1 to 1; a negative value
  the mirror of a positive one, linear;
- an int stays an int: a positive one spans a quarter of it (at least 1) to four times
  it (at least itself + 4), on a log scale from 10 up; zero spans 0 to 4; a negative
  one the mirror;
- a bool is a choice of True and False; a string is a choice of itself and the string
  literals the program compares the name with (``NAME == "best_fit"``, ``NAME in
  ("a", "b")``) or quotes in the line's comment (``# or "best_fit"``), if any.

Left out: names that hold a seed or a version, a name assigned twice, anything else
(containers, expressions). What is not known here is whether a constant is a setting
of the solution or a part of the problem (a capacity, a deadline): ``init`` lists what
it wrote, for the user to remove those.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from revtree.tasks.load import knob_regex
from revtree.tasks.spec import Knob

CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")
SKIPPED = re.compile(r"SEED|VERSION|DEBUG|VERBOSE|QUIET")  # not what a search tunes
FRACTION = re.compile(r"PROB|FRAC|RATIO|SHARE|FILL|PCT|PERCENT")


def find_knobs(text: str, file: str) -> list[Knob]:
    """The knobs of the constants of ``text`` (the program ``file``), in file order;
    none for a file that does not parse."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    assigned = Counter(name for stmt in tree.body for name in _targets(stmt))
    knobs = []
    for stmt in tree.body:
        found = _constant(stmt)
        if found is None:
            continue
        name, value = found
        if assigned[name] != 1 or not CONSTANT.match(name) or SKIPPED.search(name):
            continue
        others = _compared_strings(tree, name) + _commented_strings(text, stmt.lineno)
        knob = _knob(name, value, file, others)
        if knob is not None and _located(knob, text, value):
            knobs.append(knob)
    return knobs


def _targets(stmt: ast.stmt) -> Iterable[str]:
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
        targets = [stmt.target]
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                yield node.id


def _constant(stmt: ast.stmt) -> tuple[str, Any] | None:
    """(name, value) of ``NAME = literal`` or ``NAME: T = literal``, else None."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target, value = stmt.targets[0], stmt.value
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        target, value = stmt.target, stmt.value
    else:
        return None
    if not isinstance(target, ast.Name) or stmt.lineno != getattr(value, "end_lineno", 0):
        return None
    try:
        literal = ast.literal_eval(value)
    except ValueError:
        return None
    return (target.id, literal) if isinstance(literal, int | float | str) else None


def _compared_strings(tree: ast.AST, name: str) -> list[str]:
    """The string literals ``name`` is compared with (==, !=, in, not in), in order."""
    out: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        if not any(isinstance(o, ast.Name) and o.id == name for o in operands):
            continue
        for o in operands:
            items = o.elts if isinstance(o, ast.Tuple | ast.List | ast.Set) else [o]
            for item in items:
                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                    out.append(item.value)
    return list(dict.fromkeys(out))


def _commented_strings(text: str, lineno: int) -> list[str]:
    """The quoted words of the comment on line ``lineno`` (``# or "best_fit"``)."""
    line = text.splitlines()[lineno - 1]
    comment = line[line.index("#") :] if "#" in line else ""
    return re.findall(r"""["']([\w.-]+)["']""", comment)


def _knob(name: str, value: Any, file: str, compared: list[str]) -> Knob | None:
    if isinstance(value, bool):
        return Knob(name=name, type="categorical", choices=(value, not value), file=file)
    if isinstance(value, str):
        choices = tuple(dict.fromkeys([value, *compared]))
        if len(choices) < 2:
            return None
        return Knob(name=name, type="categorical", choices=choices, file=file)
    if isinstance(value, int):
        low, high, log = _int_range(value)
        return Knob(name=name, type="int", low=low, high=high, log=log, file=file)
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        low_f, high_f, log = _float_range(name, value)
        if not math.isfinite(low_f) or not math.isfinite(high_f):  # 1e308 * 10: `inf`
            return None
        return Knob(name=name, type="float", low=low_f, high=high_f, log=log, file=file)
    return None


def _int_range(value: int) -> tuple[int, int, bool]:
    if value == 0:
        return 0, 4, False
    size = abs(value)
    low, high = max(1, size // 4), max(size * 4, size + 4)
    if value < 0:
        return -high, -low, False
    return low, high, size >= 10


def _float_range(name: str, value: float) -> tuple[float, float, bool]:
    if value == 0:
        return -1.0, 1.0, False
    size = abs(value)
    if value > 0 and size <= 1 and FRACTION.search(name):
        return _round(size / 10), 1.0, False
    if value > 0 and 0.9 <= size < 1:
        gap = 1 - size
        return _round(1 - 10 * gap), _round(1 - gap / 10), False
    low, high = _round(size / 10), _round(size * 10)
    if value < 0:
        return -high, -low, False
    return low, high, True


def _round(x: float) -> float:
    return float(f"{x:.4g}")


def _located(knob: Knob, text: str, value: Any) -> bool:
    """Whether the knob's location regex finds this very value (a knob ``init`` writes
    must load and be writable)."""
    match = knob_regex(knob).search(text)
    if match is None:
        return False
    try:
        return bool(ast.literal_eval(match.group(1)) == value)
    except (ValueError, SyntaxError):
        return False


def knobs_toml(knobs: Iterable[Knob]) -> list[str]:
    """The ``[[knobs]]`` tables of ``knobs``, as lines of task.toml."""
    lines: list[str] = []
    for k in knobs:
        lines += ["", "[[knobs]]", f"name = {json.dumps(k.name)}", f'type = "{k.type}"']
        if k.type == "categorical":
            lines.append(f"choices = {json.dumps(list(k.choices or ()))}")
        else:
            lines += [f"low = {_num(k, k.low)}", f"high = {_num(k, k.high)}"]
            if k.log:
                lines.append("log = true")
        lines.append(f"file = {json.dumps(k.file)}")
    return lines


def _num(knob: Knob, value: float | None) -> str:
    assert value is not None
    return str(int(value)) if knob.type == "int" else repr(float(value))


def describe(knob: Knob) -> str:
    """One knob in a few words: ``ANNEAL_STEPS int 100..1600 (log)``."""
    if knob.type == "categorical":
        return f"{knob.name} one of {', '.join(map(str, knob.choices or ()))}"
    scale = " (log)" if knob.log else ""
    return f"{knob.name} {knob.type} {_num(knob, knob.low)}..{_num(knob, knob.high)}{scale}"
