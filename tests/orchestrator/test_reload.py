"""A fixed task resumes: `revtree resume RUN --reload` reads task.toml and the protected
files again. Each test drives the CLI's commands in-process (``drive_here``: the
process proves nothing here): a baseline fails (an evaluator bug, a misspelt metric),
the failure prints the command that continues it, the fix is made in the task folder,
and that command completes the run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from revtree.memory import Store
from tests.orchestrator.conftest import EVALUATOR, drive_here, make_task, revtree_here

pytestmark = pytest.mark.slow


def _failed_with_hint(home: Path, task: Path) -> tuple[str, str]:
    """Run ``task``; it must fail at its baseline and print a resume command: the run
    id and that command."""
    proc = drive_here(home, "run", str(task), "--sandbox", "local", check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    found = re.search(r"`(revtree resume (\S+) --reload)`", out)
    assert found, out
    return found.group(2), found.group(1)


def _show(home: Path, run_id: str) -> dict:
    return json.loads(revtree_here(home, "show", run_id, "--json").stdout)


def test_an_evaluator_bug_fixed_then_the_printed_command_completes_the_run(
    tmp_path: Path, home: Path
) -> None:
    task = make_task(tmp_path / "task", budget=3)
    ev = task / "ev.py"
    ev.write_text(EVALUATOR.replace("import sol\n", "import sol\nvalue = sol.Y\n"))
    run_id, command = _failed_with_hint(home, task)
    ev.write_text(EVALUATOR)  # the fix, in the task folder

    plain = drive_here(home, "resume", run_id, check=False)  # the stored copy: fails again
    assert plain.returncode == 1, plain.stdout + plain.stderr
    assert "sol.Y" in plain.stdout + plain.stderr or "AttributeError" in plain.stdout

    done = drive_here(home, *command.split()[1:])
    assert "task reloaded from" in done.stdout and "ev.py" in done.stdout
    assert "-value = sol.Y" in done.stdout  # the diff of the protected file
    shown = _show(home, run_id)
    assert shown["status"] == "completed", shown
    assert shown["baseline_score"] is not None and shown["n_nodes"] == 3, shown
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    try:  # the earlier evaluations stay recorded; the baseline's last attempt scores
        base = [e for e in store.evaluations(run_id) if e.node_id == 0]
        oks: dict[int, list[bool]] = {}
        for e in base:
            oks.setdefault(e.attempt, []).append(e.ok)
        assert oks[1] == [False] and oks[2] == [False] and all(oks[3]) and len(oks) == 3
        kinds = [ev.data for ev in store.events_since(run_id, 0, 10_000) if ev.kind == "run"]
        assert any(d and d.get("files", {}).get("ev.py") for d in kinds)
    finally:
        store.close()


def test_a_misspelt_metric_fixed_in_task_toml(tmp_path: Path, home: Path) -> None:
    task = make_task(tmp_path / "task", budget=2)
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('metric = "f"', 'metric = "ff"'))
    run_id, command = _failed_with_hint(home, task)
    toml.write_text(toml.read_text().replace('metric = "ff"', 'metric = "f"'))
    done = drive_here(home, *command.split()[1:])
    assert 'evaluate.metric: "ff" -> "f"' in done.stdout, done.stdout
    shown = _show(home, run_id)
    assert shown["status"] == "completed" and shown["best_score"] is not None, shown


def test_a_changed_direction_is_refused_once_scored_naming_fork(tmp_path: Path, home: Path) -> None:
    task = make_task(tmp_path / "task", budget=2)
    drive_here(home, "run", str(task), "--sandbox", "local")
    run_id = json.loads(revtree_here(home, "ls", "--json").stdout)[0]["run_id"]
    toml = task / "task.toml"
    toml.write_text(toml.read_text().replace('"minimize"', '"maximize"'))
    proc = drive_here(home, "resume", run_id, "--reload", check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"revtree fork {run_id}" in proc.stderr and "would not compare" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    try:
        run = store.get_run(run_id)
        assert run.direction == "minimize" and run.spec["evaluate"]["direction"] == "minimize"
    finally:
        store.close()
