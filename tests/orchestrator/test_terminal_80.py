"""Issue 26 item 6, the terminal at 80 columns: the real ``revtree`` command in
subprocesses with ``COLUMNS=80`` against a real local run of examples/tsp-anneal."""

from __future__ import annotations

import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.orchestrator.conftest import cli_env, revtree

EXAMPLE = Path(__file__).parents[2] / "examples" / "tsp-anneal"
LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d +\d+ \w+ +")  # time, seq, kind: the message after
HANG = " " * 24  # the width of that prefix: continuation lines start under the message


def narrow(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return revtree(home, *args, check=False, COLUMNS="80")


@pytest.fixture(scope="module")
def tsp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    home = tmp_path_factory.mktemp("home")
    task = tmp_path_factory.mktemp("task") / "tsp"
    shutil.copytree(EXAMPLE, task)
    proc = narrow(home, "run", str(task), "--sandbox", "local", "--budget-nodes", "6")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return home, proc


@pytest.mark.slow  # a whole run (about 10 s)
def test_the_live_log_wraps_at_words_with_a_hanging_indent(
    tsp: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, proc = tsp
    lines = proc.stdout.splitlines()
    log = [i for i, line in enumerate(lines) if LOG_LINE.match(line)]
    assert len(log) > 20
    wrapped = 0
    for i in log:
        j = i + 1
        while j < len(lines) and lines[j].startswith(HANG) and lines[j].strip():
            wrapped += 1
            assert len(lines[j]) <= 80 or " " not in lines[j].strip(), lines[j]
            j += 1
        # a line is as wide as the terminal at most, unless one word alone is wider
        assert len(lines[i]) <= 80, lines[i]
    assert wrapped > 5  # the proposals' knob lists and the local sandbox's warning
    text = proc.stdout
    assert "FINAL_TEMP" in text and "FINAL_\n" not in text  # never a word cut in two


@pytest.mark.slow
def test_show_nodes_cuts_hypotheses_at_words(
    tsp: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    home, _ = tsp
    proc = narrow(home, "show", "last", "--nodes")
    assert proc.returncode == 0, proc.stderr
    assert all(len(line) <= 80 for line in proc.stdout.splitlines())
    words = set()
    for n in range(6):
        shown = narrow(home, "show", "last", "--node", str(n), "--json").stdout
        words |= set(re.findall(r'"hypothesis": "([^"]*)"', shown)[0].split())
    table = proc.stdout[proc.stdout.index("hypothesis / error") :]
    for cell in re.findall(r"\d{10}  (.*)$", table, re.M):  # the text after the commit
        for word in cell.split():
            assert word.rstrip("…,") in {w.rstrip(",") for w in words}, word
    assert "improvement (relative)" in narrow(home, "show", "last").stdout


@pytest.mark.slow
def test_knob_values_are_written_short(
    tsp: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    home, _ = tsp
    for n in range(1, 6):
        diff = narrow(home, "diff", "last", str(n)).stdout
        added = [x for x in diff.splitlines() if x.startswith("+") and " = " in x]
        assert added, diff
        for line in added:  # 0.4697, not 0.4697358999576485
            for number in re.findall(r"= (\d+\.\d+)", line):
                assert len(number.replace(".", "").lstrip("0")) <= 6, line


@pytest.mark.slow
def test_stop_of_a_run_that_is_not_running_exits_1(
    tsp: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    home, _ = tsp
    proc = narrow(home, "stop", "last")
    assert proc.returncode == 1
    assert proc.stdout.strip().endswith("is not running (completed)")


def test_run_help_is_written_for_80_columns(tmp_path: Path) -> None:
    proc = narrow(tmp_path, "run", "--help")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "…" not in proc.stdout and "openai-compatible:NAME" in proc.stdout
    assert "[runner] cpus" in " ".join(proc.stdout.split())  # markup is not read in help
    # descriptions get more than a 20-column box: some line holds 40 characters of one
    assert max(len(line) - len(line.lstrip()) for line in lines if "--" not in line) <= 32
    for cmd in ("run", "resume", "demo", "init", "check", "pilot", "fork", "retry", "watch"):
        for line in narrow(tmp_path, cmd, "--help").stdout.splitlines():
            assert len(line) <= 80 and not re.search(r"[a-z]-$", line), (cmd, line)
    for cmd in ("show", "ls", "compare"):
        help_text = narrow(tmp_path, cmd, "--help").stdout
        assert "--json" in help_text and "Print JSON" in help_text


def test_a_summary_without_a_scored_node_says_so(tmp_path: Path) -> None:
    task = tmp_path / "tsp"
    shutil.copytree(EXAMPLE, task)
    (task / "run.py").write_text("raise SystemExit('broken on purpose')\n")
    proc = narrow(tmp_path, "run", str(task), "--sandbox", "local", "--budget-nodes", "3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "at node None" not in proc.stdout
    assert "no node scored" in proc.stdout


@pytest.mark.parametrize("answer", ["min", "minimize", "MIN"])
def test_init_accepts_min_in_a_terminal(tmp_path: Path, answer: str) -> None:
    program = tmp_path / "prog.py"
    program.write_text("RATE = 0.5\n\ndef solve():\n    return RATE\n")
    main, child = pty.openpty()
    args = ["init", str(tmp_path / "task"), "--program", str(program), "--metric", "loss"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "revtree", *args],
        stdin=child,
        stdout=child,
        stderr=child,
        env=cli_env(tmp_path, COLUMNS="80"),
    )
    os.close(child)
    # the evaluator question, then the direction
    os.write(main, f"\n{answer}\n".encode())
    out, deadline = b"", time.monotonic() + 20
    while time.monotonic() < deadline:
        if not select.select([main], [], [], 1)[0]:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(main, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    if proc.poll() is None:  # still asking: "min" was not taken
        proc.kill()
    os.close(main)
    assert proc.wait(timeout=10) == 0, out.decode()
    assert 'direction = "minimize"' in (tmp_path / "task" / "task.toml").read_text()
    assert (tmp_path / "task" / ".gitignore").read_text().endswith("\n")
