"""A run whose killed session left its ``[sandbox] workspaces`` folder (in a tmpfs, say):
``revtree rm`` removes it with the run, not only its record; ``revtree resume`` removes
it as it starts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from revtree.memory import Store
from revtree.orchestrator import create_run
from revtree.orchestrator.run import RunPaths
from revtree.sandboxes.local import LocalSandbox
from revtree.tasks import load_task
from tests.orchestrator.conftest import cli_env, make_task, revtree, revtree_here, wait_for


def test_rm_removes_the_workspaces_folder_a_killed_session_left(
    tmp_path: Path, home: Path, store: Store
) -> None:
    run = create_run(store, load_task(make_task(tmp_path / "t")), home)
    fast = tmp_path / "fast"
    fast.mkdir()
    killed = LocalSandbox(RunPaths(home, run.id).work, workspaces=fast)  # never closed
    assert killed.spaces is not None
    (killed.spaces.folder() / "revtree-abcd1234" / "ws").mkdir(parents=True)
    revtree_here(home, "rm", run.id, "--yes")
    assert list(fast.iterdir()) == []
    assert not RunPaths(home, run.id).dir.exists()


@pytest.mark.slow(seconds=10)
def test_a_killed_run_leaves_its_workspaces_to_the_resume_which_removes_them(
    tmp_path: Path, home: Path
) -> None:
    """The real CLI: ``revtree run`` with ``[sandbox] workspaces`` killed (SIGKILL) as an
    evaluation runs leaves its folder there; ``revtree resume`` removes it, finishes the
    run in a folder of its own, and leaves nothing there at its end."""
    fast = tmp_path / "fast"
    fast.mkdir()
    task = make_task(tmp_path / "t", budget=4, sleep=0.5)
    toml = (task / "task.toml").read_text()
    spaces = f'[sandbox]\nbackend = "local"\nworkspaces = "{fast}"\n'
    (task / "task.toml").write_text(toml.replace("[sandbox]\n", spaces))
    cmd = [sys.executable, "-m", "revtree", "run", str(task), "--quiet"]
    proc = subprocess.Popen(
        cmd, env=cli_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        left = wait_for(lambda: list(fast.glob("revtree-ws-*/revtree-*/ws")), 60, "a workspace")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert left[0].parent.parent.is_dir()  # the killed session's folder stays
    revtree(home, "resume", "last", "--quiet", timeout=120)
    assert list(fast.iterdir()) == []
    shown = json.loads(revtree_here(home, "show", "last", "--json").stdout)
    assert shown["status"] == "completed", shown["status"]
