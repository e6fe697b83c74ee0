"""Task specifications: the ``task.toml`` format, its validation and loading.

The names below are imported on first use (PEP 562): ``tasks.names`` (the policy names,
which variables are secret) needs no pydantic, and importing it loads no more."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from revtree.tasks.load import code_files, holdout_files, knob_regex, load_task, matches
    from revtree.tasks.spec import Knob, TaskSpec, parse_duration, parse_size

_LAZY = {
    **dict.fromkeys(("code_files", "holdout_files", "knob_regex", "load_task", "matches"), "load"),
    **dict.fromkeys(("Knob", "TaskSpec", "parse_duration", "parse_size"), "spec"),
}

__all__ = [
    "Knob",
    "TaskSpec",
    "code_files",
    "holdout_files",
    "knob_regex",
    "load_task",
    "matches",
    "parse_duration",
    "parse_size",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
