"""Plugins named from a task file: search policies (``[search] policy``) and sandbox
backends (``[sandbox] backend``) that are not built in.

A policy that is not one of :data:`revtree.tasks.names.POLICIES` is named either by
import path, ``"package.module:Class"`` (or ``"package.module.Class"``), or by a plain
name that an installed package registers in the entry-point group ``revtree.policies``
(``[project.entry-points."revtree.policies"] toy = "package.module:Class"``).

The task layer may not import the orchestrator, so the methods of its ``Policy``
protocol are listed here by name (:data:`METHODS`; a test keeps the two in step). A
policy class is built as ``Class(seed, **options)``: the run's ``[search] seed`` and
the ``[search.options]`` table as keyword arguments.

A sandbox backend is named the same ways (group ``revtree.sandboxes``) and resolves to a
module with a ``build(context) -> Sandbox`` function, or to that function itself
(:func:`resolve_sandbox`); the sandboxes layer calls it (``revtree.sandboxes.registry``).
A ``Config`` beside ``build`` in that module (:func:`sandbox_config_of`) is the model
``[sandbox]`` is validated as for it (``revtree.tasks.sandbox``).

An edit format (``[agents] edit_format``, group ``revtree.edit_formats``) resolves to a
class built with no arguments, checked to have the members of
``revtree.agents.formats.base.EditFormat`` (:data:`FORMAT_MEMBERS`); the agents layer
builds it (``revtree.agents.formats.make_format``).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import sys
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

from revtree.tasks.names import EDIT_FORMATS, POLICIES, SANDBOXES

GROUP = "revtree.policies"
"""The entry-point group installed packages register policies in."""
SANDBOX_GROUP = "revtree.sandboxes"
"""The entry-point group installed packages register sandbox backends in."""
EDIT_FORMAT_GROUP = "revtree.edit_formats"
"""The entry-point group installed packages register edit formats in."""

METHODS = ("attach", "select", "update", "state", "load_state")
"""The methods of ``revtree.orchestrator.policies.base.Policy`` (checked at task load;
the data members ``name``, ``slow`` and ``note`` are checked when the policy is built)."""


def resolve_policy(ref: str) -> type[Any]:
    """The policy class ``ref`` names (import path or entry-point name), checked to have
    the protocol's methods. Raises ValueError saying, in one line, what failed: the
    module does not import, the attribute is missing, the entry point is unknown or does
    not load, the object is not a class, or which methods it lacks."""
    found = find(ref, "policy", GROUP, POLICIES, "'package.module:Class'")
    if not isinstance(found, type):
        raise ValueError(f"policy {ref!r} is a {type(found).__name__}, not a class")
    if missing := [m for m in METHODS if not callable(getattr(found, m, None))]:
        raise ValueError(
            f"policy {ref!r} lacks the method(s) {', '.join(missing)} of the Policy protocol "
            "(inherit revtree.orchestrator.policies.base.PolicyDefaults for attach)"
        )
    return found


def resolve_sandbox(ref: str) -> Any:
    """The builder ``ref`` names (a module's ``build``, or the callable itself: a
    ``build(context)`` function, or a ``Sandbox`` class, built with keyword arguments).
    Raises ValueError saying, in one line, what failed (as :func:`resolve_policy`)."""
    kind = "sandbox backend"
    found = find(ref, kind, SANDBOX_GROUP, SANDBOXES, "'package.module:build'")
    if isinstance(found, ModuleType):
        found = getattr(found, "build", None)
        if not callable(found):
            raise ValueError(f"{kind} {ref!r}: the module has no build(context) function")
    if not callable(found):
        raise ValueError(f"{kind} {ref!r} is a {type(found).__name__}, not build(context)")
    return found


def sandbox_config_of(ref: str) -> Any:
    """The ``Config`` that the module of ``ref``'s builder declares beside ``build`` (the
    pydantic model of its ``[sandbox]`` keys), or None where it declares none. Raises
    ValueError as :func:`resolve_sandbox` where ``ref`` does not resolve."""
    found = find(ref, "sandbox backend", SANDBOX_GROUP, SANDBOXES, "'package.module:build'")
    name = getattr(found, "__module__", None) or ""
    module = found if isinstance(found, ModuleType) else sys.modules.get(name)
    return getattr(module, "Config", None)


FORMAT_MEMBERS = {"name": str, "help": str, "tools": tuple, "parse": None, "edit_of": None}
"""The members of ``revtree.agents.formats.base.EditFormat``: a type, or None for a
method (a test keeps the two in step)."""


def resolve_edit_format(ref: str) -> type[Any]:
    """The edit format class ``ref`` names (import path or entry-point name), checked to
    have :data:`FORMAT_MEMBERS`. Raises ValueError saying, in one line, what failed (as
    :func:`resolve_policy`)."""
    kind = "edit format"
    found = find(ref, kind, EDIT_FORMAT_GROUP, EDIT_FORMATS, "'package.module:Class'")
    if not isinstance(found, type):
        raise ValueError(f"{kind} {ref!r} is a {type(found).__name__}, not a class")
    wrong = [
        name
        for name, typ in FORMAT_MEMBERS.items()
        if not (
            callable(getattr(found, name, None))
            if typ is None
            else isinstance(getattr(found, name, None), typ)
        )
    ]
    if wrong:
        raise ValueError(
            f"{kind} {ref!r} lacks (or mistypes) {', '.join(wrong)} of EditFormat "
            "(inherit revtree.agents.formats.base.EditFormat)"
        )
    return found


def find(ref: str, kind: str, group: str, builtins: tuple[str, ...], form: str) -> Any:
    """What ``ref`` names: an import path (``module:attr``, ``module.attr``; a plain
    module too for ``module:`` forms), else an entry point of ``group``. ``kind``,
    ``builtins`` and ``form`` word the one-line ValueError."""
    if ":" in ref or "." in ref:
        return _import(ref, kind)
    return _entry_point(ref, kind, group, builtins, form)


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


def _import(ref: str, kind: str) -> Any:
    module, _, attr = ref.partition(":") if ":" in ref else ref.rpartition(".")
    if not module or (not attr and ":" not in ref):
        raise ValueError(f"{kind} {ref!r}: expected 'package.module:Class'")
    try:
        found: Any = importlib.import_module(module)
    except Exception as e:  # the user's module: any error while importing it
        raise ValueError(
            f"{kind} {ref!r}: cannot import module {module!r} ({type(e).__name__}: {e})"
        ) from None
    for part in attr.split(".") if attr else ():
        if not hasattr(found, part):
            raise ValueError(f"{kind} {ref!r}: module {module!r} has no attribute {attr!r}")
        found = getattr(found, part)
    return found


def _entry_point(name: str, kind: str, group: str, builtins: tuple[str, ...], form: str) -> Any:
    found = sorted(entry_points(group=group, name=name), key=lambda ep: ep.value)
    if not found:
        installed = sorted({ep.name for ep in entry_points(group=group)})
        close = difflib.get_close_matches(name, [*builtins, *installed], n=1, cutoff=0.7)
        raise ValueError(
            f"unknown {kind} {name!r}: expected one of {', '.join(map(repr, builtins))}, "
            f"an entry point of group {group!r} (installed: {', '.join(installed) or 'none'}) "
            f"or {form}" + (f" (did you mean {close[0]!r}?)" if close else "")
        )
    if len({ep.value for ep in found}) > 1:
        raise ValueError(
            f"{kind} {name!r} is registered twice in {group!r}: "
            + ", ".join(ep.value for ep in found)
        )
    try:
        return found[0].load()
    except Exception as e:  # the installed package's module: any error while loading it
        raise ValueError(
            f"{kind} {name!r}: entry point {found[0].value!r} does not load "
            f"({type(e).__name__}: {e})"
        ) from None
