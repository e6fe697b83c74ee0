"""Getting started: `revtree init` (a task that runs at once), `revtree check` (the
preflight: sandbox, baseline, models, estimate), `revtree demo --llm` (the LLM path
against a simulated model) and the fake model server's command line."""

from __future__ import annotations

import json
import os
import pty
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer, FakeRequest
from revtree.errors import TaskSpecError
from revtree.orchestrator.commands.check import preflight
from revtree.orchestrator.commands.scaffold import DemoResponder, entry_point, scaffold
from revtree.tasks import load_task
from tests.orchestrator.conftest import cli_env, make_task, revtree_here

OFFLINE = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": ""}  # no key: offline agents
PROGRAM = "def f():\n    k = 3.0\n    return (k - 1.2) ** 2\n"


def cli(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`revtree ARGS` with no terminal on stdin (so init never asks)."""
    return subprocess.run(
        [sys.executable, "-m", "revtree", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=cli_env(home, **OFFLINE),
        timeout=timeout,
    )


def here(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`revtree ARGS` in this process, as :func:`cli` runs it in a subprocess (no terminal
    on stdin, no model keys): for what a command prints and exits with (issue 24)."""
    return revtree_here(home, *args, check=False, **OFFLINE)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- init --------------------------------------------------------------------------------
@pytest.mark.slow
def test_init_writes_a_task_with_a_grade_step_that_runs_at_once(tmp_path: Path, home: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    task = tmp_path / "task"
    made = cli(
        home, "init", str(task), "--program", str(tmp_path / "prog.py"),
        "--metric", "loss", "--direction", "minimize",
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    assert {p.name for p in task.iterdir()} == {"prog.py", "evaluate.py", "task.toml", ".gitignore"}
    assert "calls f() of prog.py" in made.stdout
    spec = load_task(task)
    assert spec.editable == ("prog.py",) and spec.protected == ("evaluate.py",)
    assert spec.evaluate.grade is not None and spec.evaluate.outputs == ("answers.json",)
    assert (spec.evaluate.metric, spec.evaluate.direction) == ("loss", "minimize")
    assert "answers.json" in (task / ".gitignore").read_text().splitlines()

    run = cli(home, "run", str(task), "--budget-nodes", "4", "--sandbox", "local")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "agents offline code mutations" in run.stdout
    assert "completed (budget: max_nodes=4 reached)" in run.stdout
    assert "3.24" in run.stdout  # the baseline, (3.0 - 1.2) ** 2, computed by the grade step


def test_init_without_a_terminal_names_the_missing_flags_and_never_overwrites(
    tmp_path: Path, home: Path
) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    bare = here(home, "init", str(tmp_path / "t"), "--metric", "loss")
    assert bare.returncode == 2
    assert "--program" in bare.stderr and "--direction" in bare.stderr
    assert "--metric" not in bare.stderr and not (tmp_path / "t").exists()
    scaffold(tmp_path, tmp_path / "prog.py", "loss", "maximize")
    args = ("init", str(tmp_path), "--program", str(tmp_path / "prog.py"), "--metric", "loss")
    again = here(home, *args, "--direction", "minimize")
    assert again.returncode == 2 and "pass --force" in again.stderr
    assert 'direction = "maximize"' in (tmp_path / "task.toml").read_text()
    forced = scaffold(tmp_path, tmp_path / "prog.py", "loss", "minimize", force=True)
    assert forced.spec.evaluate.direction == "minimize"
    assert "prog.py" not in forced.written  # the program was in the folder already
    assert (tmp_path / ".gitignore").read_text().count("answers.json") == 1


def test_init_asks_in_a_terminal_for_what_the_flags_do_not_give(tmp_path: Path, home: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "revtree", "init", str(tmp_path / "t")],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(home, **OFFLINE),
        cwd=tmp_path,
    )
    os.close(slave)
    # the program, no evaluator command (generate one), the metric, a wrong then a right direction
    os.write(master, b"prog.py\n\nloss\nsideways\nmaximize\n")
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        os.close(master)
    assert proc.returncode == 0, out
    assert "Program file to optimise" in out and "Direction (minimize or maximize)" in out
    spec = load_task(tmp_path / "t")
    assert (spec.evaluate.metric, spec.evaluate.direction) == ("loss", "maximize")
    assert spec.evaluate.grade is not None


def test_scaffold_with_an_evaluator_command_protects_the_files_it_names(tmp_path: Path) -> None:
    (tmp_path / "solver.py").write_text("X = 1\n")
    (tmp_path / "score.py").write_text("import os\nos.write(3, b'{\"s\": 1}')\n")
    made = scaffold(tmp_path, tmp_path / "solver.py", "s", "maximize", "python3 score.py --fast")
    assert made.spec.evaluate.command == "python3 score.py --fast"
    assert made.spec.protected == ("score.py",) and made.spec.evaluate.grade is None
    assert not (tmp_path / "evaluate.py").exists() and made.entry is None
    assert "answers.json" not in (tmp_path / ".gitignore").read_text()
    with pytest.raises(TaskSpecError, match="generated evaluator runs Python"):
        (tmp_path / "b").mkdir()
        (tmp_path / "b" / "prog.c").write_text("int main() { return 0; }\n")
        scaffold(tmp_path / "b", tmp_path / "b" / "prog.c", "s", "maximize")


@pytest.mark.parametrize(
    ("source", "entry"),
    [
        ("def helper(x):\n    return x\n\ndef g():\n    return 1\n", "g"),
        ("def g():\n    return 1\n\ndef main(n=3):\n    return n\n", "main"),
        ("def _private():\n    return 1\n\nprint(2.5)\n", None),
    ],
)
def test_the_generated_evaluator_calls_a_function_that_needs_no_argument(
    source: str, entry: str | None
) -> None:
    assert entry_point(source, Path("p.py")) == entry


def test_the_generated_evaluator_scores_a_script_by_its_last_printed_line(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text("print('working')\nprint(2.5)\n")
    spec = scaffold(tmp_path, tmp_path / "prog.py", "value", "maximize").spec
    report = preflight(spec.with_overrides(sandbox={"backend": "local"}), models=False)
    assert report.ok, report.items
    assert report.baseline is not None and report.baseline.score == 2.5


# -- check -------------------------------------------------------------------------------
@pytest.mark.slow  # 5 s of --quick under -n 2 (issue 24)
def test_check_of_a_good_task_shows_the_sandbox_the_baseline_and_an_estimate(
    tmp_path: Path, home: Path
) -> None:
    task = make_task(tmp_path / "t", budget=11, parallel=2)
    out = cli(home, "check", str(task), "--sandbox", "local")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "local (asked for in the task or --sandbox)" in out.stdout
    assert "f = 28.24" in out.stdout  # (3.0 - 1.2)^2 + (2 - 7)^2
    assert "offline run" in out.stdout and "10 candidates x" in out.stdout
    assert "all checks passed" in out.stdout


def test_check_of_a_crashing_evaluator_fails_with_the_stderr_tail(
    tmp_path: Path, home: Path
) -> None:
    task = make_task(tmp_path / "t", modes=("crash",))
    out = here(home, "check", str(task), "--sandbox", "local")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "the baseline cannot be scored" in out.stdout and "exit code 3" in out.stdout
    assert "about to fail" in out.stdout  # the evaluator's stderr
    assert "1 check(s) failed: baseline" in out.stdout


@pytest.mark.slow  # 6 s of --quick under -n 2 (issue 24)
def test_check_calls_each_model_once_naming_its_url(tmp_path: Path, home: Path) -> None:
    task = make_task(tmp_path / "t")
    seen: list[FakeRequest] = []

    def answer(req: FakeRequest) -> str:
        seen.append(req)
        return "ok"

    with FakeLLMServer(answer) as srv:
        out = cli(
            home, "check", str(task), "--sandbox", "local",
            "--model", "openai-compatible:fake-model", "--base-url", srv.openai_url,
        )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(ln for ln in out.stdout.splitlines() if "fake-model at" in ln)
    assert srv.openai_url in line and ": ok in" in line
    assert "proposer, coder, reviewer" in line  # one call for the roles that share it
    assert len(seen) == 1 and seen[0].body["max_tokens"] == 1
    assert "cost unknown (no price for openai-compatible:fake-model" in out.stdout


def test_check_of_an_unreachable_model_names_the_url_and_fails(tmp_path: Path, home: Path) -> None:
    task = make_task(tmp_path / "t")
    url = f"http://127.0.0.1:{closed_port()}/v1"
    out = here(
        home, "check", str(task), "--sandbox", "local",
        "--model", "openai-compatible:nowhere", "--base-url", url,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    line = next(ln for ln in out.stdout.splitlines() if "nowhere at" in ln)
    assert "FAIL" in line and url in line and "cannot reach the model endpoint" in out.stdout
    assert "f = 28.24" in out.stdout  # the rest was still checked


def test_check_of_a_task_that_does_not_load_fails_with_the_reason(
    tmp_path: Path, home: Path
) -> None:
    task = make_task(tmp_path / "t")
    (task / "task.toml").write_text((task / "task.toml").read_text() + "\nbogus = 1\n")
    out = here(home, "check", str(task))
    assert out.returncode == 1 and "the task does not load" in out.stdout
    assert "bogus" in out.stdout


# -- demo and the fake server -------------------------------------------------------------
@pytest.mark.slow
def test_demo_llm_runs_llm_agents_against_a_simulated_model(home: Path) -> None:
    out = cli(home, "demo", "--llm", "--budget-nodes", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "simulation" in out.stdout and "no real model" in out.stdout
    assert "http://127.0.0.1:" in out.stdout
    assert "agents LLM" in out.stdout  # the run-start line
    assert "completed (budget: max_nodes=3 reached)" in out.stdout
    assert "<<<<<<< SEARCH" in out.stdout and "VERDICT: accept" in out.stdout


def test_the_demo_responder_changes_one_constant_of_the_editable_file() -> None:
    text = "import math\n\n\ndef m(x):\n    # EVOLVE-BLOCK-START\n    a = 0.5 * x\n"
    text += "    b = 2.0\n    # EVOLVE-BLOCK-END\n    return a + b + 1.5\n"
    user = f"--- model.py ---\n{text}\nEditable files: model.py\n\nWrite the edits now."
    req = FakeRequest("openai", "m", "You are an expert programmer.", user, "", {})
    demo = DemoResponder()
    first, second = demo(req), demo(req)
    block = "<<<<<<< SEARCH\n    a = 0.5 * x\n=======\n    a = 0.575 * x\n>>>>>>> REPLACE\n"
    assert first == f"model.py\n{block}"
    assert "    b = 2.0\n=======\n    b = 1.7\n" in second  # the next line, another factor
    assert [role for role, _ in demo.answers] == ["coder", "coder"]


def test_the_fake_server_runs_from_the_command_line(home: Path) -> None:
    module = "revtree.agents.llm.fake_server"
    usage = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60
    )
    assert usage.returncode == 0 and "usage:" in usage.stdout and "--port" in usage.stdout
    port = closed_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
        env=cli_env(home),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/v1" in line and "no real model" in line
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json.dumps(body).encode(),
            {"content-type": "application/json"},
        )
        deadline = time.monotonic() + 30
        with urllib.request.urlopen(req, timeout=max(1, deadline - time.monotonic())) as r:
            answer = json.load(r)
        assert answer["choices"][0]["message"]["content"] == "ok"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_demo_falls_back_to_a_small_task_of_its_own(tmp_path: Path) -> None:
    from revtree.cli.start import DEMO_PROGRAM

    program = tmp_path / "program.py"
    program.write_text(DEMO_PROGRAM)
    spec = scaffold(tmp_path / "demo", program, "rmse", "minimize", name="demo").spec
    report = preflight(spec.with_overrides(sandbox={"backend": "local"}), models=False)
    assert report.ok, report.items
    assert report.baseline is not None and 0.5 < (report.baseline.score or 0) < 2
