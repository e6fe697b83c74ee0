"""Sandboxes: where evaluations run (a local subprocess, the same in Linux namespaces
through bubblewrap, or a Docker container).

``choose_backend`` says which backend a run gets and why; ``make_sandbox`` builds it.
``auto`` never runs code that a model wrote (or that random mutations changed) without
isolation: without an engine, or on an engine without the evaluation image that cannot
build it, it takes ``bwrap`` where bubblewrap can make namespaces here, else refuses,
naming ``revtree sandbox bootstrap-base`` and ``--sandbox local``;
an engine without the image that can build it (root, debootstrap) builds it first, with
progress. The offline knob proposer's candidates only set the task's ``[[knobs]]``
constants in the user's own code: those run locally where Docker cannot take them,
with one line saying why.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from typing import Any

from revtree.errors import SandboxError
from revtree.sandboxes import registry
from revtree.sandboxes.base import (
    Capacity,
    ExecRequest,
    ExecResult,
    Limits,
    Sandbox,
    SandboxContext,
)
from revtree.sandboxes.registry import BUILTIN as BACKENDS

AUTO_ENV = "REVTREE_SANDBOX"  # forces what "auto" picks: "local", "bwrap" or "docker"
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

KNOB_WARNING = (
    "sandbox local without Docker's isolation ({cause}): the offline knob proposer only "
    "sets the task's [[knobs]] constants in your own code; code that a model writes (or "
    "random mutations change) runs only in Docker, or with --sandbox local"
)


@dataclass(frozen=True)
class BackendChoice:
    """The backend a run gets (``local``, ``docker`` or a dotted path), why, and, for
    the local backend, what it does not protect against (None otherwise)."""

    name: str
    reason: str
    warning: str | None = None


def choose_backend(
    backend: str = "auto",
    config: Any = None,
    base_url: str | None = None,
    *,
    knob_only: bool = False,
    writer: str = "a model writes this run's candidates",
    build: bool = False,
) -> BackendChoice:
    """The backend for ``backend`` (the task's or ``--sandbox``'s): as asked, unless
    ``auto``; ``auto`` is forced by ``$REVTREE_SANDBOX``, else ``docker`` where an
    engine answers and has the evaluation image (``config.image``, or the default).

    ``knob_only``: the candidates only change the task's knobs (the offline knob
    proposer), so where no engine answers, or the engine lacks the default image, they
    run locally. Other code (``writer``: who writes it, a sentence) never does: an
    engine without the default image builds it when ``build`` and this machine can
    (``images.cannot_bootstrap``), else a :class:`SandboxError` names the ways on, as
    does a missing ``config.image``."""
    forced = os.environ.get(AUTO_ENV, "").strip()
    forced = "" if forced == "auto" else forced
    if backend != "auto":
        return _choice(backend, "asked for in the task or --sandbox")
    if forced:
        return _choice(forced, f"forced by {AUTO_ENV}={forced}")
    try:
        from revtree.sandboxes.docker import engine_answers, engine_url, missing_image
        from revtree.sandboxes.images import default_image, image_exists
        from revtree.tasks.sandbox import DockerKeys
    except ImportError as e:
        return _choice("local", f"auto: the Docker backend cannot be loaded ({e})")
    url = engine_url(base_url)
    client = engine_answers(base_url)
    if client is None and (isolated := _bwrap_choice(f"no Docker engine answers at {url}")):
        return isolated
    if client is None and knob_only:
        return _knob_choice(f"no Docker engine answers at {url}")
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
                    "backend: start the engine, or pass --sandbox local (or set "
                    'sandbox.backend = "local" in task.toml) to accept it'
                ) from e
    if client is None:
        raise SandboxError(_refusal(writer, f"no Docker engine answers at {url}"))
    try:
        asked = config.image if isinstance(config, DockerKeys) else None
        image = asked or default_image(client)
        if not image_exists(client, image):
            if asked:
                raise SandboxError(missing_image(image, url, asked))
            if (why := _cannot_build()) or knob_only:
                cause = f"the Docker engine at {url} has no evaluation image"
                cause += f", and {why}" if why else "; `revtree sandbox bootstrap-base` makes one"
                if isolated := _bwrap_choice(cause):
                    return isolated
            if knob_only:
                return _knob_choice(
                    f"the Docker engine at {url} has no evaluation image; "
                    "`revtree sandbox bootstrap-base` makes one"
                )
            image = _build_base(client, url, writer, build)
    finally:
        client.close()
    return _choice("docker", f"auto: the Docker engine at {url} answers and has image {image}")


def _build_base(client: Any, url: str, writer: str, build: bool) -> str:
    """The base image, built now with progress on stderr, or the refusal saying why not."""
    from revtree.sandboxes.images import base_tag, bootstrap_base, cannot_bootstrap
    from revtree.sandboxes.progress import ESTIMATE_S, BuildProgress, fmt_seconds

    tag, why = base_tag(), cannot_bootstrap()
    what = f"the Docker engine at {url} has no evaluation image ({tag})"
    if why is not None:
        raise SandboxError(_refusal(writer, f"{what}, and this machine cannot build it: {why}"))
    if not build:
        raise SandboxError(
            f"{what}; `revtree run` builds it on first use (about {fmt_seconds(ESTIMATE_S)}, "
            "once), `revtree sandbox bootstrap-base` builds it now, and --sandbox local runs "
            "without Docker's isolation"
        )
    with BuildProgress(tag) as progress:
        return bootstrap_base(client, tag, progress=progress)


def _cannot_build() -> str | None:
    """Why this machine cannot build the base image (None: it can)."""
    from revtree.sandboxes.images import cannot_bootstrap

    return cannot_bootstrap()


def _bwrap_choice(cause: str) -> BackendChoice | None:
    """``bwrap``, where bubblewrap can make namespaces here, saying what it enforces."""
    from revtree.sandboxes.bwrap import enforced, usable

    if usable() is not None:
        return None
    return BackendChoice("bwrap", f"auto: {cause}; {enforced()}")


def _bwrap_missing() -> str:
    from revtree.sandboxes.bwrap import usable

    why = usable()
    return f" ({why}: --sandbox bwrap, which isolates without Docker, cannot run)" if why else ""


def _refusal(writer: str, what: str) -> str:
    """Why code that ``writer`` wrote does not run, and the two ways on."""
    return (
        f"{what}. {writer[0].upper()}{writer[1:]}, and those run only in an isolating "
        "sandbox: make the base image with `revtree sandbox bootstrap-base` (from Debian "
        "packages, as root, about 2-4 min, once; or `docker pull python:3.11-slim` where "
        "a registry answers), "
        "or pass --sandbox local to run them unisolated as this user (or set "
        f'sandbox.backend = "local" in task.toml){_bwrap_missing()}'
    )


def _knob_choice(cause: str) -> BackendChoice:
    """Local, for candidates that only set the task's knobs: one line says why."""
    return BackendChoice("local", f"auto: {cause}", KNOB_WARNING.format(cause=cause))


def _engine_configured(base_url: str | None) -> bool:
    """Whether this machine is set up for an engine: its unix socket exists, or a TCP
    engine is named (by ``base_url`` or ``DOCKER_HOST``)."""
    url = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if url.startswith("unix://"):
        return os.path.exists(url.removeprefix("unix://"))
    return True


def _choice(name: str, reason: str) -> BackendChoice:
    if name == "bwrap":
        from revtree.sandboxes.bwrap import enforced

        return BackendChoice(name, f"{reason}; {enforced()}")
    if name != "local":
        return BackendChoice(name, reason)
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid {os.getuid()}"
    return BackendChoice(name, reason, LOCAL_WARNING.format(user=user) + _bwrap_missing())


def resolve_auto(config: Any = None, **how: Any) -> str:
    """The name ``choose_backend("auto", config, **how)`` picks."""
    return choose_backend("auto", config, **how).name


def make_sandbox(backend: str, **kwargs: object) -> Sandbox:
    """Build a sandbox by name: ``auto`` (resolved by :func:`choose_backend`; call it
    first to learn why), a built-in, ``package.module:build`` or an entry point of
    ``revtree.sandboxes`` (see :mod:`revtree.sandboxes.registry`).

    Keyword arguments make the backend's :class:`SandboxContext` and its own options;
    an option it does not take is a :class:`TypeError` naming the backend and the
    argument (never silently dropped).
    """
    if backend == "auto":
        url = kwargs.get("base_url")
        config = kwargs.get("config")
        backend = choose_backend(backend, config, url if isinstance(url, str) else None).name
        if backend in ("local", "bwrap"):
            kwargs.pop("base_url", None)  # it served the choice: no engine answers there
    return registry.build(backend, **kwargs)


__all__ = [
    "AUTO_ENV",
    "BACKENDS",
    "KNOB_WARNING",
    "LOCAL_WARNING",
    "BackendChoice",
    "Capacity",
    "ExecRequest",
    "ExecResult",
    "Limits",
    "Sandbox",
    "SandboxContext",
    "choose_backend",
    "make_sandbox",
    "resolve_auto",
]
