"""Search policies that are not built in, found from a task file's ``[search] policy``.

A policy that is not one of :data:`revtree.tasks.names.POLICIES` is named either by
import path, ``"package.module:Class"`` (or ``"package.module.Class"``), or by a plain
name that an installed package registers in the entry-point group ``revtree.policies``
(``[project.entry-points."revtree.policies"] toy = "package.module:Class"``).

The task layer may not import the orchestrator, so the methods of its ``Policy``
protocol are listed here by name (:data:`METHODS`; a test keeps the two in step). A
policy class is built as ``Class(seed, **options)``: the run's ``[search] seed`` and
the ``[search.options]`` table as keyword arguments.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from importlib.metadata import entry_points
from typing import Any

from revtree.tasks.names import POLICIES

GROUP = "revtree.policies"
"""The entry-point group installed packages register policies in."""

METHODS = ("attach", "select", "update", "state", "load_state")
"""The methods of ``revtree.orchestrator.policies.base.Policy`` (checked at task load;
the data members ``name``, ``slow`` and ``note`` are checked when the policy is built)."""


def resolve_policy(ref: str) -> type[Any]:
    """The policy class ``ref`` names (import path or entry-point name), checked to have
    the protocol's methods. Raises ValueError saying, in one line, what failed: the
    module does not import, the attribute is missing, the entry point is unknown or does
    not load, the object is not a class, or which methods it lacks."""
    found = _import(ref) if ":" in ref or "." in ref else _entry_point(ref)
    if not isinstance(found, type):
        raise ValueError(f"policy {ref!r} is a {type(found).__name__}, not a class")
    if missing := [m for m in METHODS if not callable(getattr(found, m, None))]:
        raise ValueError(
            f"policy {ref!r} lacks the method(s) {', '.join(missing)} of the Policy protocol "
            "(inherit revtree.orchestrator.policies.base.PolicyDefaults for attach)"
        )
    return found


def check_options(klass: type[Any], ref: str, options: dict[str, Any]) -> None:
    """Raise ValueError unless ``klass(seed, **options)`` fits the constructor's signature."""
    try:
        signature = inspect.signature(klass)
    except (TypeError, ValueError):  # no signature to read (a C type): the call will tell
        return
    try:
        signature.bind(0, **options)
    except TypeError as e:
        raise ValueError(
            f"[search.options] does not fit the constructor of policy {ref!r} {signature}: {e}"
        ) from None


def _import(ref: str) -> Any:
    module, _, attr = ref.partition(":") if ":" in ref else ref.rpartition(".")
    if not module or not attr:
        raise ValueError(f"policy {ref!r}: expected 'package.module:Class'")
    try:
        found: Any = importlib.import_module(module)
    except Exception as e:  # the user's module: any error while importing it
        raise ValueError(
            f"policy {ref!r}: cannot import module {module!r} ({type(e).__name__}: {e})"
        ) from None
    for part in attr.split("."):
        if not hasattr(found, part):
            raise ValueError(f"policy {ref!r}: module {module!r} has no attribute {attr!r}")
        found = getattr(found, part)
    return found


def _entry_point(name: str) -> Any:
    found = sorted(entry_points(group=GROUP, name=name), key=lambda ep: ep.value)
    if not found:
        installed = sorted({ep.name for ep in entry_points(group=GROUP)})
        close = difflib.get_close_matches(name, [*POLICIES, *installed], n=1, cutoff=0.7)
        raise ValueError(
            f"unknown policy {name!r}: expected one of {', '.join(map(repr, POLICIES))}, "
            f"an entry point of group {GROUP!r} (installed: {', '.join(installed) or 'none'}) "
            "or 'package.module:Class'" + (f" (did you mean {close[0]!r}?)" if close else "")
        )
    if len({ep.value for ep in found}) > 1:
        raise ValueError(
            f"policy {name!r} is registered twice in {GROUP!r}: "
            + ", ".join(ep.value for ep in found)
        )
    try:
        return found[0].load()
    except Exception as e:  # the installed package's module: any error while loading it
        raise ValueError(
            f"policy {name!r}: entry point {found[0].value!r} does not load "
            f"({type(e).__name__}: {e})"
        ) from None
