"""``[sandbox] workspaces``: the local backend unpacks each evaluation's workspace in a
folder of its own inside the named one (a tmpfs, say), removes it at ``close``, and a
later session's ``reap`` removes what a killed one left there, following no link; the
/dev/shm janitor leaves that folder alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from revtree.errors import SandboxError
from revtree.sandboxes import ExecRequest, Limits, make_sandbox
from revtree.sandboxes.base import archive_of
from revtree.sandboxes.local import ELSEWHERE, LocalSandbox
from revtree.sandboxes.shm import ShmJanitor
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
        seen = [cwd(box) for _ in range(2)]
    finally:
        box.close()
    assert box.spaces is not None and box.spaces.parent == fast
    for where in seen:  # <fast>/revtree-ws-*/revtree-*/ws
        assert where.parent.parent == box.spaces and where.name == "ws", where
    assert list(fast.iterdir()) == []  # its folder and every workspace removed
    assert (tmp_path / "run" / ELSEWHERE).read_text() == f"{box.spaces}\n"


def test_a_killed_sessions_workspaces_are_reaped_by_the_next_session(tmp_path):
    fast, run = tmp_path / "fast", tmp_path / "run"
    fast.mkdir()
    killed = LocalSandbox(run, workspaces=fast)  # never closed: as a killed session's
    assert killed.spaces is not None
    left = killed.spaces / "revtree-abcd1234"
    (left / "ws").mkdir(parents=True)
    (left / "pgid").write_text("1")  # never killed: pid 1, and not working there
    now = LocalSandbox(run, workspaces=fast)
    try:
        assert now.reap() == 1
        assert not killed.spaces.exists()
        assert now.spaces is not None and now.spaces.is_dir()  # its own stays
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


def test_the_shm_janitor_leaves_a_sandboxs_own_folder_made_during_a_window(tmp_path):
    janitor = ShmJanitor(tmp_path)
    kept, stray = tmp_path / "revtree-ws-mine", tmp_path / "stray"
    with janitor.window():  # another sandbox's evaluation runs meanwhile
        kept.mkdir()
        janitor.keep(kept)
        stray.mkdir()
    assert kept.is_dir() and not stray.exists()
    janitor.keep(kept, kept=False)
    with janitor.window():
        pass
    assert kept.is_dir()  # (there before the window: never new to it)
