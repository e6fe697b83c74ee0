"""Terminal escapes in what a candidate writes (issue 23, item 6): a candidate's stderr,
error and metrics reach ``run``'s live log, ``watch``, ``show``, ``show --node``,
``show --nodes``, ``ls`` and ``compare`` as visible escapes (``\\x1b[2J``), never as raw
control characters, and rich markup in them (``[red]``, ``[link=...]``) shows as written.
Through the real CLI in subprocesses, without a terminal and in a pty with colour."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.orchestrator.conftest import cli_env, drain_pty, make_task, revtree

# Clear the screen, home the cursor, an OSC 8 hyperlink, an OSC 52 clipboard write, a bell,
# a carriage return that would overwrite the line with a fake "best", a cursor move up,
# an 8-bit CSI, a right-to-left override, and rich markup (colour and a link).
# (The fake line comes first: the error message keeps the last of the lines that Python's
# splitlines() sees, and \r ends one.)
PAYLOAD = (
    "\x1b[1A\x1b[2K\rbest 0 at node 99 +100% better "
    "\x1b[2J\x1b[H\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07 "
    "\x1b]52;c;cHduZWQ=\x07\x07 [red]red[/red] [link=http://evil.example]L[/link] "
    "\x9b31m \u202e end"
)

EVALUATOR = textwrap.dedent(f"""\
    import json, os, sys
    import sol
    P = {PAYLOAD!r}
    if sol.X != 3.0 or sol.N != 2:  # every candidate: a crash whose last line is hostile
        sys.stderr.write("first line\\n" + P + "\\n")
        raise SystemExit(3)
    os.write(3, json.dumps({{"f": (sol.X - 1.2) ** 2, "note " + P: P}}).encode())
    """)


def raw_controls(text: str) -> list[str]:
    """The control characters in ``text`` other than newline."""
    return sorted({repr(c) for c in re.findall(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]", text)})


@pytest.mark.slow
def test_candidate_escapes_show_as_text(tmp_path: Path, home: Path) -> None:
    """Without a terminal (no colour), then in a pty with colour forced: our own styling
    writes SGR sequences (ESC [ ... m) and nothing else reaches the terminal raw: no clear
    screen, hyperlink, clipboard, bell, carriage return or cursor move."""
    task = make_task(tmp_path / "task", budget=3)
    (task / "ev.py").write_text(EVALUATOR)
    run = revtree(home, "run", str(task), "--db", f"sqlite:///{home / 'revtree.db'}")
    run_id = re.search(r"run (\S+) ·", run.stdout).group(1)  # type: ignore[union-attr]
    outputs = {"run": run.stdout + run.stderr}
    for name, args in {
        "watch": ["watch", run_id],
        "show": ["show", run_id],
        "show --nodes": ["show", run_id, "--nodes"],
        "show --node 0": ["show", run_id, "--node", "0"],
        "show --node 1": ["show", run_id, "--node", "1"],
        "ls": ["ls"],
        "compare": ["compare", run_id, run_id],
    }.items():
        p = revtree(home, *args)
        outputs[name] = p.stdout + p.stderr
    for name, out in outputs.items():
        assert raw_controls(out) == [], (name, out)
    # the payload did reach them, as visible escapes, its markup as written
    for name in ("run", "watch", "show --node 1"):
        assert "\\x1b[2J" in outputs[name], (name, outputs[name])
        assert "[red]red[/red]" in outputs[name], (name, outputs[name])
    # cut at a space within 70 characters there, before the word that holds the escapes
    assert "best 0 at node 99 +100% better…" in outputs["show --nodes"]

    for args in (["watch", run_id], ["show", run_id, "--node", "1"], ["show", run_id, "--nodes"]):
        out = _in_pty(home, *args)
        assert ("best 0 at node 99" if "--nodes" in args else "\\x1b[2J") in out, (args, out)
        assert re.search(r"\x1b\[[0-9;]+m", out), (args, out)  # coloured: the pty works
        rest = re.sub(r"\x1b\[[0-9;]*m", "", out)  # without our own colours
        assert raw_controls(rest.replace("\r\n", "\n")) == [], (args, out)


def _in_pty(home: Path, *args: str) -> str:
    leader, follower = pty.openpty()
    env = cli_env(home, FORCE_COLOR="1", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "revtree", *args],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    data = drain_pty(leader, 300)
    if proc.poll() is None:
        proc.kill()
    assert proc.wait(60) == 0
    return data.decode("utf-8", "replace")
