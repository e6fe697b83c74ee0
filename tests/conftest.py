"""Shared fixtures (task folders written into ``tmp_path``, tar workspaces) and the
summary of which test groups ran or were skipped, and why, at the end of a session."""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import tarfile
import tempfile
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


# -- the engine's images: shared by the docker tests, taken alone by those that hide them
# test_fresh_machine puts the evaluation images aside (untags them) to be a machine
# without them; a docker test on another xdist worker meanwhile found no image and
# skipped (or failed). Each docker test holds a shared lock for its duration, and
# ``images_alone`` makes it exclusive (one lock file per user, flock: any process).
IMAGES_LOCK = Path(
    os.environ.get("REVTREE_TEST_IMAGES_LOCK")  # a nested pytest (test_scripts) its own
    or Path(tempfile.gettempdir()) / f"revtree-test-docker-images-{os.getuid()}.lock"
)
_images_fd: list[int] = []  # this process's one descriptor of the lock (flock converts on it)
_images_held = [fcntl.LOCK_UN]  # how this process holds it now


def _images_lock(how: int) -> int:
    """Hold the lock ``how`` (LOCK_SH, LOCK_EX, LOCK_UN); returns how it was held."""
    if not _images_fd:
        _images_fd.append(os.open(IMAGES_LOCK, os.O_RDWR | os.O_CREAT, 0o600))
    fcntl.flock(_images_fd[0], how)
    before, _images_held[0] = _images_held[0], how
    return before


@pytest.fixture(autouse=True)
def _docker_images_shared(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked docker holds the images lock shared while it runs."""
    if request.node.get_closest_marker("docker") is None:
        yield
        return
    _images_lock(fcntl.LOCK_SH)
    try:
        yield
    finally:
        _images_lock(fcntl.LOCK_UN)


@contextlib.contextmanager
def images_alone() -> Iterator[None]:
    """No other docker test runs in the block (the lock exclusive, then held as before:
    shared by a test marked docker)."""
    before = _images_lock(fcntl.LOCK_EX)
    try:
        yield
    finally:
        _images_lock(before)


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
Result = tuple[str, str, set[str], str]  # nodeid, outcome, keywords (markers), skip reason


def resource_groups(markers: list[str]) -> list[str]:
    """The group markers among the ini ``markers`` lines (``name: needs ...``)."""
    groups = []
    for line in markers:
        name, _, text = line.partition(":")
        if text.strip().startswith("needs"):
            groups.append(name.split("(")[0].strip())
    return groups


def group_summary(
    results: list[Result],
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


def _session_results(reporter: Any, deselected: list[tuple[str, list[str]]]) -> list[Result]:
    """What the reporter saw, plus ``deselected`` (nodeid, marker names): with xdist the
    controller collects nothing, so it sees no deselected items of its own."""
    results: list[Result] = []
    for outcome in OUTCOMES:
        for rep in reporter.stats.get(outcome, []):
            nodeid = getattr(rep, "nodeid", "")
            keywords = set(getattr(rep, "keywords", {}))
            why = ""
            longrepr = getattr(rep, "longrepr", None)
            if outcome == "skipped" and isinstance(longrepr, tuple | list):  # list: from a worker
                why = str(longrepr[2]).removeprefix("Skipped: ")
            results.append((nodeid, outcome, keywords, why))
    results += [(nodeid, "deselected", set(marks), "") for nodeid, marks in deselected]
    return results


# -- under xdist (scripts/test runs ``-n``) ---------------------------------------------
# Each worker collects and runs; the controller's reporter gets every test report (with
# its keywords and skip reason) but nothing of what a worker deselected or stashed. A
# worker hands those over in ``config.workeroutput`` when it finishes (DESELECTED_OUT,
# END_LINES_OUT); the controller merges them in ``pytest_testnodedown`` and builds the
# summary and the exit status in its own ``pytest_sessionfinish``, as without xdist.

DESELECTED = pytest.StashKey[dict[str, list[str]]]()  # nodeid -> marker names
#: lines a test adds for the end of the session (``compat: openevolve ...: 106 keys``)
END_LINES = pytest.StashKey[list[str]]()
DESELECTED_OUT, END_LINES_OUT = "revtree_deselected", "revtree_end_lines"


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_deselected(items: list[pytest.Item]) -> None:
    for item in items:
        marks = sorted({m.name for m in item.iter_markers()})
        item.config.stash.setdefault(DESELECTED, {})[item.nodeid] = marks


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses a module-scoped fixture (a finished run, a dashboard server, a
    Ray cluster's result) joins its module's ``xdist_group``, so under ``--dist
    loadgroup`` the fixture is made once, on one worker, rather than once per worker.

    The heaviest modules come first in the collection (each module's tests stay
    together and in their order); pytest-xdist's ``loadgroup`` sends the groups first
    (the largest first), then the other tests in this order: a worker that drew a
    minute-long test near the end kept the session waiting while the others had
    nothing left to do."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else []
        if any(d.scope in ("module", "package") for fixdefs in defs for d in fixdefs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    items[:] = heaviest_modules_first(items)


SLOW_SECONDS = 3.0  # a test marked slow without its seconds (the marker's own bound)
QUICK_SECONDS = 0.1


def heaviest_modules_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with the modules whose tests take longest in all first (a stable sort:
    a module's tests keep their order, and modules of one weight keep theirs). A test
    weighs what its ``slow`` marker says (``@pytest.mark.slow(seconds=30)``), 3 s when
    it is marked slow without a figure, 0.1 s when it is not."""
    weight: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        slow = item.get_closest_marker("slow")
        seconds = QUICK_SECONDS if slow is None else slow.kwargs.get("seconds", SLOW_SECONDS)
        weight[module] = weight.get(module, 0.0) + seconds
    return sorted(items, key=lambda item: -weight[item.nodeid.split("::")[0]])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist, on the controller: what a finished worker deselected and stashed."""
    out = getattr(node, "workeroutput", {})
    config = node.config
    config.stash.setdefault(DESELECTED, {}).update(out.get(DESELECTED_OUT, {}))
    lines = config.stash.setdefault(END_LINES, [])
    lines += [line for line in out.get(END_LINES_OUT, []) if line not in lines]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _is_worker(config):
        config.workeroutput[DESELECTED_OUT] = config.stash.get(DESELECTED, {})  # type: ignore[attr-defined]
        config.workeroutput[END_LINES_OUT] = config.stash.get(END_LINES, [])  # type: ignore[attr-defined]
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    notes = {
        k.removeprefix("REVTREE_TEST_NOTE_").lower(): v
        for k, v in os.environ.items()
        if k.startswith("REVTREE_TEST_NOTE_") and v
    }
    required = {g.strip() for g in os.environ.get("REVTREE_REQUIRE", "").split(",") if g.strip()}
    groups = resource_groups(config.getini("markers"))
    deselected = list(config.stash.get(DESELECTED, {}).items())
    lines, missed = group_summary(_session_results(reporter, deselected), groups, notes, required)
    config.stash[SUMMARY_KEY] = (lines, missed)
    if missed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> Iterator[None]:
    """After pytest's own summary (the -ra list), so it is the last thing before the counts."""
    yield
    for line in config.stash.get(END_LINES, []):
        terminalreporter.write_line(line)
    lines, _ = config.stash.get(SUMMARY_KEY, ([], False))
    if not lines:
        return
    terminalreporter.write_sep("-", "test groups: ran or skipped, and why")
    for line in lines:
        terminalreporter.write_line(line, red="REQUIRED" in line)
