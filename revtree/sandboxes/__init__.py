"""Sandboxes: where evaluations run (a local subprocess now; Docker next)."""

from __future__ import annotations

from revtree.sandboxes.base import ExecRequest, ExecResult, Limits, Sandbox

BACKENDS = {"local": "revtree.sandboxes.local.LocalSandbox"}


def make_sandbox(backend: str, **kwargs: object) -> Sandbox:
    """Build a sandbox by name (``local``) or dotted path to a class."""
    import importlib

    if backend == "auto":
        backend = "local"
    path = BACKENDS.get(backend, backend)
    if "." not in path:
        raise ValueError(f"unknown sandbox backend {backend!r}; expected one of {sorted(BACKENDS)}")
    module, _, cls = path.rpartition(".")
    sandbox: Sandbox = getattr(importlib.import_module(module), cls)(**kwargs)
    return sandbox


__all__ = ["BACKENDS", "ExecRequest", "ExecResult", "Limits", "Sandbox", "make_sandbox"]
