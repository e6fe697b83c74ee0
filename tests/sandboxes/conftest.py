"""Backends for the sandbox suites: ``local`` always, ``docker`` where an engine answers
and the evaluation image is on it (else its tests skip)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from revtree.sandboxes import Sandbox, make_sandbox
from revtree.tasks.sandbox import DockerConfig

BACKENDS = [
    "local",
    pytest.param("bwrap", marks=pytest.mark.bwrap),
    pytest.param("docker", marks=pytest.mark.docker),
]
LOCAL_KINDS = ("local", "bwrap")  # backends whose workspaces are folders under base_dir


@pytest.fixture(scope="session")
def bwrap_usable() -> None:
    """Nothing, or a skip saying why the namespace sandbox cannot run here."""
    from revtree.sandboxes.bwrap import usable

    if (why := usable()) is not None:
        pytest.skip(why)


@pytest.fixture
def docker_client() -> Iterator[Any]:
    """A docker client, or a skip saying why there is none. Per test: the image is
    looked for once the test holds the images lock (``tests/conftest.py``), so a test
    that hid it for a while on another worker costs no skip."""
    try:
        from revtree.sandboxes.docker import engine_answers
        from revtree.sandboxes.images import default_image, image_exists
    except ImportError as e:  # pragma: no cover
        pytest.skip(f"docker SDK missing: {e}")
    client = engine_answers()
    if client is None:
        pytest.skip("no Docker engine answers")
    image = default_image(client)
    if not image_exists(client, image):
        client.close()
        pytest.skip(f"image {image} missing (scripts/bootstrap-base-image.sh makes one)")
    yield client
    client.close()


def docker_sandbox(client: Any, **config: Any) -> Sandbox:
    from revtree.sandboxes.docker import DockerSandbox

    return DockerSandbox(DockerConfig(**config), client=None)


@pytest.fixture(params=BACKENDS)
def sandbox(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sandbox]:
    if request.param == "docker":
        request.getfixturevalue("docker_client")
    if request.param == "bwrap":
        request.getfixturevalue("bwrap_usable")
    box = make_sandbox(request.param, base_dir=tmp_path / "sandboxes")
    yield box
    box.close()


@pytest.fixture
def forked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    """A local sandbox whose commands start from its fork server (on here whatever the
    environment says)."""
    from revtree.sandboxes.local import LocalSandbox

    monkeypatch.setenv("REVTREE_FORK_SERVER", "1")
    box = LocalSandbox(tmp_path / "box")
    yield box
    box.close()


def leftovers(sandbox: Sandbox, tmp_path: Path) -> list[str]:
    """What this sandbox left behind once the background removals handed over so far
    are done: workspace folders, or containers and volumes, less the warm pool's unused
    containers (alive by design until ``close``)."""
    if sandbox.name in LOCAL_KINDS:
        sandbox.drain()  # type: ignore[attr-defined]  # removal runs in the background
        base = tmp_path / "sandboxes"
        return [p.name for p in base.iterdir()] if base.is_dir() else []
    from revtree.sandboxes.docker import LABEL, OWNER, owner_id

    sandbox.drain()  # type: ignore[attr-defined]  # removal runs in the background
    sandbox.warm_ready()  # type: ignore[attr-defined]  # the pool is full, its filler idle
    pooled = sandbox.pooled()  # type: ignore[attr-defined]
    api = sandbox.client.api  # type: ignore[attr-defined]
    mine = {"label": [LABEL, f"{OWNER}={owner_id()}"]}
    containers = [c["Id"] for c in api.containers(all=True, filters=mine)]
    volumes = [v["Name"] for v in api.volumes(filters=mine).get("Volumes") or []]
    return [x[:12] for x in containers + volumes if x not in pooled]
