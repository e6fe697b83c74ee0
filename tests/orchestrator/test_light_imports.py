"""Commands start without the engine (issue 24). Each command runs in a fresh interpreter,
as ``python -m revtree`` runs it, against a real SQLite home with a real run (held for
approval, so that watch follows a live run and approve, reject and stop act on it); what
it had loaded when it ended is checked.

- ``--version`` and ``--help`` load the CLI library and nothing of the engine, the
  storage or pydantic, nor does ``X --help`` (typer coerces parameters with pydantic;
  ``cli/coercion.py`` passes on the values that need no coercion without it).
- Every command makes its process non-dumpable without loading the sandboxes.
- A run whose model writes the code (an OpenAI-compatible server), in a new home, loads
  LangGraph and the openai SDK, but neither Optuna (the offline proposer's: a third of a
  second of each start) nor the anthropic SDK (two seconds) nor the Docker client, nor
  alembic (its new database is made from the tables: ``memory.db._create``), nor
  SQLAlchemy's ORM (the tables are Core), nor the
  submodules that the package ``__init__`` files put off by ``revtree.deferred`` gather;
  ``doctor`` loads neither Optuna nor alembic.
- The commands that read or decide (ls, show, watch, stop, approve, reject) load neither
  LangGraph, a model SDK, the Docker client, Optuna nor Ray, nor alembic where the
  schema is current. Those that only read (ls, show, watch, stop) load no SQLAlchemy
  either on a SQLite home whose schema is current (``memory.sqlite_reads``: 0.1 s of
  imports and the ORM models spared), nor pydantic where no option's value needs
  coercing (``--node 1`` does), nor the sandboxes; and they answer there exactly as the
  Store does (their output with the light reads forced off, ``REVTREE_LIGHT_READS=0``,
  is the same). On an older schema they open the Store, which migrates it, as before.
  approve and reject write: they open the Store. ``ls`` in a home with no database yet
  makes none and loads neither alembic (it built and migrated one in memory, about
  0.4 s) nor SQLAlchemy.

The commands share one interpreter start: each runs in a child forked from an interpreter
that has done what ``python -m revtree`` does before it dispatches (``loaded_modules_each``
in tests/orchestrator/conftest.py), so each child loads what a fresh one would.

Speed is measured in ``benchmarks/cli_start.py``, never asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer
from revtree.cli.app import COMMAND_ORDER
from revtree.memory import Store
from revtree.memory.records import LLMCall
from revtree.orchestrator.commands.scaffold import DemoResponder
from tests.memory.test_sqlite_reads import downgrade_to
from tests.orchestrator.conftest import loaded_modules_each, make_task, revtree, wait_for
from tests.orchestrator.test_approval import start_waiting, waiting

ENGINE = {"langgraph", "langchain_core", "openai", "anthropic", "docker", "optuna", "ray"}
BEYOND_THE_CLI = ENGINE | {
    "sqlalchemy",
    "alembic",
    "git",
    "pydantic",
    "starlette",
    "uvicorn",
    "httpx",
    "numpy",
    "yaml",
    "tenacity",
}


def roots(names: Iterable[str]) -> set[str]:
    return {name.partition(".")[0] for name in names}


HELPS = [("--version",), ("--help",), *((c, "--help") for c in [*COMMAND_ORDER, "sandbox"])]


@pytest.fixture(scope="module")
def helps(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], Any]:
    """(exit code, loaded names) of each of HELPS, in an empty home."""
    home = tmp_path_factory.mktemp("helps") / "home"
    return dict(zip(HELPS, loaded_modules_each(home, HELPS), strict=True))


@pytest.mark.parametrize("args", [("--version",), ("--help",)], ids=" ".join)
def test_version_and_help_load_only_the_cli(
    helps: dict[tuple[str, ...], Any], args: tuple[str, ...]
) -> None:
    code, names = helps[args]
    assert code == 0
    assert roots(names) & BEYOND_THE_CLI == set()
    assert "typer" in roots(names)  # the probe saw the command's own imports


@pytest.mark.parametrize("command", [*COMMAND_ORDER, "sandbox"])
def test_each_commands_help_loads_no_engine_nor_storage(
    helps: dict[tuple[str, ...], Any], command: str
) -> None:
    code, names = helps[(command, "--help")]
    assert code == 0
    assert roots(names) & BEYOND_THE_CLI == set()


def test_ls_in_a_home_with_no_database_makes_none(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ((code, names),) = loaded_modules_each(home, [("ls",)])
    assert code == 0
    assert roots(names) & (ENGINE | {"alembic", "sqlalchemy"}) == set()  # no store to open
    assert not (home / "revtree.db").exists()


@pytest.fixture
def held_run(
    tmp_path: Path, home: Path, store: Store
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A run driven by a live process, node 1 waiting for approval: (its id, the process)."""
    proc, run_id = start_waiting(home, store, make_task(tmp_path / "t", budget=3))
    try:
        yield run_id, proc
    finally:
        proc.kill()
        proc.wait(timeout=60)


READS = ("ls", "show", "watch", "stop")  # the commands that only read: no SQLAlchemy


@pytest.mark.slow  # one interpreter per light command, 7 s (issue 24)
def test_reading_and_deciding_load_no_engine(
    held_run: tuple[str, subprocess.Popen[str]], home: Path, store: Store
) -> None:
    run, proc = held_run
    checked = [
        (("ls",), 0),
        (("ls", "--tree"), 0),
        (("show", run), 0),
        (("show", run, "--node", "1"), 0),
        (("show", run, "--json", "--nodes"), 0),
        (("watch", run, "--timeout", "0.5"), 1),  # a live run: followed until the timeout
        (("approve", run, "1"), 0),
    ]
    found = loaded_modules_each(home, [args for args, _ in checked])
    for (args, want), (code, names) in zip(checked, found, strict=True):
        assert (code, roots(names) & (ENGINE | {"alembic"})) == (want, set()), args
        assert ("sqlalchemy" in roots(names)) == (args[0] not in READS), args
        # typer coerces "1" and "0.5" with pydantic; the rest need none (cli/coercion.py)
        typed = {"--node", "--timeout"} & set(args) or args[0] not in READS
        assert ("pydantic" in roots(names)) == bool(typed), args
    wait_for(lambda: waiting(store, run) == [2], what="node 2 to wait")
    deciding = [("stop", run), ("reject", run, "2", "--why", "no")]
    for args, (code, names) in zip(deciding, loaded_modules_each(home, deciding), strict=True):
        assert (code, roots(names) & ENGINE) == (0, set()), args
        assert ("sqlalchemy" in roots(names)) == (args[0] not in READS), args
        assert ("pydantic" in roots(names)) == (args[0] not in READS), args
    wait_for(lambda: store.get_run(run).status.value == "stopped", what="the run to stop")
    assert store.node(run, 2).status.is_finished() or store.decision(run, 2, 1) is not None
    proc.wait(timeout=60)
    ended = [("watch", run), ("show", run, "--json"), ("ls", "--json")]  # a finished run
    for args, (code, names) in zip(ended, loaded_modules_each(home, ended), strict=True):
        assert (code, roots(names) & BEYOND_THE_CLI) == (0, set()), args
        assert not any(n.startswith("revtree.sandboxes") for n in names), args
    # the light reads answer as the Store, on this run (evaluations, events, a decision)
    # with model calls added, and on an older schema the Store answers (and migrates it)
    call = LLMCall("coder", "m", 100, 20, 40, 0, 0.01, 1.5, True, 1, prompt="p", response="r")
    store.record_llm_call(run, call)
    store.record_llm_call(run, LLMCall("proposer", "m", 9, 0, 0, 0, 0.0, 0.1, False, 2, "no"))
    reads = [
        ("ls", "--json"),
        ("show", run, "--json", "--nodes"),
        ("show", run, "--node", "1", "--json"),
        ("show", run, "--transcript", "--json"),
        ("show", run),
        ("watch", run),
        ("stop", run),
    ]
    light = [revtree(home, *args, check=False) for args in reads]
    for args, out in zip(reads, light, strict=True):
        off = revtree(home, *args, check=False, REVTREE_LIGHT_READS="0")
        assert (out.returncode, out.stdout, out.stderr) == (off.returncode, off.stdout, off.stderr)
    shown = json.loads(light[1].stdout)
    assert shown["llm"]["calls"] == 2 and shown["n_evaluated"] >= 2, shown
    assert store.decision(run, 1, 1) is not None  # what the comparison covered
    store.close()
    downgrade_to(f"sqlite:///{home / 'revtree.db'}", "0005")
    ((code, names),) = loaded_modules_each(home, [("show", run, "--json", "--nodes")])
    assert code == 0 and {"sqlalchemy", "alembic"} <= roots(names)  # the Store migrated it
    assert revtree(home, "show", run, "--json", "--nodes").stdout == light[1].stdout


def test_plain_parameters_pass_what_typers_coercion_returns() -> None:
    """cli/coercion.py passes a plain parameter's value on where it already has the type;
    typer's own coercion (pydantic) returns those values unchanged too, for every
    parameter of every command it applies to; any other value is typer's to coerce."""
    import typer.main
    from typer._click import Context
    from typer._coercion import build_runtime_param

    from revtree.cli import app
    from revtree.cli.coercion import PassThrough, install, plain

    samples = {str: "last", int: 3, float: 0.25, bool: True}
    group = typer.main.get_command(app)
    commands = [group, *group.commands.values()]  # type: ignore[attr-defined]
    seen = 0
    for command in commands:
        for param in command.params:
            if not plain(param):
                continue
            typers = build_runtime_param(param.type_descriptor)
            ctx = Context(command)
            for value in (None, param.default, samples[param.type_descriptor.annotation]):
                if value is None or type(value) is param.type_descriptor.annotation:
                    got = typers.coerce(value, param=param, ctx=ctx)
                    assert (got, type(got)) == (value, type(value)), (command.name, param.name)
                    seen += 1
    assert seen > 100  # the commands' run ids, --db, flags, numbers with defaults
    assert install() and install()  # once: a second call leaves it wrapped once
    show = group.commands["show"]  # type: ignore[attr-defined]
    (node,) = [p for p in show.params if p.name == "node"]
    node._runtime_param = None
    assert isinstance(node.get_runtime_param(), PassThrough)
    assert node.process_value(Context(show), "7") == 7  # a string: typer's, then kept
    assert not isinstance(node.get_runtime_param(), PassThrough)


DUMPABLE = """\
import ctypes, sys
sys.argv = ["revtree", "--version"]
from revtree.cli import main
try:
    main()
except SystemExit:
    pass
print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0), "revtree.sandboxes" in sys.modules)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="prctl is Linux's")
def test_the_command_makes_itself_non_dumpable_without_the_sandboxes(tmp_path: Path) -> None:
    """``main()`` hides the process's environ (API keys) from a local sandbox's processes
    (PR_SET_DUMPABLE 0, as ``sandboxes.local.protect_orchestrator``), loading no sandbox."""
    proc = subprocess.run(
        [sys.executable, "-c", DUMPABLE], capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.split()[-2:] == ["0", "False"], proc.stdout + proc.stderr


def test_a_model_driven_run_loads_no_optuna_nor_the_other_sdk(tmp_path: Path) -> None:
    home = tmp_path / "home"
    task = make_task(tmp_path / "task", budget=2)
    with FakeLLMServer(DemoResponder()) as srv:
        args = ("run", str(task), "--model", "openai-compatible:x", "--base-url", srv.openai_url)
        commands = [(*args, "--sandbox", "local", "--quiet"), ("doctor",)]
        (ran, loaded), (doctored, checked) = loaded_modules_each(home, commands)
    assert ran == 0 and len(srv.requests) >= 2, srv.requests  # the check and a candidate
    assert {"langgraph", "openai"} <= roots(loaded)
    assert roots(loaded) & {"optuna", "anthropic", "docker", "ray", "alembic"} == set()
    assert "sqlalchemy.orm" not in loaded  # the tables are Core (memory/models.py)
    # the package __init__ files put off (revtree.deferred): the run needed none of them
    assert {"langsmith.types", "openai.types", "langgraph.graph"} <= loaded
    unused = {"langsmith.types.run", "openai.types.graders", "langgraph_sdk.client"}
    assert loaded & {*unused, "langgraph.graph.message", "openai.types.responses.response"} == set()
    assert doctored == 0 and roots(checked) & {"optuna", "alembic"} == set()
