from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from revtree.memory import Store
from tests.pg import fresh_database

EVALUATOR = """\
import json, math, os, sys, time
import sol
mode = getattr(sol, "MODE", "ok")
time.sleep(float(os.environ.get("SLEEP", "0")))
if mode == "crash":
    print("about to fail", file=sys.stderr)
    raise SystemExit(3)
if mode == "hang":
    time.sleep(600)
if mode == "garbage":
    os.write(3, b"this is not json")
    raise SystemExit(0)
if mode == "children":
    import subprocess
    subprocess.Popen(["sleep", "307"])  # a length no other test uses: pgrep finds only these
value = (sol.X - 1.2) ** 2 + (sol.N - 7) ** 2
if mode == "nan":
    value = float("nan")
leak = sorted(k for k in os.environ if "KEY" in k or "TOKEN" in k or "REVTREE_DB" in k)
os.write(3, json.dumps({"f": value, "leak": leak}).encode())
"""


def make_task(
    root: Path,
    *,
    budget: int = 8,
    parallel: int = 1,
    policy: str = "greedy",
    sleep: float = 0.0,
    modes: tuple[str, ...] = (),
    timeout: float = 20,
    extra: str = "",
) -> Path:
    """A tiny knob task: minimise (X - 1.2)^2 + (N - 7)^2, optionally with a MODE knob."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "sol.py").write_text(
        f"X = 3.0\nN = 2\nMODE = {modes[0]!r}\n" if modes else "X = 3.0\nN = 2\n"
    )
    (root / "ev.py").write_text(EVALUATOR)
    mode_knob = ""
    if modes:
        choices = ", ".join(repr(m) for m in modes).replace("'", '"')
        mode_knob = f"""
[[knobs]]
name = "MODE"
type = "categorical"
choices = [{choices}]
file = "sol.py"
"""
    (root / "task.toml").write_text(
        textwrap.dedent(f"""\
        name = "quad"
        goal = "minimise f"
        editable = ["sol.py"]
        protected = ["ev.py"]
        {extra}
        [evaluate]
        command = "python ev.py"
        metric = "f"
        direction = "minimize"
        timeout = {timeout}

        [sandbox]
        env = {{ SLEEP = "{sleep}" }}

        [search]
        policy = "{policy}"
        parallel = {parallel}
        seed = 7

        [budget]
        max_nodes = {budget}

        [[knobs]]
        name = "X"
        type = "float"
        low = -5
        high = 5
        file = "sol.py"

        [[knobs]]
        name = "N"
        type = "int"
        low = 1
        high = 10
        file = "sol.py"
        """)
        + mode_knob
    )
    return root


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, home: Path) -> Iterator[str]:
    """The URL of the one database that every process of a test shares: SQLite in
    ``home``, or a fresh PostgreSQL database (marker ``postgres``)."""
    if request.param == "sqlite":
        yield f"sqlite:///{home / 'revtree.db'}"
        return
    with fresh_database() as url:
        yield url


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("REVTREE_HOME", str(h))
    monkeypatch.delenv("REVTREE_DB", raising=False)
    return h


@pytest.fixture
def store(home: Path) -> Store:
    s = Store(f"sqlite:///{home / 'revtree.db'}")
    yield s
    s.close()


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "REVTREE_DB"}
    env.update(REVTREE_HOME=str(home), PYTHONUNBUFFERED="1", COLUMNS="200")
    env.update(extra)  # may override the defaults (COLUMNS for a narrow terminal)
    return env


def revtree(
    home: Path, *args: str, check: bool = True, timeout: float = 300, **env: str
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "revtree", *args],
        capture_output=True,
        text=True,
        env=cli_env(home, **env),
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"revtree {args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def revtree_here(
    home: Path, *args: str, check: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """``revtree ARGS`` in this process (typer's ``CliRunner``), with the environment of
    :func:`revtree`: for what a command prints and exits with, where a subprocess would
    prove nothing more and costs an interpreter start and the CLI's imports (issue 24).
    ``main()``'s one step, a :class:`RevtreeError` as ``error: ...`` and exit code 2, is
    taken here; ``main()`` itself (which also makes the process non-dumpable) runs only
    in the subprocess tests. A command that drives a run goes through :func:`drive_here`
    (its signal handlers put back); one whose process is the point (a pid, a kill, a
    signal) keeps :func:`revtree`. stdin is empty, not a terminal."""
    from typer.testing import CliRunner

    from revtree.cli import app  # the typer app, every command registered
    from revtree.errors import RevtreeError

    changes: dict[str, str | None] = {"REVTREE_DB": None, "REVTREE_HOME": str(home)}
    changes.update({"COLUMNS": "200", **env})  # as cli_env(home, **env) makes it (env wins)
    with console_width(int(changes["COLUMNS"] or 80)):  # a new process reads COLUMNS
        result = CliRunner().invoke(app, list(args), env=changes, catch_exceptions=True)
    code, stderr = result.exit_code, result.stderr
    if isinstance(result.exception, RevtreeError):
        code, stderr = 2, f"{stderr}error: {result.exception}\n"
    elif result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    proc = subprocess.CompletedProcess(["revtree", *args], code, result.stdout, stderr)
    if check and code != 0:
        raise AssertionError(f"revtree {args} exited {code}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@contextlib.contextmanager
def console_width(columns: int) -> Iterator[None]:
    """The CLI's consoles ``columns`` wide for the block: they read COLUMNS when made,
    at the import, where a subprocess of :func:`revtree` makes them with its own."""
    from revtree.cli.app import console, err

    saved = [(c, c.__dict__["_width"]) for c in (console, err)]
    try:
        for c, _ in saved:
            c.width = columns
        yield
    finally:
        for c, width in saved:
            c.__dict__["_width"] = width


def drive_here(
    home: Path, *args: str, check: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """A command that drives a run (run, resume, retry...) in this process, as
    :func:`revtree_here`: for a test of what the run does (its scores, its trust, its
    records), where a subprocess proves nothing and costs 2 s of CPU (the interpreter and
    LangGraph's, SQLAlchemy's and the SDK's imports; issue 24). The command's Ctrl-C and
    SIGTERM handlers are put back after it. A test of the process itself (a kill, a
    signal, a pid, a terminal, ``main()``) keeps :func:`revtree`."""
    import signal

    import revtree.agents.knobs  # noqa: F401  (Optuna's log handler takes the real stderr
    # when it is first imported, not the runner's, which is closed after the command)

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return revtree_here(home, *args, check=check, **env)
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def spawn(home: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "revtree", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(home, **env),
    )


def wait_for(cond: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# The CLI as ``python -m revtree`` starts it (``from revtree.cli import main``), then each
# command of the JSON list in the second argument in a child forked from that interpreter
# (one after the other): the child holds what a fresh ``python -m revtree`` holds when it
# dispatches, and no more, so each command's loaded names are its own. Each child writes
# [exit code, the names in sys.modules once the command has ended] to FIRST.K (issue 24:
# one interpreter start for many commands, not one each).
LOADED = """\
import json, os, sys
out, todo = sys.argv[1], json.loads(sys.argv[2])
from revtree.cli import main
for k, args in enumerate(todo):
    pid = os.fork()
    if pid == 0:
        sys.argv, code = ["revtree", *args], 0
        try:
            main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        with open(f"{out}.{k}", "w") as f:
            json.dump([code, sorted(sys.modules)], f)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    os.waitpid(pid, 0)
"""


def loaded_modules_each(
    home: Path, commands: list[tuple[str, ...]], **env: str
) -> list[tuple[int, set[str]]]:
    """Each command's (exit code, every module it loaded), as ``revtree ARGS`` in a fresh
    interpreter would have them; the commands run in order, each after the last ended."""
    out = home.parent / "loaded-modules"
    proc = subprocess.run(
        [sys.executable, "-c", LOADED, str(out), json.dumps(commands)],
        capture_output=True,
        text=True,
        env=cli_env(home, **env),
        timeout=60 + 30 * len(commands),
    )
    found = []
    for k, args in enumerate(commands):
        result = out.with_name(f"{out.name}.{k}")
        if not result.exists():
            raise AssertionError(f"revtree {args} did not finish:\n{proc.stdout}\n{proc.stderr}")
        code, names = json.loads(result.read_text())
        result.unlink()
        found.append((int(code), set(names)))
    return found


def loaded_modules(home: Path, *args: str, **env: str) -> tuple[int, set[str]]:
    """``revtree ARGS`` in a fresh interpreter: its exit code and every module it loaded."""
    return loaded_modules_each(home, [args], **env)[0]


def drain_pty(leader: int, timeout: float) -> bytes:
    """Everything written to a pty's follower until the child closes it (EIO or EOF) or
    ``timeout`` seconds pass; closes ``leader``."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not select.select([leader], [], [], 1)[0]:
            continue
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the pty
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return b"".join(chunks)
