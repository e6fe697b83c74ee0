"""The sandbox backends, found by name: one module each, with a ``build`` function.

``build(context: SandboxContext, **options) -> Sandbox``: the context carries what a
run has for any backend (the ``[sandbox]`` section as the backend's own model, the
``Config`` beside its ``build``: ``revtree.tasks.sandbox.narrow``; the workspace folder, the task's
folder, a GPU pool, labels, the ``[runner]`` section, an event sink) and the backend
takes what it uses; ``options`` are the backend's own keyword arguments (Docker's
``base_url``, bubblewrap's ``disk_bytes``), which callers pass by name.

A name is a built-in (:data:`BUILTIN`), an import path (``package.module:build``, or a
module that has one), or an entry point of the group ``revtree.sandboxes``: resolved
by ``revtree.tasks.plugins.resolve_sandbox``, the code that validates
``[sandbox] backend`` when a task loads. A dotted path to a class (the older form)
builds it with the keyword arguments its constructor takes.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable
from typing import Any

from revtree.sandboxes.base import Sandbox, SandboxContext

BUILTIN = {
    "local": "revtree.sandboxes.local",
    "bwrap": "revtree.sandboxes.bwrap",  # local, in Linux namespaces
    "docker": "revtree.sandboxes.docker",
    "ray": "revtree.sandboxes.ray",  # the Ray runner ([runner] kind = "ray")
}
"""Built-in backend name -> the module whose ``build`` makes it (and whose ``Config`` is
its ``[sandbox]`` model, ``revtree.tasks.sandbox.BUILTIN``'s)."""
RUNNERS = ("ray",)
"""Built-ins that are no ``[sandbox] backend`` but run each evaluation in a worker's own
(the Ray runner): they take the ``[sandbox]`` section as it is, for the worker."""

CONTEXT = tuple(f.name for f in dataclasses.fields(SandboxContext))


def builder(backend: str) -> tuple[Callable[..., Any], str]:
    """The callable that builds ``backend`` and how to name it in errors. Raises
    ValueError (one line) where the name does not resolve."""
    if backend in BUILTIN:
        return importlib.import_module(BUILTIN[backend]).build, f"{BUILTIN[backend]}:build"
    from revtree.tasks.plugins import resolve_sandbox  # pydantic-free, but only on demand

    return resolve_sandbox(backend), backend


def build(backend: str, **kwargs: Any) -> Sandbox:
    """Build ``backend`` (a resolved name, never ``auto``) from keyword arguments: the
    :class:`SandboxContext` fields make the context (``config`` narrowed to the
    backend's own model: ``auto``'s keys that the picked backend takes), the rest are
    the backend's options. An option the backend does not take is a TypeError naming the backend and
    the argument (never silently dropped)."""
    make, where = builder(backend)
    if "config" in kwargs and backend not in RUNNERS:
        from revtree.tasks.sandbox import narrow  # pydantic, only when a backend is built

        kwargs["config"] = narrow(kwargs["config"], backend)
    if isinstance(make, type):  # a class by dotted path: its constructor's arguments
        sandbox: Sandbox = _checked(make, backend, where, kwargs)(**kwargs)
        return sandbox
    context = SandboxContext(**{k: v for k, v in kwargs.items() if k in CONTEXT})
    options = {k: v for k, v in kwargs.items() if k not in CONTEXT}
    built: Sandbox = _checked(make, backend, where, options, skip=1)(context, **options)
    return built


def _checked(
    make: Callable[..., Any], backend: str, where: str, kwargs: dict[str, Any], skip: int = 0
) -> Callable[..., Any]:
    """``make``, once its signature takes every keyword in ``kwargs`` (past its first
    ``skip`` parameters); else a TypeError saying which it does not take."""
    try:
        params = list(inspect.signature(make).parameters.values())[skip:]
    except (TypeError, ValueError):  # no signature to read: the call will tell
        return make
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return make
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    takes = [p.name for p in params if p.kind in keyword]
    if extra := sorted(set(kwargs) - set(takes)):
        raise TypeError(
            f"sandbox backend {backend!r} ({where}) does not take {', '.join(extra)}; "
            f"it takes {', '.join(takes) or 'no keyword arguments'}"
        )
    return make
