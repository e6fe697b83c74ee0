"""Named search profiles: ``[search] profile = "NAME"`` in a task file takes the
``[search]`` table of ``$REVTREE_HOME/profiles/NAME.toml`` (``revtree tune`` writes them)
as its defaults; a key the task's own ``[search]`` sets wins over the profile's.

Guaranteed: a profile is read when the task is loaded, so the run's stored spec holds the
merged ``[search]`` (with ``profile`` naming where it came from) and a later change of the
file changes no recorded run. An unknown name is one ``TaskSpecError`` line naming the
profiles there are. Not guaranteed: a profile written for one task suits another; the
profile is a plain TOML file a person may edit (its ``[tune]`` table, what tune measured,
is not read back).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from revtree.errors import TaskSpecError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def profiles_dir() -> Path:
    """Where profiles live: ``$REVTREE_HOME/profiles`` (default ``~/.revtree/profiles``)."""
    home = os.environ.get("REVTREE_HOME") or str(Path.home() / ".revtree")
    return Path(home).expanduser() / "profiles"


def profile_names() -> list[str]:
    """The names of the profiles there are, sorted."""
    folder = profiles_dir()
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def check_name(name: str) -> str:
    """``name`` if it can name a profile file (letters, digits, ``.``, ``_``, ``-``)."""
    if not NAME.match(name):
        raise TaskSpecError(
            f"profile name {name!r}: use letters, digits, '.', '_' and '-' (at most 64)"
        )
    return name


def read_profile(name: str) -> dict[str, Any]:
    """The ``[search]`` table of profile ``name``; a name with no file is one line that
    says which profiles there are (and the nearest, if one is near)."""
    path = profiles_dir() / f"{check_name(name)}.toml"
    if not path.is_file():
        known = profile_names()
        near = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        listed = ", ".join(known) if known else "none; `revtree tune` writes them"
        raise TaskSpecError(f"unknown profile {name!r}{hint}; profiles in {path.parent}: {listed}")
    try:
        search = tomllib.loads(path.read_text(encoding="utf-8")).get("search")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise TaskSpecError(f"{path}: not valid TOML: {e}") from e
    if not isinstance(search, dict):
        raise TaskSpecError(f"{path}: a profile needs a [search] table")
    return search


def apply_profile(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a task file's content) with its ``[search] profile``'s keys under its own;
    unchanged when it names none."""
    search = data.get("search")
    if not isinstance(search, dict) or not isinstance(search.get("profile"), str):
        return data
    base = {k: v for k, v in read_profile(search["profile"]).items() if k != "profile"}
    if search.get("policy", base.get("policy")) != base.get("policy", "greedy"):
        from revtree.tasks.search import COMMON_KEYS  # another policy: its own keys only

        base = {k: v for k, v in base.items() if k in COMMON_KEYS}
    return {**data, "search": {**base, **search}}


def _value(v: Any) -> str:
    """One TOML value of a flat table (strings, numbers, booleans, lists of them)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a JSON string is a TOML basic string


def write_profile(name: str, search: dict[str, Any], tune: dict[str, Any]) -> Path:
    """Write profile ``name``: ``search`` as its ``[search]`` table, ``tune`` (what was
    measured, for people) as ``[tune]``. Returns the file."""
    folder = profiles_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{check_name(name)}.toml"
    lines = ["# Written by `revtree tune`; use it with [search] profile = " + json.dumps(name)]
    for table, values in (("search", search), ("tune", tune)):
        lines += ["", f"[{table}]", *(f"{k} = {_value(v)}" for k, v in values.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tomllib.loads(path.read_text(encoding="utf-8"))  # what we wrote reads back
    return path
