"""Sandboxes: where evaluations run (a local subprocess, or a Docker container).

``choose_backend`` says which backend a run gets and why; ``make_sandbox`` builds it.
``auto`` never downgrades silently: an engine that answers without the evaluation
image is an error naming the image and how to make it; only where no engine answers
does ``auto`` run locally, with a warning of what that does not protect against.
"""

from __future__ import annotations

import getpass
import importlib
import inspect
import os
from dataclasses import dataclass
from typing import Any

from revtree.errors import SandboxError
from revtree.sandboxes.base import ExecRequest, ExecResult, Limits, Sandbox

BACKENDS = {
    "local": "revtree.sandboxes.local.LocalSandbox",
    "docker": "revtree.sandboxes.docker.DockerSandbox",
    "ray": "revtree.sandboxes.ray.RaySandbox",  # the Ray runner ([runner] kind = "ray")
}
AUTO_ENV = "REVTREE_SANDBOX"  # forces what "auto" picks: "local" or "docker"
LOCAL_WARNING = (
    "the local sandbox does not isolate: evaluations run as this user ({user}), on the "
    "same file system, processes and network as revtree, with only resource limits, a "
    "throw-away folder and a filtered environment between them. The evaluated code can "
    "read whatever {user} can read (the run's database and git store under "
    "REVTREE_HOME, SSH keys, cloud credentials, the Docker socket if {user} may use "
    "it), reach the network, and leave files or processes behind; and a candidate can "
    "forge a single-step task's score, since its code runs where the evaluator runs; "
    "even a grade step does not stop it here, since it can write where the grader runs "
    "from (the Python installation, a .pth file). Run code you do not trust in Docker "
    "(`revtree sandbox bootstrap-base` makes the image) with an [evaluate.grade] step."
)


@dataclass(frozen=True)
class BackendChoice:
    """The backend a run gets (``local``, ``docker`` or a dotted path), why, and, for
    the local backend, what it does not protect against (None otherwise)."""

    name: str
    reason: str
    warning: str | None = None


def choose_backend(
    backend: str = "auto", config: Any = None, base_url: str | None = None
) -> BackendChoice:
    """The backend for ``backend`` (the task's or ``--sandbox``'s): as asked, unless
    ``auto``; ``auto`` is forced by ``$REVTREE_SANDBOX``, else ``docker`` where an
    engine answers and has the evaluation image (``config.image``, or the default),
    ``local`` where no engine answers. An engine without the image raises a
    :class:`SandboxError` naming the image and how to build it."""
    forced = os.environ.get(AUTO_ENV, "").strip()
    forced = "" if forced == "auto" else forced
    if backend != "auto":
        return _choice(backend, "asked for in the task or --sandbox")
    if forced:
        return _choice(forced, f"forced by {AUTO_ENV}={forced}")
    try:
        from revtree.sandboxes.docker import engine_answers, engine_url, missing_image
        from revtree.sandboxes.images import default_image, image_exists
    except ImportError as e:
        return _choice("local", f"auto: the Docker backend cannot be loaded ({e})")
    url = engine_url(base_url)
    client = engine_answers(base_url)
    if client is None and _engine_configured(base_url):
        # a socket or DOCKER_HOST is there: an engine that is slow or refuses us is an
        # error, never a reason to run untrusted code unisolated
        client = engine_answers(base_url, timeout=15.0)
        if client is None:
            from revtree.sandboxes.docker import connect

            try:
                client = connect(base_url, timeout=5.0)
            except SandboxError as e:
                raise SandboxError(
                    f"{e}; the engine is configured here (a socket or DOCKER_HOST) but does "
                    "not answer, so `auto` will not fall back to the unisolated local "
                    "backend: start the engine, or set sandbox.backend = 'local' (or "
                    "--sandbox local) to accept it"
                ) from e
    if client is None:
        return _choice("local", f"auto: no Docker engine answers at {url}")
    try:
        asked = getattr(config, "image", None)
        image = asked or default_image(client)
        if not image_exists(client, image):
            raise SandboxError(missing_image(image, url, asked))
    finally:
        client.close()
    return _choice("docker", f"auto: the Docker engine at {url} answers and has image {image}")


def _engine_configured(base_url: str | None) -> bool:
    """Whether this machine is set up for an engine: its unix socket exists, or a TCP
    engine is named (by ``base_url`` or ``DOCKER_HOST``)."""
    url = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if url.startswith("unix://"):
        return os.path.exists(url.removeprefix("unix://"))
    return True


def _choice(name: str, reason: str) -> BackendChoice:
    if name != "local":
        return BackendChoice(name, reason)
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return BackendChoice(name, reason, LOCAL_WARNING.format(user=user))


def resolve_auto(config: Any = None) -> str:
    """The name ``choose_backend("auto", config)`` picks."""
    return choose_backend("auto", config).name


def make_sandbox(backend: str, **kwargs: object) -> Sandbox:
    """Build a sandbox by name (``local``, ``docker``, ``auto``) or dotted path to a class.
    ``auto`` is resolved by :func:`choose_backend` (call it first to learn why).

    Keyword arguments go to the backend's class; one it does not take is a
    :class:`TypeError` naming the backend and the argument (never silently dropped).
    """
    if backend == "auto":
        url = kwargs.get("base_url")
        config = kwargs.get("config")
        backend = choose_backend(backend, config, url if isinstance(url, str) else None).name
        if backend == "local":
            kwargs.pop("base_url", None)  # it served the choice: no engine answers there
    path = BACKENDS.get(backend, backend)
    if "." not in path:
        raise ValueError(f"unknown sandbox backend {backend!r}; expected one of {sorted(BACKENDS)}")
    module, _, cls_name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), cls_name)
    params = inspect.signature(cls).parameters.values()
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        takes = [p.name for p in params if p.kind in keyword]
        if extra := sorted(set(kwargs) - set(takes)):
            raise TypeError(
                f"sandbox backend {backend!r} ({path}) does not take {', '.join(extra)}; "
                f"it takes {', '.join(takes) or 'no keyword arguments'}"
            )
    sandbox: Sandbox = cls(**kwargs)
    return sandbox


__all__ = [
    "AUTO_ENV",
    "BACKENDS",
    "LOCAL_WARNING",
    "BackendChoice",
    "ExecRequest",
    "ExecResult",
    "Limits",
    "Sandbox",
    "choose_backend",
    "make_sandbox",
    "resolve_auto",
]
