"""The ``[sandbox]`` section: one pydantic model per backend, told apart by ``backend``.

:class:`SandboxBase` holds the keys every backend honours (limits and environment, which
the evaluator puts into each request); each built-in backend's model adds its own:
:class:`LocalConfig` ``preload`` and ``workspaces``, :class:`BwrapConfig` none,
:class:`DockerConfig` the container's (image, CPUs, GPUs, network, mounts, warm pool,
outputs, disk). The backend
modules name theirs as ``Config`` beside ``build`` (``revtree.sandboxes.local.Config``
is :class:`LocalConfig`); the models live here because the task layer validates
``[sandbox]`` when a task loads and may not import the sandboxes.

``auto`` (:class:`AutoConfig`) takes the keys of every built-in it may pick (the union
of their keys: Docker's); the backend it picks gets them narrowed to its own model when
the run is wired (:func:`narrow`: ``revtree.sandboxes.registry.build``), so Docker's keys
do not apply where ``auto`` picks ``bwrap`` or ``local``. A backend that is not built in
is validated as the ``Config`` its module declares beside ``build`` (a subclass of
:class:`SandboxBase`), else as :class:`SandboxBase`: a key it does not declare is a
one-line error naming the key and the backend.

``[sandbox] backend`` overridden (``--sandbox NAME``, a reloaded run's own backend)
keeps the keys the named backend takes (:func:`keys_for`): the others were the task's
backend's.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    PlainValidator,
    SerializeAsAny,
    Tag,
    ValidationError,
    create_model,
    field_validator,
)

from revtree.tasks.names import SANDBOXES, is_secret
from revtree.tasks.plugins import resolve_sandbox, sandbox_config_of
from revtree.tasks.sections import Duration, Globs, Section, Size


class SandboxBase(Section):
    """The keys every backend honours: limits and environment of each evaluation."""

    backend: str = Field(
        "auto",
        description="'auto' uses docker when an engine answers and has the image, else "
        "bwrap (Linux namespaces) where bubblewrap works, else refuses code a model writes; "
        "or 'local', 'bwrap', 'docker', a 'package.module:build' of your own, or a name an "
        "installed package registers in the entry-point group 'revtree.sandboxes'.",
    )
    memory: Size = Field(4 * 2**30, description="Address-space / memory limit per evaluation.")
    cpu_seconds: Duration | None = Field(None, description="CPU-time limit per evaluation.")
    output_cap: Size = Field(2**20, description="Bytes of stdout and of stderr kept per run.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    pass_env: Globs = Field((), description="Host variables passed through by name.")

    @field_validator("env", "pass_env")
    @classmethod
    def _no_secrets(cls, value: Any) -> Any:
        names = value.keys() if isinstance(value, dict) else value
        bad = [n for n in names if is_secret(n)]
        if bad:
            raise ValueError(f"secrets never enter a sandbox; remove {bad}")
        return value


class LocalKeys(SandboxBase):
    """The local backend's own keys (which ``auto`` takes too, as it may pick it)."""

    preload: tuple[str, ...] = Field(
        (),
        description="Packages the local backend's fork server may also load once, ahead "
        "of the evaluations, where the task's protected files import them (beside the "
        "standard library, numpy and scipy; e.g. 'pandas'): each evaluation is still a "
        "fresh fork, without their import. Name only packages that are safe to fork after "
        "loading (no GPU touched as they load).",
    )

    workspaces: Path | None = Field(
        None,
        description="An existing folder for the local backend's evaluation workspaces, "
        "instead of the run's own (a folder of its own is made in it per session, and "
        "removed at the end). A tmpfs such as /dev/shm spares the disk's file system the "
        "making and removal of a workspace per evaluation: 10-20% of revtree's own cost "
        "per candidate where evaluations take milliseconds (ext4, here). The workspaces "
        "then live in memory: only for evaluations that write little there.",
    )

    @field_validator("workspaces")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_absolute():
            raise ValueError(f"workspaces is an absolute path (like /dev/shm), not {value}")
        return value

    @field_validator("preload")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [n for n in value if not n.isidentifier()]
        if bad:
            raise ValueError(f"preload names top-level packages (like 'pandas'), not {bad}")
        return value


class LocalConfig(LocalKeys):
    """``backend = "local"``: a subprocess as this user; the common keys, ``preload`` and
    ``workspaces``."""

    backend: Literal["local"] = "local"


class BwrapConfig(SandboxBase):
    """``backend = "bwrap"``: the local supervisor in Linux namespaces; the common keys."""

    backend: Literal["bwrap"] = "bwrap"


class DockerKeys(SandboxBase):
    """The keys of the Docker backend (which ``auto`` takes too, as it may pick it)."""

    image: str | None = Field(
        None,
        description="Docker image of the evaluations. Default: the locally bootstrapped "
        "revtree-base image if the engine has it, else python:3.11-slim.",
    )
    cpus: float | None = Field(None, gt=0, description="Docker: CPUs per evaluation (nano_cpus).")
    gpus: int = Field(
        0, ge=0, description="Docker: GPUs per evaluation, distinct among concurrent ones."
    )
    network: Literal["none", "bridge", "host"] = Field(
        "none", description="Docker: network of the container; 'none' unless you opt in."
    )
    mounts: dict[str, str] = Field(
        default_factory=dict,
        description="Docker: read-only bind mounts, container path -> host path (relative "
        "host paths are relative to task.toml), e.g. datasets.",
    )
    warm_pool: int = Field(
        2,
        ge=0,
        le=64,
        description="Docker: containers created and started ahead (running only an idle "
        "process, never reused), so an evaluation skips container start-up; 0 turns it off.",
    )
    outputs: Globs = Field(
        (), description="Docker: workspace files copied out after each evaluation (size-capped)."
    )
    disk: Size = Field(
        512 * 2**20, description="Docker: size cap of the writable workspace (and of /tmp)."
    )

    @field_validator("mounts")
    @classmethod
    def _absolute_targets(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [t for t in value if not t.startswith("/") or t.rstrip("/") in ("", "/sandbox")]
        if bad:
            raise ValueError(f"mount targets must be absolute container paths: {bad}")
        return value

    @field_validator("outputs")
    @classmethod
    def _relative_outputs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [o for o in value if o.startswith("/") or ".." in o.split("/") or not o.strip()]
        if bad:
            raise ValueError(f"outputs must be paths inside the workspace: {bad}")
        return value


class DockerConfig(DockerKeys):
    """``backend = "docker"``: a hardened container per evaluation."""

    backend: Literal["docker"] = "docker"


class AutoConfig(DockerKeys, LocalKeys):
    """``backend = "auto"`` (the default): the keys of every built-in it may pick, each
    narrowed to the picked backend's model when the run is wired (:func:`narrow`)."""

    backend: Literal["auto"] = "auto"


BUILTIN: dict[str, type[SandboxBase]] = {
    "auto": AutoConfig,
    "local": LocalConfig,
    "bwrap": BwrapConfig,
    "docker": DockerConfig,
}
"""Built-in ``[sandbox] backend`` name -> its model (the backend module's ``Config``)."""

PLUGIN = "plugin"
"""The union tag of a ``[sandbox]`` whose backend is not built in."""


class BadSandbox(ValueError):
    """Such a ``[sandbox]`` refused: ``key`` says where (``backend``: the name does not
    resolve; else the first key its model refuses), so ``tasks.load`` can name it."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def config_model(backend: str) -> type[SandboxBase]:
    """The model ``[sandbox]`` validates as for ``backend``: a built-in's, else the
    ``Config`` its module declares beside ``build`` (a subclass of :class:`SandboxBase`),
    else :class:`SandboxBase`. Raises ValueError (one line) where it does not resolve."""
    if backend in BUILTIN:
        return BUILTIN[backend]
    resolve_sandbox(backend)  # a one-line ValueError where the name does not resolve
    model = sandbox_config_of(backend)
    if model is None:
        return SandboxBase
    if not (isinstance(model, type) and issubclass(model, SandboxBase)):
        raise ValueError(
            f"sandbox backend {backend!r}: its Config is not a subclass of "
            "revtree.tasks.sandbox.SandboxBase"
        )
    return _by_path(model) if model in BUILTIN.values() else model


@functools.cache
def _by_path(model: type[SandboxBase]) -> type[SandboxBase]:
    """A built-in's model for the built-in named by its path (``revtree.sandboxes.
    docker:build``): its keys, with that path as ``backend``."""
    opened: type[SandboxBase] = create_model(model.__name__, __base__=model, backend=(str, ...))
    return opened


def _plugin(value: Any) -> SandboxBase:
    """``[sandbox]`` of a backend that is not built in, as its own model."""
    if isinstance(value, SandboxBase):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"expected a table, e.g. [sandbox] (got {value!r:.80})")
    backend = str(value.get("backend"))
    try:
        model = config_model(backend)
    except ValueError as e:  # told as the key 'sandbox.backend' (tasks.load)
        raise BadSandbox(str(e), "backend") from None
    try:
        return model.model_validate(value)
    except ValidationError as e:  # told as the first key's (tasks.load)
        problems = e.errors()
        why = "; ".join(_problem(err, backend, model) for err in problems)
        key = ".".join(str(p) for p in problems[0]["loc"])
        raise BadSandbox(why, key) from None


def _problem(err: Any, backend: str, model: type[SandboxBase]) -> str:
    key = ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        known = ", ".join(k for k in model.model_fields if k != "backend")
        return f"sandbox backend {backend!r} does not take {key!r} (its keys: {known})"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"sandbox backend {backend!r}: key {key!r}: {msg}"


def _tag(value: Any) -> str:
    name = (
        value.get("backend", "auto") if isinstance(value, dict) else getattr(value, "backend", "")
    )
    return name if name in SANDBOXES else PLUGIN


SandboxConfig = Annotated[
    Annotated[AutoConfig, Tag("auto")]
    | Annotated[LocalConfig, Tag("local")]
    | Annotated[BwrapConfig, Tag("bwrap")]
    | Annotated[DockerConfig, Tag("docker")]
    | Annotated[SerializeAsAny[SandboxBase], PlainValidator(_plugin), Tag(PLUGIN)],
    Discriminator(_tag),
]
"""The ``[sandbox]`` section: one model per backend, by ``backend`` (see the module)."""


def narrow(config: SandboxBase | None, backend: str) -> SandboxBase:
    """``config`` as ``backend``'s model: the keys that model takes, defaults for the
    rest (``auto``'s config for the backend it picked; None: the defaults)."""
    model = config_model(backend)
    if config is None:
        return model.model_validate({"backend": backend})
    if not isinstance(config, SandboxBase):
        raise TypeError(
            f"sandbox backend {backend!r}: config is a {type(config).__name__}, "
            "not a [sandbox] model (revtree.tasks.sandbox)"
        )
    if type(config) is model and config.backend == backend:
        return config
    return model.model_validate(keys_for(config.model_dump(), backend, model))


def keys_for(
    data: dict[str, Any], backend: str, model: type[SandboxBase] | None = None
) -> dict[str, Any]:
    """The keys of ``data`` (a ``[sandbox]`` table) that ``backend`` takes, with
    ``backend`` set: what an overridden backend keeps of the task's section."""
    try:
        fields = (model or config_model(backend)).model_fields
    except ValueError:  # validation names what is wrong with the backend
        return {**data, "backend": backend}
    return {**{k: v for k, v in data.items() if k in fields}, "backend": backend}


def gpus_of(config: SandboxBase) -> int:
    """GPUs per evaluation that ``config`` asks for (a key of Docker's, and ``auto``'s)."""
    return config.gpus if isinstance(config, DockerKeys) else 0


def without_pool(config: SandboxBase) -> SandboxBase:
    """``config`` for a single evaluation: no warm pool (where it has one: Docker's)."""
    return config.model_copy(update={"warm_pool": 0}) if isinstance(config, DockerKeys) else config


__all__ = [
    "BUILTIN",
    "PLUGIN",
    "AutoConfig",
    "BadSandbox",
    "BwrapConfig",
    "DockerConfig",
    "DockerKeys",
    "LocalConfig",
    "SandboxBase",
    "SandboxConfig",
    "config_model",
    "gpus_of",
    "keys_for",
    "narrow",
    "without_pool",
]
