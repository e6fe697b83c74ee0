"""``[sandbox] workspaces``: the local backend unpacks each evaluation's workspace in a
folder of its own inside the named one (a tmpfs, say), made at the first workspace and
removed at ``close``; a later session's ``reap`` removes what a killed one left there,
following no link; a folder gone or replaced meanwhile stops the run (an infrastructure
failure) rather than take a workspace; no /dev/shm janitor, of any process, sweeps it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from revtree.errors import InfrastructureError, SandboxError
from revtree.sandboxes import ExecRequest, Limits, make_sandbox
from revtree.sandboxes.base import archive_of
from revtree.sandboxes.local import LocalSandbox
from revtree.sandboxes.shm import ShmJanitor
from revtree.sandboxes.workspace import ELSEWHERE
from revtree.tasks.sandbox import LocalConfig

WHERE = ExecRequest(
    archive_of({"w.py": b"import os\nprint(os.getcwd())\n"}), "python w.py", Limits(60)
)


def cwd(box: LocalSandbox) -> Path:
    result = box.execute(WHERE)
    assert result.exit_code == 0, result.stderr
    return Path(result.stdout.strip())


def test_the_workspaces_go_to_the_named_folder_and_go_with_the_sandbox(tmp_path):
    fast = tmp_path / "fast"
    fast.mkdir()
    box = LocalSandbox(tmp_path / "run", workspaces=fast)
    try:
        assert list(fast.iterdir()) == []  # none made before a workspace is
        seen = [cwd(box) for _ in range(2)]
    finally:
        box.close()
    assert box.spaces is not None and box.spaces.path is not None
    assert box.spaces.path.parent == fast
    for where in seen:  # <fast>/revtree-ws-*/revtree-*/ws
        assert where.parent.parent == box.spaces.path and where.name == "ws", where
    assert list(fast.iterdir()) == []  # its folder and every workspace removed
    assert (tmp_path / "run" / ELSEWHERE).read_text() == f"{box.spaces.path}\n"


def test_a_killed_sessions_workspaces_are_reaped_by_the_next_session(tmp_path):
    fast, run = tmp_path / "fast", tmp_path / "run"
    fast.mkdir()
    killed = LocalSandbox(run, workspaces=fast)  # never closed: as a killed session's
    assert killed.spaces is not None
    left = killed.spaces.folder() / "revtree-abcd1234"
    (left / "ws").mkdir(parents=True)
    (left / "pgid").write_text("1")  # never killed: pid 1, and not working there
    now = LocalSandbox(run, workspaces=fast)
    try:
        assert now.spaces is not None
        mine = now.spaces.folder()
        assert now.reap() == 1
        assert not left.exists() and mine.is_dir()  # its own stays
        assert (run / ELSEWHERE).read_text() == f"{mine}\n"  # the record names it alone
    finally:
        now.close()
    assert list(fast.iterdir()) == []


def test_reap_follows_no_link_nor_a_folder_it_did_not_make(tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    precious = elsewhere / "revtree-ws-bait" / "revtree-data"
    precious.mkdir(parents=True)
    other = tmp_path / "not-ours"
    (other / "revtree-data").mkdir(parents=True)
    link = tmp_path / "revtree-ws-link"
    link.symlink_to(elsewhere / "revtree-ws-bait")
    run.mkdir()
    (run / ELSEWHERE).write_text(f"{link}\n{other}\n/nonexistent/revtree-ws-x\n")
    box = LocalSandbox(run)
    try:
        assert box.reap() == 0
    finally:
        box.close()
    assert precious.is_dir() and (other / "revtree-data").is_dir()
    assert (run / ELSEWHERE).read_text() == ""  # the record names none now


def test_a_relative_path_or_a_missing_folder_is_refused(tmp_path):
    with pytest.raises(ValidationError, match="absolute path"):
        LocalConfig(workspaces="shm")
    with pytest.raises(SandboxError, match="is no folder"):
        LocalSandbox(tmp_path / "run", workspaces=tmp_path / "missing")


def test_a_task_files_workspaces_reach_the_local_backend(tmp_path):
    from revtree.tasks import load_task
    from tests.orchestrator.conftest import make_task

    fast = tmp_path / "fast"
    fast.mkdir()
    task = make_task(tmp_path / "t")
    toml = (task / "task.toml").read_text()
    mine = toml.replace("[sandbox]\n", f'[sandbox]\nbackend = "local"\nworkspaces = "{fast}"\n')
    (task / "task.toml").write_text(mine)
    box = make_sandbox("local", config=load_task(task).sandbox, base_dir=tmp_path / "b")
    try:
        assert cwd(box).parent.parent.parent == fast
    finally:
        box.close()


def test_no_shm_janitor_sweeps_a_sandboxs_folder_made_during_its_window(tmp_path):
    """Another revtree process's janitor (its evaluations ran as this folder was made)
    leaves it, though it sweeps a stray folder and a link named like one."""
    fast = tmp_path / "shm"
    fast.mkdir()
    janitor = ShmJanitor(fast)
    box = LocalSandbox(tmp_path / "run", workspaces=fast)
    try:
        with janitor.window():  # the other process's evaluation runs meanwhile
            where = cwd(box)
            (fast / "stray").mkdir()
            (fast / "revtree-ws-link").symlink_to(tmp_path)
        assert where.parent.parent.is_dir()
        assert sorted(janitor.removed) == ["revtree-ws-link", "stray"]
        cwd(box)  # goes on in it
    finally:
        box.close()


def test_a_folder_gone_or_replaced_stops_the_run_instead_of_taking_a_workspace(tmp_path):
    """A logout's IPC cleanup removes it; someone makes one of the same name: no
    workspace is made in it (an infrastructure failure: the run stops, resumable)."""
    import shutil

    fast = tmp_path / "fast"
    fast.mkdir()
    box = LocalSandbox(tmp_path / "run", workspaces=fast)
    try:
        assert box.spaces is not None
        cwd(box)
        mine = box.spaces.folder()
        box.drain()  # (the workspace's removal, in the background, done first)
        shutil.rmtree(mine)
        with pytest.raises(InfrastructureError, match="gone or is no longer"):
            box.execute(WHERE)
        mine.mkdir(mode=0o777)  # the name taken again, by someone else's hand
        with pytest.raises(InfrastructureError, match="gone or is no longer"):
            box.execute(WHERE)
        assert list(mine.iterdir()) == []
    finally:
        box.close()
    assert mine.is_dir()  # not ours: close leaves it
