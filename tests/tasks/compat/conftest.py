"""Helpers: compat task folders in tmp_path, and their generated commands run for real."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from revtree.tasks import code_files
from revtree.tasks.load import source_dir
from revtree.tasks.spec import TaskSpec

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


def write_folder(root: Path, files: Mapping[str, str]) -> Path:
    """A folder at ``root`` holding ``files`` (path -> text, dedented)."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def workspace(spec: TaskSpec, dest: Path, replace: Mapping[str, str] | None = None) -> Path:
    """What a sandbox holds: the code files, the support files, ``replace`` on top."""
    src = source_dir(spec)
    for rel in code_files(spec):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, dest / rel)
    for rel, text in {**spec.support_files, **(replace or {})}.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(textwrap.dedent(text))
    return dest


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str
    metrics: dict[str, Any] | None  # what the command wrote to file descriptor 3

    @property
    def last_stderr_line(self) -> str:
        return [ln for ln in self.stderr.splitlines() if ln.strip()][-1]


def run(ws: Path, command: str, env: Mapping[str, str] | None = None, timeout: float = 60) -> Ran:
    """``command`` through the shell in ``ws``, with ``python`` being this interpreter and
    file descriptor 3 (the metrics channel) open on a file, as in a sandbox."""
    out = ws.parent / f"{ws.name}-metrics.json"
    out.unlink(missing_ok=True)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    full_env = {**os.environ, "PATH": path, **(env or {})}
    full_env.pop("REVTREE_METRICS", None)
    proc = subprocess.run(
        f"{{ {command}\n}} 3>{shlex.quote(str(out))}",
        shell=True,
        cwd=ws,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    text = out.read_text() if out.is_file() else ""
    metrics = json.loads(text) if text.strip() else None
    return Ran(proc.returncode, proc.stdout, proc.stderr, metrics)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    """A test of this folder is in the ``compat`` group only when it carries the marker:
    the folder's name is a keyword of every test in it, which the group summary would
    read as the group."""
    report = yield
    if item.get_closest_marker("compat") is None:
        report.keywords.pop("compat", None)
    return report
