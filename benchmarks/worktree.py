"""A revision of this repository checked out beside it, for a benchmark's baseline: its
modules put first on ``PYTHONPATH`` run as that revision ran (``evaluation.py``,
``run_start.py``)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """``revision`` in a detached git worktree in a temporary folder, removed after the
    block, its package's bytecode written first, so that no run of it pays the
    compilation (this tree's is written as it runs, once)."""
    git = ["git", "-C", str(ROOT), "worktree"]
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / "baseline"
        subprocess.run([*git, "add", "-q", "--detach", str(tree), revision], check=True)
        try:
            compile_all = [sys.executable, "-m", "compileall", "-q", str(tree / "revtree")]
            subprocess.run(compile_all, check=True)
            yield tree
        finally:
            subprocess.run([*git, "remove", "--force", str(tree)], check=False)
