"""The worker side of the Ray runner: what one Ray task does on the machine Ray picked.

It runs the request in that machine's own sandbox backend, chosen by
:func:`revtree.sandboxes.choose_backend` with the task's ``[sandbox]`` section (Docker
with the task's image where the machine has an engine, else local with its warning; an
engine without the image is an error, never a silent downgrade), and hands that backend
exactly the GPU ids Ray assigned: as the Docker ``DeviceRequest``'s device ids, or as
``CUDA_VISIBLE_DEVICES`` for the local backend.

The backend is built once per worker process and kept (a Ray worker process runs one
task at a time, and Ray reuses it for the next task of the same shape), so Docker's warm
pool serves later evaluations too.

Cancel: the driver raises a flag for the task's token in the cluster's key-value store
(:func:`raise_flag`); a watcher thread here looks at it every ``WATCH`` seconds and
cancels the evaluation through the backend's own cancel (the local supervisor kills
every descendant; Docker removes its container), so the task ends with
``{"cancelled": True}``. A flag already up when the task starts (a cancel that reached
the task while Ray dispatched it) stops it before it runs anything. The driver's
``ray.cancel(force=True)`` comes only after a grace period, as a backstop: Ray's forced
exit SIGKILLs the worker's children, the local supervisor among them, and that would
leave the evaluation's own processes running.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from revtree.errors import Cancelled, RevtreeError, SandboxError
from revtree.sandboxes import BackendChoice, choose_backend, make_sandbox
from revtree.sandboxes.base import ExecRequest, Sandbox
from revtree.tasks.sandbox import DockerKeys, SandboxBase


class AssignedGpus:
    """A GPU lease that hands out the ids Ray assigned to the current task, nothing else
    (the Docker backend asks its lease for ``config.gpus`` ids)."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def assign(self, ids: Sequence[str]) -> None:
        """The ids Ray gave the task now running."""
        self.ids = list(ids)

    def acquire(self, n: int, cancel: threading.Event | None = None) -> list[str]:
        if n > len(self.ids):
            raise SandboxError(f"{n} GPU(s) asked for but Ray assigned {self.ids or 'none'}")
        return list(self.ids[:n])

    def release(self, ids: Sequence[str]) -> None:
        """Nothing to give back: Ray frees the GPUs when the task ends."""


@dataclasses.dataclass
class Backend:
    sandbox: Sandbox
    choice: BackendChoice
    lease: AssignedGpus


BACKENDS: dict[str, Backend] = {}  # one per (config, GPU count) in this worker process


def backend_for(config: SandboxBase, task_root: str | None, n_gpus: int) -> Backend:
    """This machine's sandbox backend for ``config`` with ``n_gpus`` GPUs per request."""
    if isinstance(config, DockerKeys):  # the backend leases the ids Ray assigned
        config = config.model_copy(update={"gpus": n_gpus})
    if getattr(config, "workspaces", None) is not None:  # a worker's backends are never
        config = config.model_copy(update={"workspaces": None})  # closed: its own temp dir
    key = f"{config.model_dump_json()}|{task_root}"
    if key not in BACKENDS:
        choice = choose_backend(config.backend, config)
        lease = AssignedGpus()
        sandbox = make_sandbox(
            choice.name,
            base_dir=Path(tempfile.gettempdir()) / "revtree-ray",
            config=config,
            task_root=task_root,
            labels={"revtree.runner": "ray"},
            gpu_pool=lease,
        )
        BACKENDS[key] = Backend(sandbox, choice, lease)
    return BACKENDS[key]


def placement() -> tuple[str, list[str]]:
    """(host, GPU ids) of the current Ray task: the host name and the Ray node's id
    (several raylets may share a machine), and the GPU ids Ray assigned."""
    import ray

    ctx = ray.get_runtime_context()
    host = f"{socket.gethostname()}/{ctx.get_node_id()[:8]}"
    return host, [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])]


FLAGS = "revtree-cancel"  # the key-value namespace of the cancel flags
WATCH = 0.2  # seconds between looks at the cancel flag while an evaluation runs


def kv() -> Any:
    """Ray's internal key-value store (in the GCS; every driver and worker reaches it)."""
    from ray.experimental import internal_kv

    return internal_kv


def raise_flag(token: str) -> None:
    """Ask the task of ``token`` to cancel its evaluation (see the module doc)."""
    kv()._internal_kv_put(token, b"1", overwrite=True, namespace=FLAGS)


def lower_flag(token: str) -> None:
    kv()._internal_kv_del(token, namespace=FLAGS)


def flag_up(token: str) -> bool:
    return bool(kv()._internal_kv_exists(token, namespace=FLAGS))


def watch_flag(token: str, cancel: threading.Event, done: threading.Event) -> None:
    """Set ``cancel`` once the flag of ``token`` is up (until ``done``)."""
    while not done.wait(WATCH):
        try:
            if flag_up(token):
                cancel.set()
                return
        except Exception as e:  # the GCS is briefly away: look again
            logging.getLogger(__name__).debug("cancel flag %s: %s", token, e)


def run_request(
    archive: bytes,
    request: ExecRequest,
    config: SandboxBase,
    task_root: str | None,
    token: str | None = None,
) -> dict[str, Any]:
    """The body of one Ray task: the request (its archive passed apart, through the
    object store) run here. Returns ``{"result": ExecResult, "backend": …}``, or
    ``{"error": …}`` for an error of revtree's (the image is missing, say), so that
    only Ray's own failures (a dead worker or node) reach the driver as exceptions;
    ``{"cancelled": True}`` when the flag of ``token`` was raised."""
    host, gpus = placement()
    cancel, done = threading.Event(), threading.Event()
    if token is not None:
        if flag_up(token):
            return {"cancelled": True, "host": host}
        threading.Thread(target=watch_flag, args=(token, cancel, done), daemon=True).start()
    try:
        backend = backend_for(config, task_root, len(gpus))
        backend.lease.assign(gpus)
        env = dict(request.env)
        if backend.choice.name == "local":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        request = dataclasses.replace(request, archive=archive, env=env)
        result = backend.sandbox.execute(request, cancel)
    except Cancelled:
        return {"cancelled": True, "host": host}
    except (RevtreeError, OSError) as e:
        return {"error": f"{type(e).__name__}: {e}", "host": host}
    finally:
        done.set()
    result = dataclasses.replace(result, host=host, gpus=tuple(gpus))
    choice = backend.choice
    return {
        "result": result,
        "host": host,
        "backend": (choice.name, choice.reason, choice.warning),
    }


def reap_here() -> int:
    """Reap what killed evaluations left behind by this worker's backends."""
    return sum(b.sandbox.reap() for b in BACKENDS.values())


__all__ = ["AssignedGpus", "lower_flag", "placement", "raise_flag", "reap_here", "run_request"]
