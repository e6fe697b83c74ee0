"""Issue 26 item 6, the terminal at 80 columns: the real ``revtree`` command in a real
terminal 80 columns wide (a pty with that window size, as a person's terminal is) against
a real local run of examples/tsp-anneal. The live log wraps only there: piped or captured,
each event stays one whole line (for ``| grep`` and for tests that look for one)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.orchestrator.conftest import cli_env, drain_pty, revtree, revtree_here

EXAMPLE = Path(__file__).parents[2] / "examples" / "tsp-anneal"
LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d +\d+ \w+ +")  # time, seq, kind: the message after
HANG = " " * 24  # the width of that prefix: continuation lines start under the message
ESCAPE = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|\][^\x07]*\x07|[()][A-Z0-9])")


class Shown:
    """What a command showed in a terminal: its exit code and the lines as they stood
    on the screen (colours and cursor moves taken out, a line redrawn after ``\\r``
    kept as last drawn)."""

    def __init__(self, returncode: int, raw: str) -> None:
        self.returncode = returncode
        text = ESCAPE.sub("", raw).replace("\r\n", "\n")
        self.lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]
        self.stdout = "\n".join(self.lines)


def in_terminal(home: Path, *args: str, columns: int = 80, timeout: float = 300) -> Shown:
    """``revtree ARGS`` with stdout, stderr and stdin on a pty of ``columns`` x 50."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = cli_env(home, COLUMNS=str(columns), TERM="xterm-256color")
    for name in ("NO_COLOR", "FORCE_COLOR"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "revtree", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    data = drain_pty(leader, timeout)
    if proc.poll() is None:
        proc.kill()
    return Shown(proc.wait(30), data.decode("utf-8", "replace"))


def narrow(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``revtree ARGS`` captured (not a terminal) at COLUMNS=80, in a subprocess."""
    return revtree(home, *args, check=False, COLUMNS="80")


def narrow_here(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The same in this process (revtree_here), for output whose width is not under test
    (JSON, a diff, one short line)."""
    return revtree_here(home, *args, check=False, COLUMNS="80")


@pytest.fixture(scope="module")
def tsp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Shown]:
    home = tmp_path_factory.mktemp("home")
    task = tmp_path_factory.mktemp("task") / "tsp"
    shutil.copytree(EXAMPLE, task)
    shown = in_terminal(home, "run", str(task), "--sandbox", "local", "--budget-nodes", "6")
    assert shown.returncode == 0, shown.stdout
    return home, shown


@pytest.mark.slow  # a whole run (about 10 s)
def test_the_live_log_wraps_at_words_with_a_hanging_indent(tsp: tuple[Path, Shown]) -> None:
    _, shown = tsp
    lines = shown.lines
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
    text = shown.stdout
    assert "FINAL_TEMP" in text and "FINAL_\n" not in text  # never a word cut in two


@pytest.mark.slow
def test_the_live_log_piped_keeps_each_event_on_one_line(tsp: tuple[Path, Shown]) -> None:
    """``watch`` (the same lines as the run's) captured at 80 columns: no wrapping."""
    home, _ = tsp
    proc = narrow(home, "watch", "last")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert sum(bool(LOG_LINE.match(line)) for line in lines) > 20
    assert max(len(line) for line in lines) > 80  # whole lines, wider than the terminal
    assert not any(line.startswith(HANG) for line in lines)


@pytest.mark.slow
def test_show_nodes_cuts_hypotheses_at_words(tsp: tuple[Path, Shown]) -> None:
    home, _ = tsp
    proc = in_terminal(home, "show", "last", "--nodes")
    assert proc.returncode == 0, proc.stdout
    assert all(len(line) <= 80 for line in proc.lines)
    words = set()
    for n in range(6):
        shown = narrow_here(home, "show", "last", "--node", str(n), "--json").stdout
        words |= set(re.findall(r'"hypothesis": "([^"]*)"', shown)[0].split())
    table = proc.stdout[proc.stdout.index("hypothesis / error") :]
    for cell in re.findall(r"\d{10}  (.*)$", table, re.M):  # the text after the commit
        for word in cell.split():
            assert word.rstrip("…,") in {w.rstrip(",") for w in words}, word
    shown = in_terminal(home, "show", "last")
    assert "improvement (relative)" in shown.stdout
    assert all(len(line) <= 80 for line in shown.lines)


@pytest.mark.slow
def test_knob_values_are_written_short(tsp: tuple[Path, Shown], tmp_path: Path) -> None:
    home, _ = tsp
    for n in range(1, 6):
        diff = narrow_here(home, "diff", "last", str(n)).stdout
        added = [x for x in diff.splitlines() if x.startswith("+") and " = " in x]
        assert added, diff
        for line in added:  # 0.4697, not 0.4697358999576485
            for number in re.findall(r"= (\d+\.\d+)", line):
                assert len(number.replace(".", "").lstrip("0")) <= 6, line


@pytest.mark.slow
def test_stop_of_a_run_that_is_not_running_exits_1(tsp: tuple[Path, Shown]) -> None:
    home, _ = tsp
    proc = narrow_here(home, "stop", "last")
    assert proc.returncode == 1
    assert proc.stdout.strip().endswith("is not running (completed)")


@pytest.mark.slow  # the help of nine commands on a pty, 6 s (issue 24)
def test_run_help_is_written_for_80_columns(tmp_path: Path) -> None:
    proc = in_terminal(tmp_path, "run", "--help", timeout=60)
    assert proc.returncode == 0, proc.stdout
    lines = proc.lines
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


@pytest.mark.slow  # a run, then show: 3 s or more on 2 loaded cores
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


def test_transcripts_at_80_columns_keep_the_prompts_lines_whole() -> None:
    """A transcript shows each line of what was sent as it was sent: the prompt
    templates' prose is written for 80 columns, so the terminal does not wrap it a second
    time (a line of 81-98 columns became a line and a one-word fragment). Format lines
    (``KIND: …``, a reply's exact form) may run longer and do not count."""
    from rich.console import Console

    from revtree.agents.roles import PROMPTS
    from revtree.orchestrator.commands.report import transcript_renderables

    for template in sorted(PROMPTS.glob("*.md")):
        system, _, user = template.read_text().partition("=== USER ===\n")
        call = {
            **dict(node=1, attempt=1, role=template.stem, call=1, model="m", ok=True),
            **dict(input_tokens=1, output_tokens=1, latency=0.1, prefix=None, error=None),
            **dict(system=system, user=user, response="VERDICT: accept"),
        }
        console = Console(width=80, record=True, color_system=None)
        for part in transcript_renderables({"prefixes": {}, "calls": [call]}):
            console.print(part)  # as `show --transcript` prints them
        shown = set(console.export_text().splitlines())
        prose = [
            line
            for line in (system + user).splitlines()
            if line.strip() and not re.match(r"^[A-Z_]+:", line) and "$" not in line
        ]
        broken = [line for line in prose if line.rstrip() not in shown]
        assert not broken, (template.name, broken)
