"""A fresh machine: the README's first command, character for character, in a copy of
the repository, on a Docker engine without the evaluation image and with no engine
at all; and code that a model writes never run outside Docker unless asked.

The README test runs the whole command, ``python3 -m venv .venv && .venv/bin/pip
install -e . && ...``: the install is real (pip's cache makes it about a minute), the
run is the example's 30 nodes on the knob proposer, which runs locally where Docker
cannot take it. The base image is tagged aside for the test and back in a ``finally``
(``scripts/test`` builds it before pytest).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer
from revtree.orchestrator.commands.scaffold import DemoResponder
from revtree.sandboxes import AUTO_ENV
from revtree.sandboxes.images import FALLBACK_IMAGE, base_tag, image_exists
from tests.conftest import TASK_TOML, images_alone, write_task_folder

ROOT = Path(__file__).resolve().parents[2]
NO_ENGINE = "unix:///nonexistent/docker.sock"
KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "REVTREE_DB", AUTO_ENV, "VIRTUAL_ENV")
LLM = "openai-compatible:revtree-demo"
MARKER_EVALUATE = """\
import json, os, pathlib
pathlib.Path({marker!r}).write_text("evaluated here")
os.write(3, json.dumps({{"score": 1.0}}).encode())
"""


NO_BWRAP = "/nonexistent/bwrap"  # REVTREE_BWRAP: a machine without bubblewrap
HOST_WRITE_EVALUATE = """\
import json, os, pathlib
try:
    pathlib.Path({marker!r}).write_text("evaluated here")
except OSError:
    pass
os.write(3, json.dumps({{"score": 1.0}}).encode())
"""


def first_command() -> str:
    """The first command of the README's "Two commands" section, as it is written."""
    section = (ROOT / "README.md").read_text().split("## Two commands", 1)[1]
    block = re.search(r"```bash\n(.*?)\n```", section, re.S)
    assert block is not None, "the README's Two commands section lost its first command"
    return block.group(1).strip()


def fresh_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment less what a fresh machine lacks (keys, a forced sandbox, a
    database URL, an active venv), with its own REVTREE_HOME."""
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    env["REVTREE_HOME"] = str(home)
    env.pop("DOCKER_HOST", None)
    return {**env, **extra}


@contextmanager
def images_aside(client: Any) -> Iterator[list[str]]:
    """The evaluation images ``auto`` would use (the base image, python:3.11-slim)
    untagged for the block, tagged back after it whatever happens."""
    aside: list[tuple[str, str]] = []
    with images_alone(), _put_back(client, aside):
        for tag in (base_tag(), FALLBACK_IMAGE):
            if image_exists(client, tag):
                spare = f"revtree-aside-{uuid.uuid4().hex[:8]}:{tag.replace(':', '-')}"
                client.images.get(tag).tag(spare)
                client.images.remove(tag)  # only the tag: the spare holds the image
                aside.append((tag, spare))
        yield [tag for tag, _ in aside]


@contextmanager
def _put_back(client: Any, aside: list[tuple[str, str]]) -> Iterator[None]:
    """Tag back each (tag, spare) in ``aside`` after the block, whatever happens."""
    try:
        yield
    finally:
        for tag, spare in aside:
            if not image_exists(client, tag):
                repo, _, version = tag.rpartition(":")
                client.images.get(spare).tag(repo, version)
            client.images.remove(spare)


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's files (tracked, and new ones not ignored) in a fresh folder:
    no .venv, no build output."""
    dest = tmp_path_factory.mktemp("clone")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for rel in filter(None, (name.decode() for name in listed)):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(src.read_bytes())
            (dest / rel).chmod(src.stat().st_mode & 0o777)
    return dest


def readme_command(
    repo: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The README's first command in ``repo`` (through bash, as a user types it), and
    the summary of the run it made (``revtree show last --json``)."""
    out = subprocess.run(
        ["bash", "-c", first_command()],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    shown = subprocess.run(
        [str(repo / ".venv/bin/revtree"), "show", "last", "--json"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return out, json.loads(shown.stdout) if shown.returncode == 0 else {}


def test_the_first_command_is_the_one_this_file_runs():
    command = first_command()
    assert command.startswith("python3 -m venv .venv && .venv/bin/pip install -e . && ")
    assert command.endswith(".venv/bin/revtree run examples/tsp-anneal")


@pytest.mark.slow(seconds=65)
@pytest.mark.docker
@pytest.mark.timeout(1500)
def test_the_readme_first_command_on_a_fresh_machine(docker_client, repo_copy, tmp_path):
    """No engine at all, then Docker with no evaluation image (and no bubblewrap, as on
    a fresh machine; with it, auto takes bwrap): the README's first command exits 0
    with a best better than the baseline, on the local sandbox, saying
    why in one line; no image is built for the knob proposer. (No engine first: its
    venv and install make the second, with the images aside, short.)"""
    out, summary = readme_command(
        repo_copy,
        fresh_env(tmp_path / "home-no-engine", DOCKER_HOST=NO_ENGINE, REVTREE_BWRAP=NO_BWRAP),
    )
    said = out.stdout + out.stderr
    assert out.returncode == 0, said[-3000:]
    assert f"sandbox local (auto: no Docker engine answers at {NO_ENGINE})" in said
    assert "the offline knob proposer only sets the task's [[knobs]]" in said
    assert summary["status"] == "completed"
    assert summary["best_score"] < summary["baseline_score"]  # tour length: minimize

    with images_aside(docker_client) as aside:
        assert base_tag() in aside
        env = fresh_env(tmp_path / "home-no-image", REVTREE_BWRAP=NO_BWRAP)
        out, summary = readme_command(repo_copy, env)
        said = out.stdout + out.stderr
        assert out.returncode == 0, said[-3000:]
        assert not image_exists(docker_client, base_tag())  # nothing was built
    assert "sandbox local (auto: the Docker engine at " in said
    assert "has no evaluation image" in said
    assert summary["status"] == "completed"
    assert summary["best_score"] < summary["baseline_score"]


def run_llm_task(task: Path, url: str, env: dict[str, str], *extra: str) -> str:
    out = subprocess.run(
        [
            *(sys.executable, "-m", "revtree", "run", str(task), "--model", LLM),
            *("--base-url", url, "--budget-nodes", "2", "--quiet", *extra),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return f"exit {out.returncode}\n" + " ".join((out.stdout + out.stderr).split())


def runs_in(env: dict[str, str]) -> list[Any]:
    out = subprocess.run(
        [sys.executable, "-m", "revtree", "ls", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    listed: list[Any] = json.loads(out.stdout)
    return listed


def refused(said: str) -> None:
    assert said.startswith("exit 2\n"), said
    assert "LLM agents write this run's candidates" in said
    assert "`revtree sandbox bootstrap-base`" in said and "--sandbox local" in said
    assert "no run was created" in said


@pytest.mark.slow
def test_llm_code_without_an_engine_runs_only_with_sandbox_local(tmp_path):
    """No engine: a run whose candidates a model writes is refused before a run exists,
    naming both ways on; --sandbox local, one of them, runs it."""
    marker = tmp_path / "evaluated-on-the-host"
    task = write_task_folder(
        tmp_path / "task", TASK_TOML, {"evaluate.py": MARKER_EVALUATE.format(marker=str(marker))}
    )
    env = fresh_env(tmp_path / "home", DOCKER_HOST=NO_ENGINE, REVTREE_BWRAP=NO_BWRAP)
    with FakeLLMServer(DemoResponder()) as srv:
        said = run_llm_task(task, srv.openai_url, env)
        refused(said)
        assert "--sandbox bwrap, which isolates without Docker, cannot run" in said
        assert f"no Docker engine answers at {NO_ENGINE}" in said
        assert not marker.exists() and runs_in(env) == []
        said = run_llm_task(task, srv.openai_url, env, "--sandbox", "local")
    assert said.startswith("exit 0\n"), said
    assert marker.exists() and len(runs_in(env)) == 1


@pytest.mark.docker
@pytest.mark.slow  # 16 s of --quick under -n 2 (issue 24)
def test_llm_code_on_an_engine_without_the_image_is_refused(docker_client, tmp_path):
    """An engine without the evaluation image, on a machine that cannot build it (no
    debootstrap on PATH): refused, naming both ways on; nothing runs on the host."""
    marker = tmp_path / "evaluated-on-the-host"
    task = write_task_folder(
        tmp_path / "task", TASK_TOML, {"evaluate.py": MARKER_EVALUATE.format(marker=str(marker))}
    )
    path = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "debootstrap").exists()
    )
    env = fresh_env(tmp_path / "home", PATH=path, REVTREE_BWRAP=NO_BWRAP)
    with FakeLLMServer(DemoResponder()) as srv, images_aside(docker_client):
        said = run_llm_task(task, srv.openai_url, env)
    refused(said)
    assert "has no evaluation image" in said and "debootstrap is not installed" in said
    assert not marker.exists() and runs_in(env) == []


@pytest.mark.slow
@pytest.mark.bwrap
def test_llm_code_without_an_engine_runs_in_the_namespace_sandbox(tmp_path):
    """No engine, bubblewrap here: a run whose candidates a model writes runs under
    bwrap, whose start line says what it enforces, and its evaluator cannot write on
    the host (the marker, beside the task, stays absent)."""
    from revtree.sandboxes.bwrap import usable

    if (why := usable()) is not None:
        pytest.skip(why)
    marker = tmp_path / "evaluated-on-the-host"
    task = write_task_folder(
        tmp_path / "task",
        TASK_TOML,
        {"evaluate.py": HOST_WRITE_EVALUATE.format(marker=str(marker))},
    )
    env = fresh_env(tmp_path / "home", DOCKER_HOST=NO_ENGINE)
    with FakeLLMServer(DemoResponder()) as srv:
        said = run_llm_task(task, srv.openai_url, env)
    assert said.startswith("exit 0\n"), said
    assert not marker.exists()
    assert len(runs_in(env)) == 1
    shown = subprocess.run(
        [sys.executable, "-m", "revtree", "watch", "last"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "sandbox bwrap (auto: no Docker engine answers" in " ".join(shown.split()), shown
    assert "no network" in shown
