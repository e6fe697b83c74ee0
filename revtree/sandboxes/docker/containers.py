"""One box's life on the engine: a container (running only its holding process) and
its workspace volume, created hardened (see the package doc for what that covers),
started, given its skeleton, killed, asked for its exit code or an out-of-memory kill,
and removed."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from revtree.errors import SandboxError
from revtree.sandboxes.base import Limits
from revtree.sandboxes.docker.engine import NODE, PATH, ROOT, RUN, UID, engine_error
from revtree.sandboxes.docker.files import skeleton_tar
from revtree.tasks.sandbox import DockerConfig

HOLD = ["sleep", "2147483647"]  # the idle process a container runs until the exec
GO, SCRIPT, PAYLOAD = ".go", ".run", ".workspace.tar"  # in the volume's root (root-owned)
# the resident runner: blocks opening the trigger FIFO, then becomes the request's script
RESIDENT = ["/bin/sh", "-c", f"read _ <{ROOT}/{GO} && exec /bin/sh {ROOT}/{SCRIPT}"]


@dataclass
class Box:
    """A container (running only its holding process) and its workspace volume."""

    cid: str
    volume: str
    key: tuple[Any, ...]
    mountpoint: str = ""  # where the engine keeps the volume, if on this host
    resident: bool = False  # runs RESIDENT (volume folder usable here), not HOLD
    sock: Any = None  # a resident box's attach stream (stdout, stderr), opened before start

    def take_stream(self) -> Any:
        """The attach stream, handed over: its reader closes it, not the box."""
        sock, self.sock = self.sock, None
        return sock

    @property
    def local(self) -> Path | None:
        """The volume's folder when this process can use it (engine on this host, root)."""
        if self.mountpoint and os.access(self.mountpoint, os.R_OK | os.W_OK | os.X_OK):
            return Path(self.mountpoint)
        return None


def limits_key(limits: Limits) -> tuple[Any, ...]:
    """What a box is made for: a warm box serves only requests of the same key."""
    return (limits.memory_bytes, limits.cpu_seconds)


def container_name(labels: Mapping[str, str]) -> str:
    """``revtree-<run>-n<node>-<random>``, from the request's labels."""
    parts = ["revtree", labels.get(RUN, ""), f"n{labels[NODE]}" if NODE in labels else ""]
    stem = "-".join(p for p in parts if p)
    safe = "".join(ch if ch.isalnum() or ch in "_.-" else "-" for ch in stem)[:80]
    return f"{safe}-{uuid.uuid4().hex[:10]}"


def bind_mounts(mounts: Mapping[str, str], task_root: str | Path | None) -> list[Any]:
    """The task's ``mounts`` (target: host path, relative to ``task_root``), read-only."""
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


WAIT_TIMEOUT = 30.0  # seconds of one engine wait for a resident box's exit
WAIT_TRIES = 4  # waits before the engine counts as not answering (a SandboxError)


class Containers:
    """Makes and removes the boxes of one sandbox: ``image`` run hardened per ``config``,
    as the sandbox user, with ``labels`` (revtree's and the owner's) and ``mounts``.
    ``host_volumes``: use a volume's folder on this host when this process may."""

    def __init__(
        self,
        api: Any,
        image: str,
        config: DockerConfig,
        labels: Mapping[str, str],
        mounts: Sequence[Any],
        pids_limit: int,
        host_volumes: bool,
    ) -> None:
        self.api, self.image, self.config = api, image, config
        self.labels, self.mounts = labels, list(mounts)
        self.pids_limit, self.host_volumes = pids_limit, host_volumes
        self.wait_timeout = WAIT_TIMEOUT

    def create(self, limits: Limits, labels: Mapping[str, str], gpus: Sequence[str]) -> Box:
        """A created (not started) box: its volume, and its container of the image."""
        import docker.types

        c = self.config
        all_labels = {**self.labels, **{k: str(v) for k, v in labels.items()}}
        name = container_name(labels)
        try:
            info = self.api.create_volume(name=name, driver="local", labels=all_labels)
            volume = info["Name"]
        except Exception as e:
            raise engine_error("creating a workspace volume", e) from e
        mountpoint = (info.get("Mountpoint") or "") if self.host_volumes else ""
        box = Box("", volume, limits_key(limits), mountpoint)
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
            raise engine_error(f"creating a container of {self.image!r}", e) from e
        return box

    def new_box(self, limits: Limits, labels: Mapping[str, str], gpus: Sequence[str]) -> Box:
        """A created and started box whose volume holds ``work/`` and ``out/`` (and, for
        a resident box, the trigger FIFO its main process waits on)."""
        box = self.create(limits, labels, gpus)
        if box.resident:
            self.skeleton(box)  # in the folder, before the runner looks for its FIFO
        self.start(box)
        if not box.resident:
            self.skeleton(box)
        return box

    def start(self, box: Box) -> None:
        """Open a resident box's attach stream, then start its main process; on failure
        the box is removed and an error raised."""
        try:
            if box.resident:
                params = {"stdout": 1, "stderr": 1, "stream": 1}
                box.sock = self.api.attach_socket(box.cid, params=params)
            self.api.start(box.cid)
        except Exception as e:
            self.remove(box)
            raise engine_error(f"starting container {box.cid[:12]} of {self.image!r}", e) from e

    def skeleton(self, box: Box) -> None:
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
                self.remove(box)
                raise SandboxError(f"cannot prepare the workspace volume {root}: {e}") from e
            return
        try:
            self.api.put_archive(box.cid, ROOT, skeleton_tar())
        except Exception as e:
            self.remove(box)
            raise engine_error(f"copying the workspace into {box.cid[:12]}", e) from e

    def rename(self, box: Box, labels: Mapping[str, str]) -> None:
        """Give a warm container the node in its name (labels are fixed at creation);
        cosmetic, so a failure is ignored."""
        with contextlib.suppress(Exception):
            self.api.rename(box.cid, container_name(labels))

    def remove(self, box: Box) -> None:
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

    def kill(self, box: Box) -> None:
        with contextlib.suppress(Exception):
            self.api.kill(box.cid)

    def exit_code(self, box: Box, eid: str) -> int | None:
        """The command's exit code, or None when the engine has none (the container was
        killed or is gone): a resident box's container status (it exits with its runner;
        a wait that times out, as a busy engine's does after a large output, is asked
        again: WAIT_TRIES waits of WAIT_TIMEOUT s), else the exec's (polled: recorded
        just after the stream ends). An engine that never answers is a SandboxError,
        never the candidate's exit code."""
        import docker.errors
        import tenacity

        if box.resident:
            try:
                for attempt in tenacity.Retrying(
                    stop=tenacity.stop_after_attempt(WAIT_TRIES),
                    wait=tenacity.wait_exponential(multiplier=0.2, max=2),
                    retry=tenacity.retry_if_not_exception_type(docker.errors.NotFound),
                    reraise=True,
                ):
                    with attempt:
                        answer = self.api.wait(box.cid, timeout=self.wait_timeout)
                return int(answer["StatusCode"])
            except docker.errors.NotFound:
                return None
            except Exception as e:
                raise engine_error(f"waiting for {box.cid[:12]} to exit", e) from e
        for _ in range(100):
            try:
                info = self.api.exec_inspect(eid)
            except docker.errors.NotFound:
                return None
            except Exception as e:
                raise engine_error(f"reading the exit code in {box.cid[:12]}", e) from e
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            time.sleep(0.01)
        return None

    def oom_killed(self, cid: str, since_monotonic: float) -> bool:
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


def _close_stream(sock: Any) -> None:
    for end in (sock, getattr(sock, "_sock", None)):
        with contextlib.suppress(Exception):
            if end is not None:
                end.close()
