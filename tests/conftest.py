"""Shared fixtures (task folders written into ``tmp_path``, tar workspaces) and the
summary of which test groups ran or were skipped, and why, at the end of a session."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

SOLVER = "X = 1.0\nN = 4\nMODE = 'fast'\n"
EVALUATE = "import json, os\nos.write(3, json.dumps({'score': 1.0}).encode())\n"
TASK_TOML = """\
name = "demo"
goal = "make score high"
editable = ["solver.py"]
protected = ["evaluate.py"]

[evaluate]
command = "python evaluate.py"
metric = "score"
direction = "maximize"
timeout = "30s"
"""

WriteTask = Callable[..., Path]


def write_task_folder(
    root: Path, toml: str = TASK_TOML, files: Mapping[str, str] | None = None
) -> Path:
    """A task folder at ``root``: task.toml, solver.py, evaluate.py plus ``files``."""
    root.mkdir(parents=True, exist_ok=True)
    content = {"solver.py": SOLVER, "evaluate.py": EVALUATE, **(files or {})}
    for rel, text in content.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "task.toml").write_text(toml)
    return root


@pytest.fixture
def write_task(tmp_path: Path) -> WriteTask:
    """``write_task(toml=..., files=..., name=...)`` -> the task folder under tmp_path."""

    def write(
        toml: str = TASK_TOML, files: Mapping[str, str] | None = None, name: str = "task"
    ) -> Path:
        return write_task_folder(tmp_path / name, toml, files)

    return write


def make_tar(files: Mapping[str, bytes | str], modes: Mapping[str, int] | None = None) -> bytes:
    """An in-memory tar of ``files`` (path -> content)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            raw = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            info.mode = (modes or {}).get(name, 0o644)
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


@pytest.fixture
def tar_of() -> Callable[..., bytes]:
    return make_tar


@pytest.fixture(autouse=True)
def _local_sandbox_for_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    """``backend = "auto"`` picks Docker where an engine and the base image exist; the
    orchestrator tests are about the orchestrator, so they run on the local backend.
    Docker-marked tests ask for Docker explicitly."""
    monkeypatch.setenv("REVTREE_SANDBOX", "local")


# -- the per-group summary at the end of every session ------------------------------
# A group is a marker whose description says what it "needs" (``docker: needs ...``,
# ``postgres: needs ...``; a later ``browser: needs ...`` is one too); a test in none of
# them is in "other". ``scripts/test`` passes what it could not provision in
# REVTREE_TEST_NOTE_<GROUP> (the reason the group skips) and the groups that must run
# in REVTREE_REQUIRE (comma-separated): a skipped test of a required group fails the
# session.

OTHER = "other"
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
SUMMARY_KEY = pytest.StashKey[tuple[list[str], bool]]()


def resource_groups(markers: list[str]) -> list[str]:
    """The group markers among the ini ``markers`` lines (``name: needs ...``)."""
    groups = []
    for line in markers:
        name, _, text = line.partition(":")
        if text.strip().startswith("needs"):
            groups.append(name.split("(")[0].strip())
    return groups


def group_summary(
    results: list[tuple[str, str, set[str], str]],
    groups: list[str],
    notes: Mapping[str, str],
    required: set[str],
) -> tuple[list[str], bool]:
    """(lines, a required group skipped) from (nodeid, outcome, keywords, skip reason)
    tuples; outcome is one of OUTCOMES or "deselected"."""
    worst: dict[str, tuple[int, str, str, str]] = {}  # nodeid -> (rank, outcome, group, why)
    rank = {"deselected": 0, "passed": 1, "xfailed": 1, "skipped": 2, "xpassed": 3}
    for nodeid, outcome, keywords, why in results:
        group = next((g for g in groups if g in keywords), OTHER)
        entry = (rank.get(outcome, 4), outcome, group, why)
        if nodeid not in worst or entry[0] > worst[nodeid][0]:
            worst[nodeid] = entry
    lines, missed = [], False
    width = max(len(g) for g in [*groups, OTHER])
    for group in [*groups, OTHER]:
        mine = [e for e in worst.values() if e[2] == group]
        counts: dict[str, int] = {}
        reasons: dict[str, int] = {}
        for _, outcome, _, why in mine:
            counts[outcome] = counts.get(outcome, 0) + 1
            if outcome == "skipped":
                reasons[why] = reasons.get(why, 0) + 1
        skipped, deselected = counts.get("skipped", 0), counts.pop("deselected", 0)
        ran = sum(counts.values()) - skipped
        why = notes.get(group) or "; ".join(
            f"{n}x {r}" if len(reasons) > 1 else r
            for r, n in sorted(reasons.items(), key=lambda x: -x[1])
        )
        if not mine:
            line = "no tests"
        elif not ran and not skipped:
            line = f"not selected ({deselected} deselected)"
        elif not ran:
            line = f"skipped ({why}), {skipped} tests"
        else:
            parts = [f"{n} {o}" for o, n in counts.items() if o != "skipped"]
            if skipped:
                parts.append(f"{skipped} skipped: {why}")
            line = f"ran ({', '.join(parts)})"
        if deselected and (ran or skipped):
            line += f", {deselected} deselected"
        if skipped and group in required:
            missed = True
            line += " -- REQUIRED (REVTREE_REQUIRE): this fails the session"
        lines.append(f"{group + ':':<{width + 1}} {line}")
    return lines, missed


def _session_results(reporter: Any) -> list[tuple[str, str, set[str], str]]:
    results = []
    for outcome in (*OUTCOMES, "deselected"):
        for rep in reporter.stats.get(outcome, []):
            nodeid = getattr(rep, "nodeid", "")
            keywords = set(getattr(rep, "keywords", {}))
            if isinstance(rep, pytest.Item):  # deselected: its markers, not its folders' names
                keywords = {m.name for m in rep.iter_markers()}
            why = ""
            if outcome == "skipped" and isinstance(rep.longrepr, tuple):
                why = str(rep.longrepr[2]).removeprefix("Skipped: ")
            results.append((nodeid, outcome, keywords, why))
    return results


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    notes = {
        k.removeprefix("REVTREE_TEST_NOTE_").lower(): v
        for k, v in os.environ.items()
        if k.startswith("REVTREE_TEST_NOTE_") and v
    }
    required = {g.strip() for g in os.environ.get("REVTREE_REQUIRE", "").split(",") if g.strip()}
    groups = resource_groups(session.config.getini("markers"))
    lines, missed = group_summary(_session_results(reporter), groups, notes, required)
    session.config.stash[SUMMARY_KEY] = (lines, missed)
    if missed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> Iterator[None]:
    """After pytest's own summary (the -ra list), so it is the last thing before the counts."""
    yield
    lines, _ = config.stash.get(SUMMARY_KEY, ([], False))
    if not lines:
        return
    terminalreporter.write_sep("-", "test groups: ran or skipped, and why")
    for line in lines:
        terminalreporter.write_line(line, red="REQUIRED" in line)
