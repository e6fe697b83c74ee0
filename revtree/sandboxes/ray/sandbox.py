"""The driver side of the Ray runner: a :class:`Sandbox` whose ``execute`` is a Ray task."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import socket
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from revtree.errors import Cancelled, SandboxError
from revtree.sandboxes.base import ExecRequest, ExecResult
from revtree.sandboxes.ray.worker import run_request
from revtree.tasks.runner import RunnerConfig
from revtree.tasks.sections import SandboxConfig

EventSink = Callable[[str, str, int | None], None]  # (kind, message, node id)
ARCHIVES_KEPT = 64  # distinct archives whose object-store copy is kept for reuse
POLL = 0.05  # seconds between looks at the cancel event while a task runs
SETTLE = 20.0  # seconds a cancelled task is cancelled again until it has ended


def ray_module() -> Any:
    try:
        import ray
    except ImportError as e:
        raise SandboxError(f"the Ray runner needs Ray: pip install 'revtree[ray]' ({e})") from None
    return ray


def bootstrap_address(address: str) -> tuple[str, int] | None:
    """(host, port) that ``address`` names, or that ``auto`` resolves to (``RAY_ADDRESS``,
    else the cluster ``ray start`` recorded on this machine); None where ``auto`` finds
    none."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "").strip()
        if not address or address == "auto":
            tmp = os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()
            recorded = Path(tmp) / "ray" / "ray_current_cluster"
            try:
                address = recorded.read_text().strip()
            except OSError:
                return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def connect(runner: RunnerConfig) -> bool:
    """Join the Ray cluster at ``runner.address``; True if this call connected (False:
    this process was connected already). A cluster that does not answer within
    ``connect_timeout`` is a :class:`SandboxError` naming the address, at once; this
    never starts a cluster of its own."""
    ray = ray_module()
    if ray.is_initialized():
        return False
    address = runner.address
    target = bootstrap_address(address)
    if target is None:
        raise SandboxError(
            f"no Ray cluster found for address {address!r} (no RAY_ADDRESS, and none "
            "started on this machine): start one with `ray start --head`, or name it with "
            "--ray-address / [runner] address"
        )
    try:
        socket.create_connection(target, timeout=runner.connect_timeout).close()
    except OSError as e:
        where = f"{target[0]}:{target[1]}"
        named = address if where in address else f"{address} ({where})"
        raise SandboxError(
            f"the Ray cluster at {named} does not answer: {e}; "
            "is `ray start --head` running there, and is the port reachable from here?"
        ) from None
    try:
        ray.init(
            address=address,
            namespace="revtree",
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
    except Exception as e:  # Ray raises ConnectionError, RuntimeError, grpc errors...
        raise SandboxError(f"cannot join the Ray cluster at {address}: {e}") from None
    return True


RETRYABLE = (  # Ray's own failures: the worker, its node or an object was lost
    "WorkerCrashedError",
    "NodeDiedError",
    "LocalRayletDiedError",
    "ObjectLostError",
    "OutOfMemoryError",
    "RaySystemError",
)


def retryable(ray: Any, e: BaseException) -> bool:
    return isinstance(e, tuple(getattr(ray.exceptions, n) for n in RETRYABLE))


class RaySandbox:
    """Runs each request as a Ray task on a cluster (see the package doc)."""

    name = "ray"

    def __init__(
        self,
        runner: RunnerConfig | None = None,
        config: SandboxConfig | None = None,
        *,
        task_root: str | None = None,
        labels: object = None,
        base_dir: object = None,
        on_event: EventSink | None = None,
    ) -> None:
        self.runner = runner or RunnerConfig(kind="ray")
        self.config = config or SandboxConfig()
        self.task_root = task_root or None
        self.on_event = on_event
        self.ray = ray_module()
        self.owns_connection = connect(self.runner)
        gpus = self.runner.gpus if self.runner.gpus is not None else self.config.gpus
        options: dict[str, Any] = {
            "num_cpus": self.runner.cpus,
            "num_gpus": gpus,
            "max_retries": 0,  # a lost task is re-submitted here, so the live log shows it
            "retry_exceptions": False,
        }
        if self.runner.memory:
            options["memory"] = self.runner.memory
        if self.runner.resources:
            options["resources"] = dict(self.runner.resources)
        self.remote = self.ray.remote(run_request).options(**options)
        self.lock = threading.Lock()
        self.archives: OrderedDict[str, Any] = OrderedDict()  # sha256 -> ObjectRef
        self.in_flight: set[Any] = set()
        self.cancelling: set[Any] = set()
        self.hosts_seen: set[str] = set()
        self.puts = 0
        self.closed = False

    # -- the protocol -------------------------------------------------------------

    def execute(self, request: ExecRequest, cancel: threading.Event | None = None) -> ExecResult:
        if cancel is not None and cancel.is_set():
            raise Cancelled("the evaluation was cancelled before it was submitted")
        node = request.labels.get("revtree.node")
        node_id = int(node) if node is not None and node.isdigit() else None
        bare = dataclasses.replace(request, archive=b"")
        attempts = self.runner.retries + 1
        for attempt in range(1, attempts + 1):
            archive = self.archive_ref(request.archive)
            ref = self.remote.remote(archive, bare, self.config, self.task_root)
            try:
                out = self.wait(ref, cancel)
            except self.ray.exceptions.RayError as e:
                kind = type(e).__name__
                if not retryable(self.ray, e):
                    raise SandboxError(f"the Ray task failed: {kind}: {first_line(e)}") from None
                if isinstance(e, self.ray.exceptions.ObjectLostError):
                    self.forget(request.archive)
                what = f"evaluation of node {node_id}" if node_id is not None else "evaluation"
                if attempt == attempts:
                    raise SandboxError(
                        f"{what} lost {attempts} times on the Ray cluster at "
                        f"{self.runner.address} ({kind}: {first_line(e)})"
                    ) from None
                self.event(
                    f"{what} lost on the Ray cluster ({kind}: {first_line(e)}); re-submitted, "
                    f"attempt {attempt + 1} of {attempts}",
                    node_id,
                )
                continue
            return self.unpack(out, node_id)
        raise AssertionError("unreachable")

    def reap(self) -> int:
        """Nothing runs here: a Ray task cancelled or lost takes its worker process, and
        with it a local evaluation (its supervisor dies with it); a container left by a
        killed worker is reaped by that machine's next Docker backend."""
        return 0

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            refs = list(self.in_flight | self.cancelling)
            self.archives.clear()
        self.settle(refs)
        if self.owns_connection and self.ray.is_initialized():
            self.ray.shutdown()

    # -- the parts ----------------------------------------------------------------

    def archive_ref(self, archive: bytes) -> Any:
        """The object-store copy of ``archive``: one ``ray.put`` per distinct archive."""
        key = hashlib.sha256(archive).hexdigest()
        with self.lock:
            ref = self.archives.get(key)
            if ref is not None:
                self.archives.move_to_end(key)
                return ref
        ref = self.ray.put(archive)
        with self.lock:
            self.puts += 1
            self.archives[key] = ref
            while len(self.archives) > ARCHIVES_KEPT:
                self.archives.popitem(last=False)
        return ref

    def forget(self, archive: bytes) -> None:
        with self.lock:
            self.archives.pop(hashlib.sha256(archive).hexdigest(), None)

    def wait(self, ref: Any, cancel: threading.Event | None) -> Any:
        """The task's result; on ``cancel``, the task is cancelled (its worker killed)."""
        with self.lock:
            self.in_flight.add(ref)
        try:
            while True:
                ready, _ = self.ray.wait([ref], timeout=POLL)
                if ready:
                    return self.ray.get(ref)
                if cancel is not None and cancel.is_set():
                    self.cancel_task(ref)
                    raise Cancelled("the evaluation was cancelled (its Ray task too)")
        finally:
            with self.lock:
                self.in_flight.discard(ref)

    def cancel_task(self, ref: Any) -> None:
        """Cancel the task (killing its worker), and again until it has ended: a cancel
        that reaches a task while Ray dispatches it can be lost."""
        with self.lock:
            self.cancelling.add(ref)
        self.cancel_once(ref)
        threading.Thread(target=self.settle, args=([ref],), daemon=True).start()

    def settle(self, refs: list[Any], seconds: float = SETTLE) -> None:
        """Cancel ``refs`` until they have ended (or ``seconds`` passed): a connection
        closed at once could leave a cancel undelivered and the evaluation running."""
        deadline, pending = time.monotonic() + seconds, list(refs)
        try:
            while pending and time.monotonic() < deadline:
                for ref in pending:
                    self.cancel_once(ref)
                _, pending = self.ray.wait(pending, num_returns=len(pending), timeout=0.5)
        except Exception as e:  # the connection was closed meanwhile
            logging.getLogger(__name__).debug("cancelling a Ray task: %s", e)
        with self.lock:
            self.cancelling.difference_update(refs)

    def cancel_once(self, ref: Any) -> None:
        try:
            self.ray.cancel(ref, force=True)
        except Exception as e:  # finished meanwhile, or the cluster is gone
            logging.getLogger(__name__).debug("cancelling a Ray task: %s", e)

    def unpack(self, out: dict[str, Any], node_id: int | None) -> ExecResult:
        host = str(out.get("host"))
        if "error" in out:
            raise SandboxError(f"on the Ray worker {host}: {out['error']}")
        result: ExecResult = out["result"]
        name, reason, warning = out["backend"]
        with self.lock:
            first = host not in self.hosts_seen
            self.hosts_seen.add(host)
        if first:
            message = f"Ray worker {host} runs evaluations in its {name} sandbox ({reason})"
            self.event(message + (f"; warning: {warning}" if warning else ""), node_id)
        return result

    def event(self, message: str, node_id: int | None) -> None:
        if self.on_event is not None:
            self.on_event("ray", message, node_id)
        else:
            logging.getLogger(__name__).warning("%s", message)


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
