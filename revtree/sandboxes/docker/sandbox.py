"""The Docker sandbox itself: :class:`DockerSandbox` runs a request in a box (a warm one,
or a new one), watches it (timeout, cancel, disk cap), and builds its result from the
output tails, the exit code, the metrics and the declared outputs. What it covers and
what it does not: the package doc (:mod:`revtree.sandboxes.docker`)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from revtree.errors import Cancelled, SandboxError
from revtree.sandboxes.base import (
    METRICS_FD,
    OUTPUT_FILE_CAP,
    ExecRequest,
    ExecResult,
    Limits,
    SandboxContext,
    watchdog,
)
from revtree.sandboxes.docker.containers import Box, Containers, bind_mounts
from revtree.sandboxes.docker.engine import (
    LABEL,
    OUT,
    OWNER,
    connect,
    engine_error,
    engine_url,
    missing_image,
    owner_id,
    reap,
)
from revtree.sandboxes.docker.files import (
    METRICS_CAP,
    Outputs,
    Refused,
    collect,
    read_file,
    usage,
    workspace_tar,
)
from revtree.sandboxes.docker.launch import GRACE, Tails, launch_exec, launch_resident
from revtree.sandboxes.docker.pool import Phase, WarmPool
from revtree.tasks.sandbox import DockerConfig

Config = DockerConfig
"""The Docker backend's ``[sandbox]`` keys: the common ones and the container's."""


class GpuLease(Protocol):
    """Hands out distinct GPU ids (the scheduler's pool, see ``orchestrator.gpus``)."""

    def acquire(self, n: int, cancel: threading.Event | None = None) -> list[str]:
        """Block until ``n`` ids are free, then return them."""
        ...

    def release(self, ids: Sequence[str]) -> None: ...


@dataclass(frozen=True)
class DockerResult(ExecResult):
    """An :class:`ExecResult` plus the id of the container it ran in."""

    container: str = ""


def build(
    context: SandboxContext,
    base_url: str | None = None,
    client: Any = None,
    pids_limit: int = 256,
    output_cap: int = OUTPUT_FILE_CAP,
    host_volumes: bool = True,
) -> DockerSandbox:
    """The Docker backend (``[sandbox] backend = "docker"``): the context's ``config``,
    ``gpu_pool``, ``task_root`` (relative mounts) and ``labels``; the options as
    :class:`DockerSandbox` takes them."""
    return DockerSandbox(
        context.config,
        base_url=base_url,
        client=client,
        gpu_pool=context.gpu_pool,
        task_root=context.task_root,
        labels=context.labels,
        pids_limit=pids_limit,
        output_cap=output_cap,
        host_volumes=host_volumes,
    )


class DockerSandbox:
    """Runs each request in a new container of ``config.image`` (see the package doc)."""

    name = "docker"
    contained = True  # its own image and root, no network (sandboxes.base.Contained)

    def __init__(
        self,
        config: DockerConfig | None = None,
        *,
        base_url: str | None = None,
        client: Any = None,
        gpu_pool: GpuLease | None = None,
        task_root: str | Path | None = None,
        labels: Mapping[str, str] | None = None,
        pids_limit: int = 256,
        output_cap: int = OUTPUT_FILE_CAP,
        host_volumes: bool = True,
    ) -> None:
        """``host_volumes``: use a workspace volume's folder directly (set up the
        workspace, read outputs, watch the disk cap) when the engine keeps it on this
        host and this process may use it; else everything goes through the engine's
        API, as with a remote engine."""
        from revtree.sandboxes.images import default_image, image_exists

        self.config = config or DockerConfig()
        self.client = client or connect(base_url)
        self.api = self.client.api
        self.image = self.config.image or default_image(self.client)
        if not image_exists(self.client, self.image):
            raise SandboxError(missing_image(self.image, engine_url(base_url), self.config.image))
        if self.config.gpus and gpu_pool is None:
            raise SandboxError(f"gpus = {self.config.gpus} needs a GPU pool from the scheduler")
        self.gpu_pool, self.pids_limit, self.output_cap = gpu_pool, pids_limit, output_cap
        self.host_volumes = host_volumes
        self.labels = {**(labels or {}), LABEL: "1", OWNER: owner_id()}
        self.mounts = bind_mounts(self.config.mounts, task_root)
        self.containers = Containers(
            self.api, self.image, self.config, self.labels, self.mounts, pids_limit, host_volumes
        )
        # no pool with GPUs: a box is made for the devices a request was handed
        size = 0 if self.config.gpus else self.config.warm_pool
        self.pool = WarmPool(self.containers, size, self._default_limits())

    # -- the protocol -------------------------------------------------------------

    def execute(self, request: ExecRequest, cancel: threading.Event | None = None) -> ExecResult:
        if cancel is not None and cancel.is_set():
            raise Cancelled("the evaluation was cancelled before it started")
        t0 = time.monotonic()
        payload = workspace_tar(request.archive)
        gpus: list[str] = []
        if self.config.gpus:
            assert self.gpu_pool is not None
            gpus = self.gpu_pool.acquire(self.config.gpus, cancel)
        box: Box | None = None
        phase = self.pool.phases.launching()
        try:
            box = self.pool.take(request.limits) if not gpus else None
            if box is not None:
                threading.Thread(target=self._rename, args=(box, request.labels)).start()
            else:
                box = self.containers.new_box(request.limits, request.labels, gpus)
            setup = time.monotonic() - t0
            return self._run(box, request, payload, cancel, setup, phase)
        finally:
            phase.end()
            if box is not None and gpus:
                self.containers.remove(box)  # the devices are free only once it is gone
            elif box is not None:
                self.pool.remove_later(box)
            self.pool.refill()  # refill the pool, if any
            if gpus:
                assert self.gpu_pool is not None
                self.gpu_pool.release(gpus)

    def reap(self) -> int:
        """Remove containers and volumes whose owning process is dead; returns how many
        containers were found."""
        return reap(self.client)

    def drain(self) -> None:
        """Wait until every container and volume handed to the remover is removed."""
        self.pool.drain()

    def close(self) -> None:
        """Stop filling the warm pool; remove its containers (side by side) and wait for
        every removal in flight, so nothing of this sandbox is left on the engine."""
        self.pool.close()
        with contextlib.suppress(Exception):
            self.client.close()

    # -- for tests and benchmarks ---------------------------------------------------

    def pooled(self) -> set[str]:
        """Ids of the warm pool's containers and names of their volumes (none has run
        any command), for tests that look for leftovers."""
        return self.pool.pooled()

    def warm_ready(self, timeout: float = 30.0) -> bool:
        """Wait until the warm pool is full (for benchmarks and tests); True at once
        when there is no pool."""
        return self.pool.ready(timeout)

    def create_for_inspection(self, labels: Mapping[str, str], gpus: Sequence[str]) -> str:
        """Create (never start) a container as ``execute`` would; returns its id.
        The caller removes it with :meth:`discard`. For tests of the request."""
        return self.containers.create(self._default_limits(), labels, gpus).cid

    def discard(self, cid: str) -> None:
        info = self.api.inspect_container(cid)
        self.containers.remove(Box(cid, info["Config"]["Labels"].get("revtree.volume", ""), ()))

    # -- one execution --------------------------------------------------------------

    def _default_limits(self) -> Limits:
        return Limits(
            timeout=1.0, memory_bytes=self.config.memory, cpu_seconds=self.config.cpu_seconds
        )

    def _rename(self, box: Box, labels: Mapping[str, str]) -> None:
        """A warm container takes the node in its name (labels are fixed at creation);
        cosmetic, so done beside the execution once it runs (not while it launches)."""
        self.pool.phases.wait_quiet()
        self.containers.rename(box, labels)

    def _run(
        self,
        box: Box,
        request: ExecRequest,
        payload: bytes,
        cancel: threading.Event | None,
        setup: float,
        phase: Phase,
    ) -> ExecResult:
        """Launch the command, watch it (timeout, cancel, disk) until its output streams
        end, then collect its exit code, output tails, metrics and declared files."""
        if box.resident:
            tails, eid, start = launch_resident(box, request, payload, self.config.disk)
        else:
            tails, eid, start = launch_exec(self.api, self.image, box, request, self.config.disk)
        done, why = threading.Event(), list[str]()
        watcher = threading.Thread(
            target=self._watch,
            args=(box, start + request.limits.timeout, done, cancel, why),
            daemon=True,
        )
        watcher.start()
        if not box.resident:
            tails.send(payload)
        phase.launched()
        tails.join(timeout=request.limits.timeout + 2 * GRACE + 30)
        done.set()
        duration = time.monotonic() - start
        watcher.join()
        if tails.is_alive():
            self.containers.kill(box)
            raise engine_error(f"waiting for the command in {box.cid[:12]}", TimeoutError())
        if why == ["cancel"]:
            raise Cancelled("the evaluation was cancelled")
        # killed by the watcher: 137; an exit code the engine cannot give for a command
        # nobody killed is the engine's failure, never recorded as the candidate's crash
        code = 137 if why and box.resident else self.containers.exit_code(box, eid)
        if code is None and not why:
            raise engine_error(f"reading the exit code in {box.cid[:12]}", LookupError("none"))
        code = 137 if code is None else code
        return self._result(box, request, tails, code, why, start, duration, setup)

    def _result(
        self,
        box: Box,
        request: ExecRequest,
        tails: Tails,
        code: int,
        why: list[str],
        start: float,
        duration: float,
        setup: float,
    ) -> DockerResult:
        """The result of a finished command: the reason it was killed, if any, appended
        to stderr; metrics and declared outputs read out of the volume."""
        stderr = tails.text(1) + self._why_killed(box, request.limits, why, code, start)
        try:
            metrics = read_file(self.api, box.cid, box.local, f"{OUT}/metrics.json", METRICS_CAP)
        except Refused as e:
            metrics = None
            stderr += f"\nrevtree: the metrics of descriptor {METRICS_FD} were not read: {e}\n"
        found = Outputs(min(self.output_cap, OUTPUT_FILE_CAP))
        patterns = found.patterns((*request.outputs, *self.config.outputs))
        if patterns:
            collect(self.api, box.cid, box.local, patterns, found)
        return DockerResult(
            exit_code=code,
            stdout=tails.text(0),
            stderr=stderr,
            duration=duration,
            timed_out=why == ["timeout"],
            metrics_text=metrics.decode("utf-8", errors="replace") if metrics else None,
            truncated=tails.truncated,
            setup_seconds=setup,
            files=found.files,
            refused=found.refused,
            container=box.cid,
        )

    def _why_killed(self, box: Box, limits: Limits, why: list[str], code: int, start: float) -> str:
        """A line for stderr naming why the host or the kernel killed the evaluation."""
        if why == ["disk"]:
            mb = self.config.disk // 2**20
            return f"\nrevtree: the evaluation was killed: workspace over its {mb} MiB disk cap\n"
        if code == 137 and not why and self.containers.oom_killed(box.cid, start):
            mb = (limits.memory_bytes or 0) // 2**20
            return f"\nrevtree: the evaluation was killed: out of memory (limit {mb} MiB)\n"
        return ""

    def _watch(
        self,
        box: Box,
        deadline: float,
        done: threading.Event,
        cancel: threading.Event | None,
        why: list[str],
    ) -> None:
        disk = Path(box.mountpoint) if box.mountpoint else None
        if disk is not None and not os.access(disk, os.R_OK | os.X_OK):
            disk = None  # a remote engine: only the per-file limit holds
        next_disk = [time.monotonic() + 0.2]

        def over_disk() -> str | None:
            if disk is None or time.monotonic() < next_disk[0]:
                return None
            next_disk[0] = time.monotonic() + 0.2
            return "disk" if usage(disk) > self.config.disk else None

        watchdog(deadline, done, cancel, lambda: self.containers.kill(box), why, over_disk)
