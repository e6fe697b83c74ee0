"""Evaluation images: the registry-free base image and per-task images built on it.

``bootstrap_base`` makes ``revtree-base:<suite>-v<N>`` from Debian packages alone:
``debootstrap --variant=minbase --include=python3,python3-pip,python3-venv`` into a
folder, a ``python`` link to ``python3``, then ``tar | docker import``. It needs root,
``debootstrap`` and a Debian mirror (the one apt uses is found in
``/etc/apt/sources.list*``); no container registry. ``build_image`` builds a task
image from a Dockerfile or a requirements list on top of a base image; requirements are
installed with the base's pip (the base image includes ``python3-pip`` for this).

``default_image`` is the image a task gets when it names none: the bootstrapped base if
this engine has it, else ``python:3.11-slim`` (pulled as usual where a registry is
reachable).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from revtree.errors import SandboxError
from revtree.sandboxes.progress import BuildProgress

BASE_REPO = "revtree-base"
RECIPE_VERSION = 2  # bump when the bootstrap recipe changes: the tag caches the image
FALLBACK_IMAGE = "python:3.11-slim"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PACKAGES = "python3,python3-pip,python3-venv"  # pip: task images install requirements


def host_suite(os_release: Path = Path("/etc/os-release")) -> str:
    """The Debian suite of this host (``bookworm``), or ``bookworm`` if unknown."""
    with contextlib.suppress(OSError):
        for line in os_release.read_text().splitlines():
            if line.startswith("VERSION_CODENAME=") and line.split("=", 1)[1].strip('"'):
                return line.split("=", 1)[1].strip('"')
    return "bookworm"


def base_tag(suite: str | None = None) -> str:
    """The tag of the bootstrapped base image for ``suite`` (default: the host's)."""
    return f"{BASE_REPO}:{suite or host_suite()}-v{RECIPE_VERSION}"


def apt_mirror(sources: Iterable[Path] | None = None) -> str:
    """The main Debian mirror apt is configured with (deb822 or one-line format)."""
    paths = sources or [
        Path("/etc/apt/sources.list"),
        *sorted(Path("/etc/apt/sources.list.d").glob("*")),
    ]
    for path in paths:
        with contextlib.suppress(OSError):
            text = path.read_text()
            for url in re.findall(r"^\s*(?:URIs:|deb(?:\s+\[[^]]*\])?)\s+(\S+)", text, re.M):
                if "/debian" in url and "security" not in url:
                    return str(url.rstrip("/"))
    return DEFAULT_MIRROR


def image_exists(client: Any, image: str) -> bool:
    import docker.errors

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.DockerException as e:
        raise SandboxError(f"the Docker engine did not answer about image {image!r}: {e}") from e
    return True


def default_image(client: Any) -> str:
    """The bootstrapped base image if present, else ``python:3.11-slim``."""
    tag = base_tag()
    return tag if image_exists(client, tag) else FALLBACK_IMAGE


def bootstrap_base(
    client: Any,
    tag: str | None = None,
    suite: str | None = None,
    mirror: str | None = None,
    force: bool = False,
    progress: BuildProgress | None = None,
) -> str:
    """Build the base image from Debian packages; returns its tag. Cached by tag.
    ``progress`` is told debootstrap's stages and the import's bytes as they pass."""
    suite = suite or host_suite()
    tag = tag or base_tag(suite)
    if not force and image_exists(client, tag):
        return tag
    if (why := cannot_bootstrap()) is not None:
        raise SandboxError(f"building {tag}: {why}")
    with tempfile.TemporaryDirectory(prefix="revtree-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        argv = ["debootstrap", "--variant=minbase", f"--include={PACKAGES}", suite, str(root)]
        step = f"building {tag}: debootstrap {suite}"
        _debootstrap(step, [*argv, mirror or apt_mirror()], progress)
        link = root / "usr/local/bin/python"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to("/usr/bin/python3")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (root / cache).glob("*.deb"):
                p.unlink()
        _import(client, root, tag, progress)
    return tag


def cannot_bootstrap() -> str | None:
    """Why this machine cannot build the base image (None: it can): debootstrap is
    missing, or this process is not root (debootstrap needs it)."""
    if shutil.which("debootstrap") is None:
        return "debootstrap is not installed (apt-get install debootstrap)"
    if os.geteuid() != 0:
        return "debootstrap needs root (run `sudo revtree sandbox bootstrap-base`)"
    return None


def _debootstrap(step: str, argv: Sequence[str], progress: BuildProgress | None) -> None:
    """Run debootstrap, its output line by line to ``progress``; a failure ends with the
    last lines it printed."""
    try:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
    except OSError as e:
        raise SandboxError(f"{step}: cannot run {argv[0]}: {e}") from e
    assert proc.stdout is not None
    tail: collections.deque[str] = collections.deque(maxlen=30)
    with proc:
        for line in proc.stdout:
            tail.append(line)
            if progress is not None:
                progress.line(line)
    if proc.returncode != 0:
        raise SandboxError(f"{step} failed (exit {proc.returncode}): {''.join(tail).strip()}")


def _counted(raw: IO[bytes], total: int, progress: BuildProgress) -> Iterator[bytes]:
    """``raw`` in chunks (a chunked upload), telling ``progress`` how much of about
    ``total`` bytes has passed."""
    done = 0
    while data := raw.read(1 << 20):
        done += len(data)
        progress.importing(done, total)
        yield data


def _tree_size(root: Path) -> int:
    total = 0
    for path in root.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
    return total


def _import(client: Any, root: Path, tag: str, progress: BuildProgress | None = None) -> None:
    """``tar -C root -c . | docker import - tag``, streamed."""
    import docker.errors

    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE
    )
    assert tar.stdout is not None
    stream: IO[bytes] | Iterator[bytes] = tar.stdout
    if progress is not None:
        progress.importing(0, 1)
        stream = _counted(tar.stdout, _tree_size(root), progress)
    repo, _, version = tag.rpartition(":")
    try:
        client.api.import_image_from_stream(
            stream, repository=repo, tag=version, changes=['CMD ["python3"]']
        )
    except docker.errors.DockerException as e:
        raise SandboxError(f"building {tag}: docker import failed: {e}") from e
    finally:
        tar.stdout.close()
        tar.wait()
    if not image_exists(client, tag):
        raise SandboxError(f"building {tag}: docker import finished but the image is missing")


def dockerfile_for(base: str, requirements: Sequence[str]) -> str:
    """A Dockerfile installing ``requirements`` (pip specifiers) on ``base`` with the
    base's ``python -m pip`` (system-wide, also on Debian's PEP 668 python). pip runs
    in a copy of the build context, so a requirement may name a file in it
    (``./wheels/x-1.0-py3-none-any.whl``)."""
    lines = [f"FROM {base}"]
    if requirements:
        lines += [
            "COPY . /tmp/revtree-build",
            # PEP 668: Debian's python refuses pip installs outside a venv unless told
            "ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1",
            "RUN cd /tmp/revtree-build && python -m pip install --no-cache-dir "
            "-r requirements.txt && cd / && rm -rf /tmp/revtree-build",
        ]
    return "\n".join(lines) + "\n"


def build_image(
    client: Any,
    tag: str | None = None,
    base: str | None = None,
    dockerfile: Path | None = None,
    requirements: Sequence[str] = (),
    context: Path | None = None,
) -> str:
    """Build an evaluation image; returns its tag.

    With ``dockerfile``, its folder (or ``context``) is the build context and ``base``
    is passed as the build argument ``BASE``. Else a Dockerfile installing
    ``requirements`` on ``base`` (default: :func:`default_image`) is generated, with
    ``context`` (if any) as the folder of files the requirements may name. The tag
    defaults to ``revtree-task:<hash of the inputs>``. A failure names the image and
    the step that failed.
    """
    import docker.errors

    base = base or default_image(client)
    ctx: Path | None = context
    if dockerfile is not None:
        text = dockerfile.read_text()
        ctx = context or dockerfile.parent
    else:
        text = dockerfile_for(base, requirements)
    fileobj = _context_tar(text, requirements, ctx)
    digest = hashlib.sha256(f"{base}\n".encode() + fileobj.getvalue()).hexdigest()
    tag = tag or f"revtree-task:{digest[:12]}"
    step, logs = "?", list[str]()
    try:
        for chunk in client.api.build(
            fileobj=fileobj,
            custom_context=True,
            tag=tag,
            buildargs={"BASE": base},
            rm=True,
            forcerm=True,
            decode=True,
        ):
            logs.append(str(chunk.get("stream", "")))
            if m := re.match(r"Step \d+/\d+ : (.*)", str(chunk.get("stream", ""))):
                step = m.group(1).strip()
            if "error" in chunk:
                msg = str(chunk.get("error", "")).strip() + _hint(logs, step, base)
                raise SandboxError(f"building image {tag}: step {step!r} failed: {msg}")
    except docker.errors.DockerException as e:
        raise SandboxError(f"building image {tag}: step {step!r} failed: {e}") from e
    return tag


def _hint(logs: Sequence[str], step: str, base: str) -> str:
    """Advice for failures with a known cause, from the build's output."""
    if step.startswith("FROM"):
        return (
            f" (the base image {base!r} is not on this engine and could not be pulled: "
            "make it with `revtree sandbox bootstrap-base`, or name another with --base)"
        )
    if any("No module named pip" in line for line in logs[-20:]):
        return (
            " (the base image has no pip: use the current base image, "
            "`revtree sandbox bootstrap-base`, which includes python3-pip)"
        )
    tail = "".join(logs[-5:]).strip()
    return f"; last output: {tail[-500:]}" if tail else ""


def _context_tar(dockerfile: str, requirements: Sequence[str], folder: Path | None) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if folder is not None:
            for path in sorted(folder.rglob("*")):
                if path.is_file() and not path.is_symlink():
                    info = tar.gettarinfo(path, arcname=os.path.relpath(path, folder))
                    info.mtime = 0  # the default tag hashes the context: content only
                    with path.open("rb") as f:
                        tar.addfile(info, f)
        for name, text in (
            ("Dockerfile", dockerfile),
            ("requirements.txt", "\n".join(requirements) + "\n"),
        ):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf
