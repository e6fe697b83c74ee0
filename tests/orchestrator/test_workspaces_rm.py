"""``revtree rm`` on a run whose killed session left its ``[sandbox] workspaces``
folder (in a tmpfs, say): the folder goes with the run, not only its record."""

from __future__ import annotations

from pathlib import Path

from revtree.memory import Store
from revtree.orchestrator import create_run
from revtree.orchestrator.run import RunPaths
from revtree.sandboxes.local import LocalSandbox
from revtree.tasks import load_task
from tests.orchestrator.conftest import make_task, revtree_here


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
