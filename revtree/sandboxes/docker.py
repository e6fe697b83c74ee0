"""The Docker sandbox: every execution in a fresh, hardened container.

How an execution runs. A container gets a fresh workspace volume holding ``work/`` and
``out/``; the warm pool (``warm_pool``, 2 by default) holds containers created and
started ahead of use, refilled while the next command runs; the container and its volume
are removed after the execution by a background thread, so results never wait for
removal. Two ways to run the command, by where the volume lives:

- *resident runner* (the engine keeps the volume on this host and this process may use
  its folder: root). The container's only process, as the sandbox user, blocks opening
  a FIFO in the volume's root (``.go``). To run, the host writes the workspace archive
  and the runner script into that root (root's: the sandbox user cannot change them)
  and opens the FIFO: the waiting process becomes the runner script, which unpacks the
  archive as the sandbox user and runs the command. Its stdout and stderr arrive on an
  attach stream opened before the container started; the exit code is the container's
  (it exits with its runner), from the engine. No exec: about half the latency.
- *exec* (a remote engine, or a folder this process cannot use): the container idles
  in ``sleep``; the runner script runs through the exec API as the sandbox user and
  unpacks the workspace from its stdin; ``out/`` and ``work/`` are made, and outputs
  read, with ``put_archive`` / ``get_archive``.

In both, the runner script opens ``out/metrics.json`` as the command's file descriptor 3
(``METRICS_FD``; no path in its environment) and the host reads it back afterwards;
declared outputs (``ExecRequest.outputs``, globs, plus the task's ``[sandbox] outputs``
names) are found by walking ``work/`` in the volume's folder when it is on this host
(``lstat``, never following a link), else by streaming ``get_archive`` of ``work/`` and
filtering its members.

What is covered:
- a new container per execution, never reused (a warm-pool container has run nothing
  but its idle process: ``sleep``, or the resident runner blocked on its FIFO, which
  only the host can open for writing); it sees only the request's archive (the
  candidate's ``git archive`` plus fresh protected files, filtered on the host: nothing
  escapes the workspace), unpacked by the sandbox user inside the container, never by
  the host, into a fresh volume (capped: ``RLIMIT_FSIZE`` per file, and a host-side
  watch of the volume's total size that kills the container past ``disk`` when the
  engine is on this host). The run's repository, its database, the host's
  home and other candidates' workspaces are not mounted; task ``mounts`` are read-only;
- no network unless the task opts in; a read-only root file system with a size-capped
  tmpfs ``/tmp``; all capabilities dropped, ``no-new-privileges``, a non-root user
  (the command inherits all of these from the container); limits on processes (the
  idle process or the resident runner counts as one), memory (swap included, for the
  whole container), CPUs, CPU time and address space;
- the timeout and the cancel event enforced from the host by killing the whole
  container, with a backstop inside it (``timeout -s KILL``) should the orchestrator
  die; when the command ends, every other process of the sandbox user in the container
  is killed (``kill -KILL -1``), so nothing it started outlives it (a resident
  runner then exits, and its container with it), and nothing changes the volume while
  the host reads the metrics and outputs out of it;
- a timeout is reported as ``timed_out``; an out-of-memory kill (the engine's ``oom``
  event for the container) and the disk cap are named in ``stderr``;
- the container and its volume removed after every execution, whatever happened
  (``close()`` waits for the removals in flight); they carry the label
  ``revtree.sandbox`` and their owner (host, pid, process start time), so ``reap()``
  (and ``revtree sandbox gc``) remove those of dead orchestrators, warm ones included;
- the metrics channel is file descriptor 3 of the command only: no variable names it,
  and Python's ``subprocess`` closes it in the children (``close_fds``); a metrics file
  the command replaced by anything but a regular file within ``METRICS_CAP`` is not
  read (``metrics_text`` is None, the reason in ``stderr``);
- declared outputs copied out: regular files only, each under ``OUTPUT_FILE_CAP`` (or
  ``output_cap``), all under ``OUTPUTS_CAP``; a link, FIFO, socket, device, hard link
  (through the API), a pattern out of the workspace (absolute, ``..``) or a file over a
  cap is named in ``refused`` with the reason, never copied and never an error;
- engine and image failures raised as :class:`~revtree.errors.SandboxError` naming
  the engine, the image or the step, and how to make a missing image.

What is not covered: the container shares the host's kernel (a kernel exploit escapes
it); GPUs handed to an evaluation are visible in full to it; with ``network`` set to
``bridge`` or ``host`` the code can reach whatever that network reaches. The metrics
channel keeps a score from a *child* of the evaluator only: every process of the
sandbox user can still write ``/sandbox/out/metrics.json`` by its path, or the
evaluator's descriptor through ``/proc/<pid>/fd/3``, and a shell passes the descriptor
on; so a task whose evaluator runs candidate code in-process or through a shell can
have its score forged, and only a separate grade step (a fresh sandbox over the
declared outputs) prevents that. If the orchestrator is killed, the backstop ends the
candidate's processes, but the container (stopped, or idle in the exec design) and its
volume stay until ``reap()`` or ``revtree sandbox gc``; so do idle warm-pool containers.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fnmatch
import io
import json
import os
import queue
import shlex
import socket
import stat
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from revtree.errors import Cancelled, SandboxError
from revtree.sandboxes.base import (
    METRICS_FD,
    OUTPUT_FILE_CAP,
    OUTPUTS_CAP,
    ExecRequest,
    ExecResult,
    Limits,
    watchdog,
)
from revtree.sandboxes.env import sandbox_env
from revtree.tasks.spec import SandboxConfig

UID = 10001  # the sandbox user; has no entry in the image and owns only the workspace
ROOT, WORK, OUT = "/sandbox", "/sandbox/work", "/sandbox/out"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LABEL, OWNER, RUN, NODE, WARM = (
    "revtree.sandbox",
    "revtree.owner",
    "revtree.run",
    "revtree.node",
    "revtree.warm",
)
METRICS_CAP = 1 << 20
MAX_ENTRIES = 200_000  # a workspace holding more is not walked further
GRACE = 5.0  # seconds the in-container backstop waits past the host's timeout
HOLD = ["sleep", "2147483647"]  # the idle process a container runs until the exec
GO, SCRIPT, PAYLOAD = ".go", ".run", ".workspace.tar"  # in the volume's root (root-owned)
# the resident runner: blocks opening the trigger FIFO, then becomes the request's script
RESIDENT = ["/bin/sh", "-c", f"read _ <{ROOT}/{GO} && exec /bin/sh {ROOT}/{SCRIPT}"]
_TYPE_BITS = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)


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


def owner_id() -> str:
    """``host:pid:start`` of this process (start time guards against pid reuse)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def owner_alive(owner: str) -> bool:
    """Whether the process named by an owner label still runs (other hosts: assumed)."""
    host, _, rest = owner.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return _start_time(int(pid)) == start


def _engine_error(what: str, e: BaseException) -> SandboxError:
    return SandboxError(f"the Docker engine failed or stopped answering while {what}: {e}")


def engine_url(base_url: str | None = None) -> str:
    """Where the engine is asked: ``base_url``, else ``$DOCKER_HOST``, else the socket."""
    return base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect(base_url: str | None = None, timeout: float = 30.0) -> Any:
    """A low-level docker API client that answered a ping, or a clear SandboxError."""
    try:
        import docker
    except ImportError as e:  # pragma: no cover - docker is a dependency
        raise SandboxError("the docker backend needs the 'docker' package") from e
    url = engine_url(base_url)
    try:
        client = docker.DockerClient(base_url=url, timeout=int(timeout), max_pool_size=64)
        client.ping()
    except Exception as e:
        raise SandboxError(f"no Docker engine answers at {url}: {e}") from e
    return client


def engine_answers(base_url: str | None = None, timeout: float = 2.0) -> Any | None:
    """The client if an engine answers quickly, else None (for ``backend = "auto"``)."""
    try:
        return connect(base_url, timeout)
    except SandboxError:
        return None


@dataclass
class _Box:
    """A container (running only its holding process) and its workspace volume."""

    cid: str
    volume: str
    key: tuple[Any, ...]
    mountpoint: str = ""  # where the engine keeps the volume, if on this host
    resident: bool = False  # runs RESIDENT (volume folder usable here), not HOLD
    sock: Any = None  # a resident box's attach stream (stdout, stderr), opened before start

    @property
    def local(self) -> Path | None:
        """The volume's folder when this process can use it (engine on this host, root)."""
        if self.mountpoint and os.access(self.mountpoint, os.R_OK | os.W_OK | os.X_OK):
            return Path(self.mountpoint)
        return None


class DockerSandbox:
    """Runs each request in a new container of ``config.image`` (see the module doc)."""

    name = "docker"

    def __init__(
        self,
        config: SandboxConfig | None = None,
        base_dir: str | Path | None = None,
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

        self.config = config or SandboxConfig()
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
        self.mounts = _bind_mounts(self.config.mounts, task_root)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._warm: queue.Queue[_Box] = queue.Queue()
        self._filler: threading.Thread | None = None
        self._want_warm = threading.Event()
        self._refilling = threading.Event()  # the filler is making a box (not waiting)
        self._trash: queue.Queue[_Box | None] = queue.Queue()
        self._phase = _Phases()
        self._remover = threading.Thread(target=self._remove_loop, daemon=True, name="remover")
        self._remover.start()
        self.pool_key = self._key(self._default_limits())
        if self.config.warm_pool and not self.config.gpus:
            self._filler = threading.Thread(target=self._fill, daemon=True, name="warm-pool")
            self._filler.start()
            self._want_warm.set()

    # -- the protocol -------------------------------------------------------------

    def execute(self, request: ExecRequest, cancel: threading.Event | None = None) -> ExecResult:
        if cancel is not None and cancel.is_set():
            raise Cancelled("the evaluation was cancelled before it started")
        t0 = time.monotonic()
        payload = _workspace_tar(request.archive)
        gpus: list[str] = []
        if self.config.gpus:
            assert self.gpu_pool is not None
            gpus = self.gpu_pool.acquire(self.config.gpus, cancel)
        box: _Box | None = None
        phase = self._phase.launching()
        try:
            box = self._take_warm(request.limits) if not gpus else None
            if box is not None:
                threading.Thread(target=self._rename, args=(box, request.labels)).start()
            else:
                box = self._new_box(request.limits, request.labels, gpus)
            setup = time.monotonic() - t0
            return self._run(box, request, payload, cancel, setup, phase)
        finally:
            phase.end()
            if box is not None and gpus:
                self._remove(box)  # the devices are free only once the container is gone
            elif box is not None:
                self._trash.put(box)
            self._want_warm.set()  # refill the pool, if any
            if gpus:
                assert self.gpu_pool is not None
                self.gpu_pool.release(gpus)

    def reap(self) -> int:
        """Remove containers and volumes whose owning process is dead; returns how many
        containers were found."""
        return reap(self.client)

    def drain(self) -> None:
        """Wait until every container and volume handed to the remover is removed."""
        self._trash.join()

    def close(self) -> None:
        """Stop filling the warm pool; remove its containers (side by side) and wait for
        every removal in flight, so nothing of this sandbox is left on the engine."""
        self._closed.set()
        self._phase.stop()  # background work waits for no execution any more
        self._want_warm.set()
        if self._filler is not None:
            self._filler.join(timeout=30)
        removals = []
        while True:
            try:
                box = self._warm.get_nowait()
            except queue.Empty:
                break
            removals.append(threading.Thread(target=self._remove, args=(box,), daemon=True))
            removals[-1].start()
        self._trash.put(None)
        self._remover.join()
        for thread in removals:
            thread.join()
        with contextlib.suppress(Exception):
            self.client.close()

    # -- containers ---------------------------------------------------------------

    def _key(self, limits: Limits) -> tuple[Any, ...]:
        return (limits.memory_bytes, limits.cpu_seconds)

    def _create(self, limits: Limits, labels: Mapping[str, str], gpus: Sequence[str]) -> _Box:
        import docker.types

        c = self.config
        all_labels = {**self.labels, **{k: str(v) for k, v in labels.items()}}
        name = _container_name(labels)
        try:
            info = self.api.create_volume(name=name, driver="local", labels=all_labels)
            volume = info["Name"]
        except Exception as e:
            raise _engine_error("creating a workspace volume", e) from e
        mountpoint = (info.get("Mountpoint") or "") if self.host_volumes else ""
        box = _Box("", volume, self._key(limits), mountpoint)
        box.resident = box.local is not None
        ulimits = [docker.types.Ulimit(name="core", soft=0, hard=0)]
        if limits.cpu_seconds:
            cpu = max(1, int(limits.cpu_seconds))
            ulimits.append(docker.types.Ulimit(name="cpu", soft=cpu, hard=cpu + 1))
        host_config = self.api.create_host_config(
            mounts=[docker.types.Mount(ROOT, volume, type="volume"), *self.mounts],
            network_mode=c.network,
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={c.disk},mode=1777"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=self.pids_limit,
            mem_limit=limits.memory_bytes or None,
            memswap_limit=limits.memory_bytes or None,
            nano_cpus=int(c.cpus * 1e9) if c.cpus else None,
            ulimits=ulimits,
            log_config=docker.types.LogConfig(type="none"),
            device_requests=(
                [docker.types.DeviceRequest(device_ids=list(gpus), capabilities=[["gpu"]])]
                if gpus
                else None
            ),
        )
        main = RESIDENT if box.resident else HOLD
        try:
            box.cid = self.api.create_container(
                self.image,
                entrypoint=main[:1],
                command=main[1:],
                user=f"{UID}:{UID}",
                working_dir=ROOT,
                environment={"PATH": PATH},
                labels={**all_labels, "revtree.volume": volume},
                host_config=host_config,
                network_disabled=c.network == "none",
                name=name,
            )["Id"]
        except Exception as e:
            with contextlib.suppress(Exception):
                self.api.remove_volume(volume, force=True)
            if "No such image" in str(e) or "not found" in str(e).lower():
                raise SandboxError(f"image {self.image!r} is missing on the engine: {e}") from e
            raise _engine_error(f"creating a container of {self.image!r}", e) from e
        return box

    def _new_box(self, limits: Limits, labels: Mapping[str, str], gpus: Sequence[str]) -> _Box:
        """A created and started box whose volume holds ``work/`` and ``out/`` (and, for
        a resident box, the trigger FIFO its main process waits on)."""
        box = self._create(limits, labels, gpus)
        if box.resident:
            self._skeleton(box)  # in the folder, before the runner looks for its FIFO
        self._start(box)
        if not box.resident:
            self._skeleton(box)
        return box

    def _start(self, box: _Box) -> None:
        """Open a resident box's attach stream, then start its main process; on failure
        the box is removed and an error raised."""
        try:
            if box.resident:
                params = {"stdout": 1, "stderr": 1, "stream": 1}
                box.sock = self.api.attach_socket(box.cid, params=params)
            self.api.start(box.cid)
        except Exception as e:
            self._remove(box)
            raise _engine_error(f"starting container {box.cid[:12]} of {self.image!r}", e) from e

    def _skeleton(self, box: _Box) -> None:
        """Make ``work/`` and ``out/``, owned by the sandbox user, in the fresh volume:
        directly in its folder when this host holds it (with a resident box's trigger
        FIFO, root's, readable by the sandbox user), else with ``put_archive``."""
        if (root := box.local) is not None:
            try:
                for name, mode in (("work", 0o755), ("out", 0o700)):
                    os.mkdir(root / name, mode)
                    os.chown(root / name, UID, UID)
                    os.chmod(root / name, mode)
                if box.resident:
                    os.mkfifo(root / GO, 0o644)
                    os.chmod(root / GO, 0o644)
            except OSError as e:
                self._remove(box)
                raise SandboxError(f"cannot prepare the workspace volume {root}: {e}") from e
            return
        try:
            self.api.put_archive(box.cid, ROOT, _skeleton_tar())
        except Exception as e:
            self._remove(box)
            raise _engine_error(f"copying the workspace into {box.cid[:12]}", e) from e

    def _remove_loop(self) -> None:
        while (box := self._trash.get()) is not None:
            try:
                if not self._closed.is_set():
                    self._phase.wait_quiet()
                self._remove(box)
            finally:
                self._trash.task_done()
        self._trash.task_done()

    def _rename(self, box: _Box, labels: Mapping[str, str]) -> None:
        """A warm container takes the node in its name (labels are fixed at creation);
        cosmetic, so done beside the execution once it runs (not while it launches)."""
        self._phase.wait_quiet()
        with contextlib.suppress(Exception):
            self.api.rename(box.cid, _container_name(labels))

    def _remove(self, box: _Box) -> None:
        """Remove the container, then its volume (retried: the engine may still hold it).
        Whatever fails here is left to ``reap``."""
        import docker.errors

        if box.sock is not None:
            _close_stream(box.sock)
        with contextlib.suppress(Exception):
            self.api.remove_container(box.cid, force=True, v=True)
        for attempt in range(20):
            try:
                self.api.remove_volume(box.volume, force=True)
                return
            except docker.errors.NotFound:
                return
            except Exception:
                time.sleep(0.05 * (attempt + 1))

    def _run(
        self,
        box: _Box,
        request: ExecRequest,
        payload: bytes,
        cancel: threading.Event | None,
        setup: float,
        phase: _Phase,
    ) -> ExecResult:
        """Launch the command, watch it (timeout, cancel, disk) until its output streams
        end, then collect its exit code, output tails, metrics and declared files."""
        launch = self._launch_resident if box.resident else self._launch_exec
        tails, eid, start = launch(box, request, payload)
        done, why = threading.Event(), list[str]()
        watchdog = threading.Thread(
            target=self._watch,
            args=(box, start + request.limits.timeout, done, cancel, why),
            daemon=True,
        )
        watchdog.start()
        if not box.resident:
            tails.send(payload)
        phase.launched()
        tails.join(timeout=request.limits.timeout + 2 * GRACE + 30)
        done.set()
        duration = time.monotonic() - start
        watchdog.join()
        if tails.is_alive():
            self._kill(box)
            raise _engine_error(f"waiting for the command in {box.cid[:12]}", TimeoutError())
        if why == ["cancel"]:
            raise Cancelled("the evaluation was cancelled")
        code = 137 if why and box.resident else self._exit_code(box, eid, 137 if why else -1)
        return self._result(box, request, tails, code, why, start, duration, setup)

    def _launch_exec(
        self, box: _Box, request: ExecRequest, payload: bytes
    ) -> tuple[_Tails, str, float]:
        """Start the runner script through the exec API (it unpacks the workspace from
        its stdin, which the caller then writes). Returns the output reader, the exec's
        id and the start time."""
        try:
            eid = self.api.exec_create(
                box.cid,
                ["/bin/sh", "-c", _runner_script(request, self.config.disk)],
                stdin=True,
                user=f"{UID}:{UID}",
                environment={"PATH": PATH},
                workdir=ROOT,
            )["Id"]
            start = time.monotonic()
            sock = self.api.exec_start(eid, socket=True)
        except Exception as e:
            what = f"running the command in {box.cid[:12]} of {self.image!r}"
            raise _engine_error(what, e) from e
        tails = _Tails(sock, request.limits.output_cap)
        tails.start()
        return tails, eid, start

    def _launch_resident(
        self, box: _Box, request: ExecRequest, payload: bytes
    ) -> tuple[_Tails, str, float]:
        """Write the workspace archive and the runner script into the volume's root
        (root's, the sandbox user cannot change them), then open the trigger FIFO: the
        waiting main process becomes the runner script. Its output arrives on the attach
        stream opened before the container started."""
        root = box.local
        if root is None:
            raise SandboxError(f"the volume of {box.cid[:12]} is no longer reachable here")
        try:
            _write_new(root / PAYLOAD, payload)
            _write_new(root / SCRIPT, _runner_script(request, self.config.disk, PAYLOAD).encode())
        except OSError as e:
            raise SandboxError(f"cannot write the workspace into {root}: {e}") from e
        tails = _Tails(box.sock, request.limits.output_cap)
        box.sock = None  # the reader closes it
        tails.start()
        start = time.monotonic()
        _trigger(root / GO, box.cid)
        return tails, "", start

    def _result(
        self,
        box: _Box,
        request: ExecRequest,
        tails: _Tails,
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
            metrics = self._read_file(box, f"{OUT}/metrics.json", METRICS_CAP)
        except _Refused as e:
            metrics = None
            stderr += f"\nrevtree: the metrics of descriptor {METRICS_FD} were not read: {e}\n"
        found = _Outputs(min(self.output_cap, OUTPUT_FILE_CAP))
        patterns = found.patterns((*request.outputs, *self.config.outputs))
        if patterns:
            self._collect(box, patterns, found)
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

    def _exit_code(self, box: _Box, eid: str, default: int) -> int:
        """The command's exit code, or ``default`` when the engine has none (the
        container was killed): a resident box's container status (it exits with its
        runner), else the exec's (polled: recorded just after the stream ends)."""
        if box.resident:
            try:
                return int(self.api.wait(box.cid, timeout=30)["StatusCode"])
            except Exception:
                return default
        for _ in range(100):
            try:
                info = self.api.exec_inspect(eid)
            except Exception:
                return default
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            time.sleep(0.01)
        return default

    def _why_killed(
        self, box: _Box, limits: Limits, why: list[str], code: int, start: float
    ) -> str:
        """A line for stderr naming why the host or the kernel killed the evaluation."""
        if why == ["disk"]:
            mb = self.config.disk // 2**20
            return f"\nrevtree: the evaluation was killed: workspace over its {mb} MiB disk cap\n"
        if code == 137 and not why and self._oom_killed(box.cid, start):
            mb = (limits.memory_bytes or 0) // 2**20
            return f"\nrevtree: the evaluation was killed: out of memory (limit {mb} MiB)\n"
        return ""

    def _kill(self, box: _Box) -> None:
        with contextlib.suppress(Exception):
            self.api.kill(box.cid)

    def _watch(
        self,
        box: _Box,
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
            return "disk" if _usage(disk) > self.config.disk else None

        watchdog(deadline, done, cancel, lambda: self._kill(box), why, over_disk)

    def _oom_killed(self, cid: str, since_monotonic: float) -> bool:
        """Whether the engine reported an ``oom`` event for the container since the
        command started (the event may trail the exit a little: asked a few times)."""
        since = time.time() - (time.monotonic() - since_monotonic) - 1
        for _ in range(4):
            try:
                events = self.api.events(
                    since=f"{since:.9f}",
                    until=f"{time.time():.9f}",
                    filters={"container": cid, "event": "oom"},
                    decode=True,
                )
                if any(True for _ in events):
                    return True
            except Exception:
                return False
            time.sleep(0.05)
        return False

    def _read_file(self, box: _Box, path: str, cap: int) -> bytes | None:
        """One regular file out of the container, or None if it is absent: read in the
        volume's folder when this host holds it, else copied out with ``get_archive``.
        A link, device, folder or file over ``cap`` raises :class:`_Refused`."""
        import docker.errors

        if (root := box.local) is not None:
            return _read_beneath(root, path[len(ROOT) + 1 :], cap)
        cid = box.cid
        try:  # stat first (HEAD): a refused file is never streamed
            head = self.api.head(
                self.api._url("/containers/{0}/archive", cid), params={"path": path}
            )
            if head.status_code == 404:
                return None
            self.api._raise_for_status(head)
            info = json.loads(base64.b64decode(head.headers["X-Docker-Container-Path-Stat"]))
        except Exception as e:
            raise _engine_error(f"copying {path} out of {cid[:12]}", e) from e
        if info.get("linkTarget"):
            raise _Refused("a symbolic link")
        if int(info.get("mode", 0)) & _TYPE_BITS:
            raise _Refused(f"not a regular file (mode {int(info.get('mode', 0)):#o})")
        if int(info.get("size", 0)) > cap:
            raise _Refused(f"{info.get('size')} bytes, over the cap of {cap}")
        try:
            stream, _ = self.api.get_archive(cid, path, chunk_size=1 << 16)
        except docker.errors.NotFound:
            return None
        except Exception as e:
            raise _engine_error(f"copying {path} out of {cid[:12]}", e) from e
        raw = bytearray()
        for chunk in stream:
            raw += chunk
            if len(raw) > cap + (1 << 16):
                raise _Refused(f"larger than the cap of {cap}")
        return _single_file(bytes(raw), cap)

    def _collect(self, box: _Box, patterns: Sequence[str], found: _Outputs) -> None:
        """The workspace files matching ``patterns`` into ``found``: walked in the
        volume's folder when this host holds it, else streamed with ``get_archive``."""
        if (root := box.local) is not None:
            _collect_here(root / "work", patterns, found)
            return
        try:
            stream, _ = self.api.get_archive(box.cid, WORK, chunk_size=1 << 16)
            with tarfile.open(fileobj=_Chunks(stream), mode="r|") as tar:
                _collect_members(tar, patterns, found)
        except Exception as e:
            raise _engine_error(f"copying the outputs out of {box.cid[:12]}", e) from e

    # -- warm pool ----------------------------------------------------------------

    def _default_limits(self) -> Limits:
        return Limits(
            timeout=1.0, memory_bytes=self.config.memory, cpu_seconds=self.config.cpu_seconds
        )

    def _take_warm(self, limits: Limits, patience: float = 5.0) -> _Box | None:
        """A pooled box for ``limits``, or None. The pool is refilled after the
        execution (see ``execute``), so that container start-ups do not compete with
        the command for the CPU. Should it run dry while the filler is making a box,
        that box is awaited (up to ``patience`` seconds) rather than a second one made
        beside it: under load two start-ups at once take longer than one."""
        if self._filler is None:
            return None
        try:
            box = self._warm.get_nowait()
        except queue.Empty:
            self._want_warm.set()
            if not self._refilling.is_set() or self._key(limits) != self.pool_key:
                return None
            try:
                box = self._warm.get(timeout=patience)
            except queue.Empty:
                return None
        if box.key != self._key(limits):
            self._trash.put(box)
            return None
        return box

    def _fill(self) -> None:
        limits = self._default_limits()
        while not self._closed.is_set():
            self._want_warm.wait()
            self._want_warm.clear()
            while not self._closed.is_set() and self._warm.qsize() < self.config.warm_pool:
                self._phase.wait_quiet()
                if self._closed.is_set():
                    return
                self._refilling.set()
                try:
                    box = self._new_box(limits, {WARM: "1"}, ())
                    (self._trash if self._closed.is_set() else self._warm).put(box)
                except SandboxError:
                    time.sleep(1.0)
                    break
                finally:
                    self._refilling.clear()

    def pooled(self) -> set[str]:
        """Ids of the warm pool's containers and names of their volumes (none has run
        any command), for tests that look for leftovers."""
        with self._warm.mutex:
            return {x for box in self._warm.queue for x in (box.cid, box.volume)}

    def warm_ready(self, timeout: float = 30.0) -> bool:
        """Wait until the warm pool is full (for benchmarks and tests); True at once
        when there is no pool."""
        if self._filler is None:
            return True
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self._warm.qsize() >= self.config.warm_pool:
                return True
            time.sleep(0.02)
        return False

    def create_for_inspection(self, labels: Mapping[str, str], gpus: Sequence[str]) -> str:
        """Create (never start) a container as ``execute`` would; returns its id.
        The caller removes it with :meth:`discard`. For tests of the request."""
        return self._create(self._default_limits(), labels, gpus).cid

    def discard(self, cid: str) -> None:
        info = self.api.inspect_container(cid)
        self._remove(_Box(cid, info["Config"]["Labels"].get("revtree.volume", ""), ()))


def reap(client: Any, everything: bool = False) -> int:
    """Remove revtree containers (and volumes) of dead owners, or all with
    ``everything``. Returns how many containers were removed."""
    api = client.api
    try:
        found = api.containers(all=True, filters={"label": LABEL})
        volumes = api.volumes(filters={"label": LABEL}).get("Volumes") or []
    except Exception as e:
        raise _engine_error("listing revtree containers", e) from e
    n = 0
    for c in found:
        if everything or not owner_alive(c.get("Labels", {}).get(OWNER, "")):
            with contextlib.suppress(Exception):
                api.remove_container(c["Id"], force=True, v=True)
                n += 1
    for v in volumes:
        if everything or not owner_alive((v.get("Labels") or {}).get(OWNER, "")):
            with contextlib.suppress(Exception):
                api.remove_volume(v["Name"], force=True)
    return n


def _usage(root: Path, max_entries: int = 200_000) -> int:
    """Bytes allocated under ``root`` (more than any cap if it holds too many entries)."""
    total, seen, stack = 0, 0, [str(root)]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as it:
            for entry in it:
                seen += 1
                if seen > max_entries:
                    return 1 << 62
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    return total


def missing_image(image: str, url: str, asked: str | None) -> str:
    """Why there is no evaluation image, and the ways to make one. ``asked``: the
    task's ``sandbox.image`` (None: the default image was looked for)."""
    from revtree.sandboxes.images import FALLBACK_IMAGE, base_tag

    if asked is None:
        what = f"no evaluation image: neither the base image {base_tag()!r} nor {image!r}"
    else:
        what = f"image {image!r} (the task's sandbox.image) is missing"
    return (
        f"{what} on the Docker engine at {url}. Make one with `revtree sandbox "
        "bootstrap-base` (from Debian packages, no registry needed), or `docker pull "
        f"{FALLBACK_IMAGE}` on a machine with a registry, or build the task's own image "
        "with `revtree sandbox build-image TASK` (and name it in sandbox.image). To "
        'run without Docker\'s isolation instead, set sandbox.backend = "local".'
    )


def _container_name(labels: Mapping[str, str]) -> str:
    parts = ["revtree", labels.get(RUN, ""), f"n{labels[NODE]}" if NODE in labels else ""]
    stem = "-".join(p for p in parts if p)
    safe = "".join(ch if ch.isalnum() or ch in "_.-" else "-" for ch in stem)[:80]
    return f"{safe}-{uuid.uuid4().hex[:10]}"


def _bind_mounts(mounts: Mapping[str, str], task_root: str | Path | None) -> list[Any]:
    import docker.types

    out = []
    for target, source in mounts.items():
        host = Path(source).expanduser()
        if not host.is_absolute():
            host = Path(task_root or ".") / host
        if not host.exists():
            raise SandboxError(f"mount {target!r}: host path {str(host)!r} does not exist")
        out.append(docker.types.Mount(target, str(host.resolve()), type="bind", read_only=True))
    return out


def _runner_script(request: ExecRequest, disk: int, archive: str = "-") -> str:
    """The runner script (exec'd, or a resident box's main process): caps, the
    workspace unpacked (as the sandbox user) from ``archive`` in the volume's root, or
    stdin for ``-``, a clean environment, the backstop timeout, ``out/metrics.json`` as
    the command's descriptor ``METRICS_FD`` (the runner itself does not hold it);
    afterwards every other process of the sandbox user is killed (PID 1, the holding
    process or the resident runner itself, is spared by the kernel)."""
    env = sandbox_env(request.env, home=WORK, tmp="/tmp")
    env["PATH"] = PATH
    assigns = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    backstop = int(request.limits.timeout + GRACE) + 1
    mem = request.limits.memory_bytes
    # RLIMIT_AS is set here, not by the engine: runc itself would not start under it
    limit_as = f"ulimit -v {mem // 1024} || exit 125\n" if mem else ""
    return (
        f"ulimit -f {disk // 512} || exit 125\n{limit_as}"
        f"tar -xf {shlex.quote(archive)} -C {WORK} || exit 125\ncd {WORK} || exit 125\n"
        f"if command -v timeout >/dev/null; then T='timeout -s KILL {backstop}'; else T=; fi\n"
        f"env -i {assigns} $T /bin/sh -c {shlex.quote(request.command)} </dev/null "
        f"{METRICS_FD}>{OUT}/metrics.json\n"
        "rc=$?\nkill -KILL -1 2>/dev/null\nexit $rc\n"
    )


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (never an existing file or link), readable by all, with ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(fd, 0o644)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _trigger(fifo: Path, cid: str, patience: float = 10.0) -> None:
    """Release a resident runner blocked opening ``fifo``. Retried while nobody reads
    it yet (a container just started); a SandboxError if its runner never comes."""
    end = time.monotonic() + patience
    while True:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
            break
        except OSError as e:
            if e.errno != errno.ENXIO or time.monotonic() > end:
                raise SandboxError(f"the runner of container {cid[:12]} is gone: {e}") from e
            time.sleep(0.002)
    try:
        os.write(fd, b"\n")
    except OSError as e:
        raise SandboxError(f"the runner of container {cid[:12]} is gone: {e}") from e
    finally:
        os.close(fd)


def _close_stream(sock: Any) -> None:
    for end in (sock, getattr(sock, "_sock", None)):
        with contextlib.suppress(Exception):
            if end is not None:
                end.close()


def _skeleton_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as out:
        for name, mode in (("work", 0o755), ("out", 0o700)):
            out.addfile(_owned(tarfile.TarInfo(name), tarfile.DIRTYPE, mode))
    return buf.getvalue()


def _workspace_tar(archive: bytes) -> bytes:
    """The request's archive, re-packed for ``tar -x`` in ``work/``. Members escaping the
    workspace are refused (tarfile's data filter)."""
    buf = io.BytesIO()
    try:
        src = tarfile.open(fileobj=io.BytesIO(archive), mode="r:*")  # noqa: SIM115
    except (tarfile.TarError, OSError) as e:
        raise SandboxError(f"cannot unpack the workspace: {e}") from e
    with src, tarfile.open(fileobj=buf, mode="w") as out:
        for member in _safe_members(src):
            data = src.extractfile(member) if member.isreg() else None
            out.addfile(_owned(member, member.type, member.mode), data)
    return buf.getvalue()


class _Refused(ValueError):
    """A file of the volume that is not copied out; the message says why."""


def _read_beneath(root: Path, rel: str, cap: int) -> bytes | None:
    """Read ``root/rel`` without following any link (``O_NOFOLLOW`` at every step), or
    None if absent. Anything but a regular file within ``cap`` raises :class:`_Refused`."""
    parts = rel.split("/")
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
            flags |= 0 if last else os.O_DIRECTORY
            try:
                fds.append(os.open(part, flags, dir_fd=fds[-1]))
            except FileNotFoundError:
                return None
            except OSError as e:
                raise _Refused(f"{e.strerror} at {part!r}") from e
        st = os.fstat(fds[-1])
        if why := _not_regular(st.st_mode):
            raise _Refused(why)
        if st.st_size > cap:
            raise _Refused(f"{st.st_size} bytes, over the cap of {cap}")
        data = b""
        while len(data) <= cap and (chunk := os.read(fds[-1], cap + 1 - len(data))):
            data += chunk
        if len(data) > cap:
            raise _Refused(f"larger than the cap of {cap}")
        return data
    finally:
        for fd in fds:
            os.close(fd)


def _not_regular(mode: int) -> str:
    """Why a file of this mode is not copied out ("" for a regular file)."""
    kinds = (
        (stat.S_ISREG, ""),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    )
    return next((why for test, why in kinds if test(mode)), "not a regular file")


def glob_match(path: str, pattern: str) -> bool:
    """Whether the workspace path ``path`` (``a/b.txt``) matches ``pattern``: ``*``,
    ``?`` and ``[...]`` within one path segment, ``**`` for any number of segments. A
    path that is absolute or holds ``.`` or ``..`` segments matches nothing."""
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return False
    return _match(parts, pattern.split("/"))


def _match(parts: Sequence[str], pats: Sequence[str]) -> bool:
    if not pats:
        return not parts
    if pats[0] == "**":
        return any(_match(parts[i:], pats[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pats[0]) and _match(parts[1:], pats[1:])


@dataclass
class _Outputs:
    """The declared outputs found so far: copied files, refused paths with why, caps."""

    cap: int
    files: dict[str, bytes] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    total: int = 0

    def patterns(self, globs: Sequence[str]) -> list[str]:
        """The usable globs (``./`` dropped, duplicates removed); one that is absolute
        or climbs out with ``..`` matches nothing and is refused."""
        usable: list[str] = []
        for glob in globs:
            while glob.startswith("./"):
                glob = glob[2:]
            if glob.startswith("/") or ".." in glob.split("/"):
                self.refused[glob] = "a path out of the workspace"
            elif glob and glob not in usable:
                usable.append(glob)
        return usable

    def fits(self, rel: str, size: int) -> bool:
        """Whether a file of ``size`` bytes is under both caps (else it is refused)."""
        if size > self.cap:
            self.refused[rel] = f"{size} bytes, over the cap of {self.cap} per file"
        elif self.total + size > OUTPUTS_CAP:
            self.refused[rel] = f"over the cap of {OUTPUTS_CAP} bytes for all outputs"
        return rel not in self.refused

    def add(self, rel: str, data: bytes) -> None:
        self.files[rel] = data
        self.total += len(data)


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """``(relative path, lstat)`` of everything under ``root``, in name order, links
    never followed; at most ``MAX_ENTRIES`` entries."""
    stack, seen = [""], 0
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(root / folder) as it:
                entries = sorted(it, key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                return
            rel = f"{folder}/{entry.name}" if folder else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            yield rel, st
            if stat.S_ISDIR(st.st_mode):
                stack.append(rel)


def _collect_here(work: Path, patterns: Sequence[str], found: _Outputs) -> None:
    """The matching files of the workspace folder ``work`` on this host into ``found``
    (folders are walked, never copied or refused)."""
    for rel, st in _walk(work):
        if stat.S_ISDIR(st.st_mode) or not any(glob_match(rel, p) for p in patterns):
            continue
        if why := _not_regular(st.st_mode):
            found.refused[rel] = why
        elif found.fits(rel, st.st_size):
            try:
                data = _read_beneath(work, rel, found.cap)
            except _Refused as e:
                found.refused[rel] = str(e)
                continue
            if data is not None and found.fits(rel, len(data)):
                found.add(rel, data)


def _collect_members(tar: tarfile.TarFile, patterns: Sequence[str], found: _Outputs) -> None:
    """The matching members of a streamed ``get_archive`` of ``work/`` into ``found``."""
    for member in tar:
        rel = member.name.partition("/")[2].rstrip("/")
        if not rel or member.isdir() or not any(glob_match(rel, p) for p in patterns):
            continue
        if member.issym():
            found.refused[rel] = "a symbolic link"
        elif member.islnk():
            found.refused[rel] = "a hard link"
        elif member.isfifo():
            found.refused[rel] = "a FIFO"
        elif member.ischr() or member.isblk():
            found.refused[rel] = "a device"
        elif not member.isreg():
            found.refused[rel] = "not a regular file"
        elif found.fits(rel, member.size):
            f = tar.extractfile(member)
            assert f is not None
            found.add(rel, f.read())


class _Chunks(io.RawIOBase):
    """A readable file over an iterator of byte chunks (a streamed ``get_archive``)."""

    def __init__(self, chunks: Any) -> None:
        super().__init__()
        self.chunks, self.buf = iter(chunks), b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self.buf:
            try:
                self.buf = next(self.chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self.buf))
        b[:n] = self.buf[:n]
        self.buf = self.buf[n:]
        return n


def _safe_members(src: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    dest = "/nonexistent-revtree-workspace"
    try:
        for member in src:
            filtered = tarfile.data_filter(member, dest)
            if filtered is not None:
                yield filtered
    except (tarfile.TarError, OSError) as e:
        raise SandboxError(f"cannot unpack the workspace: {e}") from e


def _owned(info: tarfile.TarInfo, kind: bytes, mode: int) -> tarfile.TarInfo:
    info.type, info.mode = kind, mode
    info.uid = info.gid = UID
    info.uname = info.gname = ""
    return info


def _single_file(raw: bytes, cap: int) -> bytes:
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            members = tar.getmembers()
            if len(members) != 1 or not members[0].isreg():
                raise _Refused("not a single regular file")
            member = members[0]
            if member.size > cap or "/" in member.name.strip("/") or member.name in ("..", "."):
                raise _Refused("a bad name or size")
            f = tar.extractfile(member)
            assert f is not None
            return f.read(cap + 1)[:cap]
    except tarfile.TarError as e:
        raise _Refused(f"an unreadable archive: {e}") from e


class _Phases:
    """Counts executions launching (up to their command's start) and running, so that
    background work (removals, pool refills: container start-ups and kills that load
    the engine and the CPU) waits for none launching, and for one running or an idle
    spell, rather than slowing the next launch. Never more than ``at_most`` seconds."""

    def __init__(self, idle: float = 0.3, at_most: float = 1.0) -> None:
        self.cond = threading.Condition()
        self.starting = self.running = 0
        self.stopped = False
        self.idle_since, self.idle, self.at_most = time.monotonic(), idle, at_most

    def launching(self) -> _Phase:
        with self.cond:
            self.starting += 1
        return _Phase(self)

    def move(self, starting: int, running: int) -> None:
        with self.cond:
            self.starting += starting
            self.running += running
            if self.starting == self.running == 0:
                self.idle_since = time.monotonic()
            self.cond.notify_all()

    def stop(self) -> None:
        """From now on :meth:`wait_quiet` returns at once (the sandbox is closing)."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def wait_quiet(self) -> None:
        end = time.monotonic() + self.at_most
        with self.cond:
            while not self.stopped and (now := time.monotonic()) < end:
                idle = self.running == 0 and now - self.idle_since >= self.idle
                if self.starting == 0 and (self.running > 0 or idle):
                    return
                self.cond.wait(min(0.05, end - now))


@dataclass
class _Phase:
    """One execution's place in :class:`_Phases`: launching, then running, then ended."""

    phases: _Phases
    state: str = "starting"

    def launched(self) -> None:
        if self.state == "starting":
            self.state = "running"
            self.phases.move(-1, +1)

    def end(self) -> None:
        if self.state != "ended":
            starting, running = (-1, 0) if self.state == "starting" else (0, -1)
            self.state = "ended"
            self.phases.move(starting, running)


class _Tails(threading.Thread):
    """Drains an exec's hijacked socket, keeping the last ``cap`` bytes of stdout and
    stderr; :meth:`send` writes its stdin and closes it."""

    def __init__(self, sock: Any, cap: int) -> None:
        super().__init__(daemon=True)
        self.sock, self.cap = sock, cap
        self.raw = getattr(sock, "_sock", sock)
        with contextlib.suppress(AttributeError, OSError):
            self.raw.settimeout(None)  # a quiet command is not a dead engine
        self.bufs = [bytearray(), bytearray()]
        self.totals = [0, 0]

    def send(self, data: bytes) -> None:
        """Write ``data`` then close the write side (errors: the container was killed)."""
        with contextlib.suppress(OSError, AttributeError):
            self.raw.sendall(data)
            self.raw.shutdown(socket.SHUT_WR)

    def run(self) -> None:
        from docker.utils.socket import frames_iter

        with contextlib.suppress(Exception):
            for kind, chunk in frames_iter(self.sock, False):
                if kind not in (1, 2) or not chunk:
                    continue
                i = kind - 1
                self.totals[i] += len(chunk)
                buf = self.bufs[i]
                buf += chunk
                if len(buf) > 2 * self.cap:
                    del buf[: len(buf) - self.cap]
        for end in (self.sock, self.raw):
            with contextlib.suppress(Exception):
                end.close()

    @property
    def truncated(self) -> bool:
        return any(t > self.cap for t in self.totals)

    def text(self, i: int) -> str:
        return bytes(self.bufs[i][-self.cap :]).decode("utf-8", errors="replace")
