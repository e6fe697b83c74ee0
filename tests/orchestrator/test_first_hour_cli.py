"""Issue #14, the first hour of a new user: the real ``revtree`` command in subprocesses,
at 80 columns, piped, killed, and (where tmux is installed) in a real terminal."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from importlib.metadata import version
from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer
from revtree.memory import RunStatus, Store
from revtree.orchestrator import create_run
from revtree.tasks import load_task
from tests.orchestrator.conftest import cli_env, make_task, revtree, revtree_here, spawn, wait_for

RAW_FLOAT = re.compile(r"\d\.\d{10,}|\d{10,}\.\d")  # a float printed with all its digits
LOCAL = ("--sandbox", "local")


def narrow(home: Path, *args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """``revtree ARGS`` with the terminal width a new user has."""
    return revtree(home, *args, check=False, COLUMNS=str(columns))


def named(task: Path, name: str) -> Path:
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('name = "quad"', f'name = "{name}"', 1))
    return task


def needs_a_server(task: Path) -> Path:
    """The task asks for a model on an OpenAI-compatible server and names none."""
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + '\n[agents]\nmode = "llm"\nmodel = "openai-compatible:x"\n')
    return task


@pytest.mark.slow  # 14 s of --quick under -n 2 (issue 24)
def test_a_model_that_cannot_be_called_is_refused_before_a_run_is_created(
    tmp_path: Path, home: Path
) -> None:
    task = make_task(tmp_path / "task", budget=3)
    out = revtree(home, "run", str(task), "--model", "openai-compatible:x", check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "needs a base_url" in out.stderr
    assert json.loads(revtree(home, "ls", "--json").stdout) == []  # nothing left running


@pytest.mark.slow  # 18 s of --quick under -n 2 (issue 24)
def test_a_run_that_fails_at_start_is_failed_and_resume_takes_a_base_url(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = needs_a_server(make_task(tmp_path / "task", budget=1))
    spec = load_task(task).with_overrides(sandbox={"backend": "local"})
    run_id = create_run(store, spec, home).id  # as if made before the check existed

    out = revtree(home, "resume", run_id, check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "needs a base_url" in out.stderr and "--base-url" in out.stderr
    failed = store.get_run(run_id)
    assert failed.status is RunStatus.FAILED, failed  # not `running` forever
    assert failed.reason and "needs a base_url" in failed.reason

    with FakeLLMServer(lambda req: "ok") as srv:  # the budget is the baseline alone:
        url = srv.openai_url
        out = revtree(home, "resume", run_id, "--base-url", url, check=False)
    assert [r.user for r in srv.requests] == ["ping"]  # only the check before the resume
    assert out.returncode == 0, out.stdout + out.stderr
    done = store.get_run(run_id)
    assert done.status is RunStatus.COMPLETED, done
    assert done.spec["agents"]["base_url"] == url
    assert done.spec["agents"]["model"] == "openai-compatible:x"

    again = revtree(home, "resume", run_id, "--model", "nonsense:y", check=False)
    assert again.returncode == 2 and "unknown model provider" in again.stderr
    assert store.get_run(run_id).spec["agents"]["model"] == "openai-compatible:x"


@pytest.mark.slow  # 13 s of --quick under -n 2 (issue 24)
def test_watch_ends_when_the_process_of_the_run_is_killed(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "task", sleep=2, budget=50)
    runner = spawn(home, "run", str(task), *LOCAL, "--quiet")
    watcher = None
    try:
        run = wait_for(
            lambda: next((r for r in store.list_runs() if r.pid), None), 120, "the run's claim"
        )
        watcher = subprocess.Popen(
            [sys.executable, "-m", "revtree", "watch", run.id],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(home),
        )
        assert watcher.stdout is not None
        watcher.stdout.readline()  # it follows the run (its start-up is behind it)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(30)
        killed = time.monotonic()
        try:
            _, errs = watcher.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("watch still follows a run whose process was killed")
        took = time.monotonic() - killed
    finally:
        for proc in (runner, watcher):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert watcher.returncode != 0
    assert took < 5, f"watch took {took:.1f}s to notice"
    assert f"run {run.id}: its process {run.pid} is gone (killed?)" in " ".join(errs.split())
    assert f"`revtree resume {run.id}` continues it" in " ".join(errs.split())
    time.sleep(2.5)  # the killed run's last evaluation ends on its own


@pytest.mark.slow  # 10 s of --quick under -n 2 (issue 24)
def test_ls_at_80_columns_shows_whole_ids_and_an_ambiguous_prefix_lists_them(
    tmp_path: Path, home: Path, store: Store
) -> None:
    spec = load_task(named(make_task(tmp_path / "task"), "tsp-anneal-long-name"))
    ids = [create_run(store, spec, home).id for _ in range(3)]
    for i in ids:
        store.update_run(i, status=RunStatus.COMPLETED, reason="done")

    out = narrow(home, "ls")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, out.stdout
    assert "…" not in out.stdout
    for i in ids:
        assert any(i in line for line in lines), f"{i} not whole in:\n{out.stdout}"

    amb = narrow(home, "show", "tsp")
    assert amb.returncode == 2
    said = "".join(amb.stderr.split())  # rich wraps the message at 80 columns
    assert "isambiguous" in said
    assert all(i in said for i in ids), amb.stderr


@pytest.mark.slow  # 8 s of --quick under -n 2 (issue 24)
def test_piping_the_live_log_into_head_does_not_fail_the_run(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "task", budget=8)
    cmd = f"{sys.executable} -m revtree run {task} --sandbox local | head -5"
    out = subprocess.run(
        ["sh", "-c", cmd], capture_output=True, text=True, env=cli_env(home), timeout=300
    )
    assert len(out.stdout.splitlines()) == 5, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    (run,) = store.list_runs()
    assert run.status in (RunStatus.COMPLETED, RunStatus.STOPPED), (run.status, run.reason)
    assert len(store.nodes(run.id)) == 8


@pytest.mark.slow  # 21 s of --quick under -n 2 (issue 24)
def test_show_prints_numbers_times_and_dicts_for_people_and_json_stays_exact(
    tmp_path: Path, home: Path, store: Store
) -> None:
    task = make_task(tmp_path / "task", budget=4)
    started = revtree(home, "run", str(task), *LOCAL).stdout
    assert "to resume" not in started  # a fresh run has nothing to resume
    run = store.list_runs()[0]

    shown = narrow(home, "show", "last").stdout
    assert not RAW_FLOAT.search(shown), shown
    assert "{'" not in shown and "[{" not in shown, shown
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.created_at))
    assert stamp in shown
    assert re.search(r"delta: [-\d.e+]+", shown), shown  # the gain, a dict: one key a line

    node = narrow(home, "show", "last", "--node", "1").stdout
    assert not RAW_FLOAT.search(node) and "{'" not in node, node

    data = json.loads(revtree(home, "show", "last", "--json").stdout)
    assert data["created_at"] == run.created_at  # raw, full precision
    assert isinstance(data["gain"], dict) and isinstance(data["llm"], dict)
    best = store.node(run.id, data["best_node"]).score
    assert data["best_score"] == best


def test_version_prints_the_package_version(home: Path) -> None:
    out = revtree_here(home, "--version")  # in a fresh interpreter: test_light_imports
    assert out.stdout.strip() == f"revtree {version('revtree')}"


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.slow  # 15 s of --quick under -n 2 (issue 24)
def test_a_run_in_an_80_column_terminal_shows_whole_ids_and_no_raw_values(
    tmp_path: Path, home: Path, store: Store
) -> None:
    """In a real terminal (tmux, 80 columns): the live log, its progress bar and the
    summary, then ``ls`` and ``show``."""
    task = named(make_task(tmp_path / "task", budget=6), "tsp-anneal")
    socket = f"revtree-test-{uuid.uuid4().hex[:8]}"  # our own tmux server
    env = {k: v for k, v in cli_env(home).items() if k not in ("COLUMNS", "LINES", "TMUX")}
    rt = f"{sys.executable} -m revtree"
    script = f"{rt} run {task} --sandbox local; {rt} ls; {rt} show last; echo ALL-DONE; sleep 600"
    tmux = ["tmux", "-L", socket, "-f", os.devnull]
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", "80", "-y", "50", script], env=env, check=True
    )
    try:

        def finished_pane() -> str:
            shown = subprocess.run(
                [*tmux, "capture-pane", "-p", "-J", "-S", "-"],
                capture_output=True,
                text=True,
                env=env,
            ).stdout
            return shown if "ALL-DONE" in shown else ""

        text = str(wait_for(finished_pane, 240, "the commands in the pane"))
    finally:
        subprocess.run([*tmux, "kill-server"], env=env)
    (run,) = store.list_runs()
    assert run.status is RunStatus.COMPLETED
    assert "…" not in text, text
    assert "{'" not in text, text
    assert not RAW_FLOAT.search(text), text
    lines = text.splitlines()
    progress = [line for line in lines if "nodes" in line and "━" in line]
    assert progress and all(line.startswith(run.id) for line in progress), text
    in_ls = [line for line in lines if line.startswith(run.id) and "completed" in line]
    assert in_ls, text  # the row of `ls`, its id whole
