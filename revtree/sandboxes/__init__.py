"""Sandboxes: where evaluations run (a local subprocess, or a Docker container)."""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any

from revtree.sandboxes.base import ExecRequest, ExecResult, Limits, Sandbox

BACKENDS = {
    "local": "revtree.sandboxes.local.LocalSandbox",
    "docker": "revtree.sandboxes.docker.DockerSandbox",
}
AUTO_ENV = "REVTREE_SANDBOX"  # forces what "auto" picks: "local" or "docker"


def resolve_auto(config: Any = None) -> str:
    """``docker`` when an engine answers and the evaluation image is on it, else
    ``local``. The environment variable ``REVTREE_SANDBOX`` overrides the choice."""
    forced = os.environ.get(AUTO_ENV, "").strip()
    if forced:
        return forced
    try:
        from revtree.sandboxes.docker import engine_answers
        from revtree.sandboxes.images import default_image, image_exists
    except ImportError:
        return "local"
    client = engine_answers()
    if client is None:
        return "local"
    try:
        image = getattr(config, "image", None) or default_image(client)
        return "docker" if image_exists(client, image) else "local"
    except Exception:
        return "local"
    finally:
        client.close()


def make_sandbox(backend: str, **kwargs: object) -> Sandbox:
    """Build a sandbox by name (``local``, ``docker``, ``auto``) or dotted path to a class.

    Keyword arguments a backend does not take (``config`` for the local one, say) are
    dropped, so one call site serves every backend.
    """
    if backend == "auto":
        backend = resolve_auto(kwargs.get("config"))
    path = BACKENDS.get(backend, backend)
    if "." not in path:
        raise ValueError(f"unknown sandbox backend {backend!r}; expected one of {sorted(BACKENDS)}")
    module, _, cls_name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), cls_name)
    params = inspect.signature(cls).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    sandbox: Sandbox = cls(**kwargs)
    return sandbox


__all__ = [
    "AUTO_ENV",
    "BACKENDS",
    "ExecRequest",
    "ExecResult",
    "Limits",
    "Sandbox",
    "make_sandbox",
    "resolve_auto",
]
