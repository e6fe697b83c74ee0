"""Shared fixtures: task folders written into ``tmp_path`` and tar workspaces."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

SOLVER = "X = 1.0\nN = 4\nMODE = 'fast'\n"
EVALUATE = "import json, os\nos.write(3, json.dumps({'score': 1.0}).encode())\n"
TASK_TOML = """\
name = "demo"
goal = "make score high"
editable = ["solver.py"]
protected = ["evaluate.py"]

[evaluate]
command = "python evaluate.py"
metric = "score"
direction = "maximize"
timeout = "30s"
"""

WriteTask = Callable[..., Path]


def write_task_folder(
    root: Path, toml: str = TASK_TOML, files: Mapping[str, str] | None = None
) -> Path:
    """A task folder at ``root``: task.toml, solver.py, evaluate.py plus ``files``."""
    root.mkdir(parents=True, exist_ok=True)
    content = {"solver.py": SOLVER, "evaluate.py": EVALUATE, **(files or {})}
    for rel, text in content.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "task.toml").write_text(toml)
    return root


@pytest.fixture
def write_task(tmp_path: Path) -> WriteTask:
    """``write_task(toml=..., files=..., name=...)`` -> the task folder under tmp_path."""

    def write(
        toml: str = TASK_TOML, files: Mapping[str, str] | None = None, name: str = "task"
    ) -> Path:
        return write_task_folder(tmp_path / name, toml, files)

    return write


def make_tar(files: Mapping[str, bytes | str], modes: Mapping[str, int] | None = None) -> bytes:
    """An in-memory tar of ``files`` (path -> content)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            raw = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            info.mode = (modes or {}).get(name, 0o644)
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


@pytest.fixture
def tar_of() -> Callable[..., bytes]:
    return make_tar


@pytest.fixture(autouse=True)
def _local_sandbox_for_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    """``backend = "auto"`` picks Docker where an engine and the base image exist; the
    orchestrator tests are about the orchestrator, so they run on the local backend.
    Docker-marked tests ask for Docker explicitly."""
    monkeypatch.setenv("REVTREE_SANDBOX", "local")
