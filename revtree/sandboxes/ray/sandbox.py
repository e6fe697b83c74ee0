"""The driver side of the Ray runner: a :class:`Sandbox` whose ``execute`` is a Ray task."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import os
import socket
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from revtree.errors import Cancelled, SandboxError
from revtree.sandboxes.base import ExecRequest, ExecResult, SandboxContext
from revtree.sandboxes.ray.worker import lower_flag, raise_flag, run_request
from revtree.tasks.runner import RunnerConfig
from revtree.tasks.sandbox import AutoConfig, SandboxBase, gpus_of

EventSink = Callable[[str, str, int | None], None]  # (kind, message, node id)
ARCHIVES_KEPT = 64  # distinct archives whose object-store copy is kept for reuse
POLL = 0.1  # seconds between looks at the cancel event while a task runs
SETTLE = 20.0  # seconds a cancelled task is cancelled again until it has ended
GRACE = 5.0  # seconds a flagged task has to stop its evaluation before Ray kills its worker
UNBOUNDED = 256  # the capacity for a request of no resources at all


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


def build(context: SandboxContext) -> RaySandbox:
    """The Ray runner (``[runner] kind = "ray"``): the context's ``runner``, ``config``,
    ``task_root`` and ``on_event``."""
    root = str(context.task_root) if context.task_root is not None else None
    return RaySandbox(context.runner, context.config, task_root=root, on_event=context.on_event)


class RaySandbox:
    """Runs each request as a Ray task on a cluster (see the package doc)."""

    name = "ray"
    contained = True  # on a worker, in that worker's own sandbox (sandboxes.base.Contained)

    def __init__(
        self,
        runner: RunnerConfig | None = None,
        config: SandboxBase | None = None,
        *,
        task_root: str | None = None,
        on_event: EventSink | None = None,
    ) -> None:
        self.runner = runner or RunnerConfig(kind="ray")
        self.config = config or AutoConfig()
        self.task_root = task_root or None
        self.on_event = on_event
        self.ray = ray_module()
        self.owns_connection = connect(self.runner)
        gpus = self.runner.gpus if self.runner.gpus is not None else gpus_of(self.config)
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
        self.request = {"CPU": self.runner.cpus, "GPU": float(gpus or 0)}
        self.request.update(memory=float(self.runner.memory or 0), **self.runner.resources)
        self.lock = threading.Lock()
        self.archives: OrderedDict[str, Any] = OrderedDict()  # sha256 -> ObjectRef
        self.in_flight: dict[Any, str] = {}  # ObjectRef -> the task's cancel token
        self.cancelling: dict[Any, str] = {}
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
            token = uuid.uuid4().hex
            ref = self.remote.remote(archive, bare, self.config, self.task_root, token)
            try:
                out = self.wait(ref, token, cancel)
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
        """Nothing runs here: a cancelled Ray task stops its evaluation on its worker (a
        local one through its supervisor, which also dies with its worker); a container
        left by a killed worker is reaped by that machine's next Docker backend."""
        return 0

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
            tasks = {**self.in_flight, **self.cancelling}
            self.archives.clear()
        for token in tasks.values():
            self.flag(token)
        self.settle(tasks)
        if self.owns_connection and self.ray.is_initialized():
            self.ray.shutdown()

    def capacity(self) -> int:
        """How many evaluations of the task's request the cluster holds at once: per
        live node, how many its resources fit, summed; at most this run's own tasks in
        flight plus what the cluster has free now (another job's work counts). At
        least 1 (the tasks queue until a node joins)."""
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        total = sum(fits(n.get("Resources") or {}, self.request) for n in nodes)
        with self.lock:
            mine = len(self.in_flight)
        free = fits(self.ray.available_resources(), self.request)
        return max(1, min(total, mine + free, UNBOUNDED))

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

    def wait(self, ref: Any, token: str, cancel: threading.Event | None) -> Any:
        """The task's result; on ``cancel``, the task is cancelled (see ``cancel_task``)."""
        with self.lock:
            self.in_flight[ref] = token
        try:
            while True:
                ready, _ = self.ray.wait([ref], timeout=POLL)
                if ready:
                    return self.ray.get(ref)
                if cancel is not None and cancel.is_set():
                    self.cancel_task(ref, token)
                    raise Cancelled("the evaluation was cancelled (its Ray task too)")
        finally:
            with self.lock:
                self.in_flight.pop(ref, None)

    def cancel_task(self, ref: Any, token: str) -> None:
        """Raise the task's cancel flag (its worker stops the evaluation through its
        backend, or never starts it), and settle it in the background: after ``GRACE``,
        a task still not ended is force-cancelled, again until it has ended."""
        with self.lock:
            self.cancelling[ref] = token
        self.flag(token)
        threading.Thread(target=self.settle, args=({ref: token},), daemon=True).start()

    def flag(self, token: str) -> None:
        try:
            raise_flag(token)
        except Exception as e:  # the cluster is gone: the force-cancel is all there is
            logging.getLogger(__name__).debug("raising a cancel flag: %s", e)

    def settle(self, tasks: dict[Any, str], seconds: float = SETTLE) -> None:
        """Wait for the flagged ``tasks`` (ref -> token) to end; past ``GRACE``, cancel
        those still running with Ray's force (their worker is killed), again until they
        have ended or ``seconds`` passed: a cancel that reaches a task while Ray
        dispatches it can be lost. Then their flags are lowered."""
        start, pending = time.monotonic(), list(tasks)
        try:
            while pending and time.monotonic() < start + seconds:
                if time.monotonic() > start + GRACE:
                    for ref in pending:
                        self.cancel_once(ref)
                _, pending = self.ray.wait(pending, num_returns=len(pending), timeout=0.2)
            for ref in tasks:
                if ref not in pending:  # one still pending keeps its flag: it may yet start
                    lower_flag(tasks[ref])
        except Exception as e:  # the connection was closed meanwhile
            logging.getLogger(__name__).debug("cancelling a Ray task: %s", e)
        with self.lock:
            for ref in tasks:
                self.cancelling.pop(ref, None)

    def cancel_once(self, ref: Any) -> None:
        try:
            self.ray.cancel(ref, force=True)
        except Exception as e:  # finished meanwhile, or the cluster is gone
            logging.getLogger(__name__).debug("cancelling a Ray task: %s", e)

    def unpack(self, out: dict[str, Any], node_id: int | None) -> ExecResult:
        host = str(out.get("host"))
        if out.get("cancelled"):
            raise Cancelled(f"the evaluation was cancelled on the Ray worker {host}")
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


def fits(have: dict[str, float], need: dict[str, float]) -> int:
    """How many times ``need`` fits in ``have`` (resource name -> amount)."""
    counts = [math.floor(have.get(k, 0.0) / v + 1e-9) for k, v in need.items() if v > 0]
    return min(counts, default=UNBOUNDED)


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
