"""The Docker engine as a whole: where it is and connecting to it, the labels every
container and volume of revtree carries (``revtree.sandbox`` and its owner: host, pid,
process start time), the reaper that removes those of dead owners, and the message for
a missing image. Also the names the other modules of this package share: the sandbox
user and the container's paths."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any

from revtree.errors import SandboxError

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


def owner_id() -> str:
    """``host:pid:start`` of this process (start time guards against pid reuse)."""
    return f"{socket.gethostname()}:{os.getpid()}:{start_time(os.getpid())}"


def start_time(pid: int) -> str:
    """The start time of process ``pid`` (field 22 of ``/proc/<pid>/stat``), or ``?``."""
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
    return start_time(int(pid)) == start


def engine_error(what: str, e: BaseException) -> SandboxError:
    """The error for an engine that failed or stopped answering while doing ``what``."""
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


def reap(client: Any, everything: bool = False) -> int:
    """Remove revtree containers (and volumes) of dead owners, or all with
    ``everything``. Returns how many containers were removed."""
    api = client.api
    try:
        found = api.containers(all=True, filters={"label": LABEL})
        volumes = api.volumes(filters={"label": LABEL}).get("Volumes") or []
    except Exception as e:
        raise engine_error("listing revtree containers", e) from e
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
        "run without Docker's isolation instead, pass --sandbox local (or set "
        'sandbox.backend = "local" in task.toml).'
    )
