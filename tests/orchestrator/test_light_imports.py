"""Commands start without the engine (issue 24). Each command runs in a fresh interpreter,
as ``python -m revtree`` runs it, against a real SQLite home with a real run (held for
approval, so that watch follows a live run and approve, reject and stop act on it); what
it had loaded when it ended is checked.

- ``--version`` and ``--help`` load the CLI library and nothing of the engine, the
  storage or pydantic; ``X --help`` may load pydantic (typer coerces parameters with it).
- The commands that read or decide (ls, show, watch, stop, approve, reject) load neither
  LangGraph, a model SDK, the Docker client, Optuna nor Ray, nor alembic where the
  schema is current; SQLAlchemy they may. ``ls`` in a home with no database yet makes
  none and loads neither alembic (it built and migrated one in memory, about 0.4 s) nor
  SQLAlchemy (0.19 s of imports, and the report's modules).

The commands share one interpreter start: each runs in a child forked from an interpreter
that has done what ``python -m revtree`` does before it dispatches (``loaded_modules_each``
in tests/orchestrator/conftest.py), so each child loads what a fresh one would.

Speed is measured in ``benchmarks/cli_start.py``, never asserted here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from revtree.cli.app import COMMAND_ORDER
from revtree.memory import Store
from tests.orchestrator.conftest import loaded_modules_each, make_task, wait_for
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
    assert roots(names) & (BEYOND_THE_CLI - {"pydantic"}) == set()


def test_ls_in_a_home_with_no_database_makes_none(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ((code, names),) = loaded_modules_each(home, [("ls",)])
    assert code == 0
    assert roots(names) & (ENGINE | {"alembic", "sqlalchemy"}) == set()  # no store to open
    assert not (home / "revtree.db").exists()


@pytest.fixture
def held_run(tmp_path: Path, home: Path, store: Store) -> Iterator[str]:
    """A run driven by a live process, node 1 waiting for approval."""
    proc, run_id = start_waiting(home, store, make_task(tmp_path / "t", budget=3))
    try:
        yield run_id
    finally:
        proc.kill()
        proc.wait(timeout=60)


@pytest.mark.slow  # one interpreter per light command, 7 s (issue 24)
def test_reading_and_deciding_load_no_engine(held_run: str, home: Path, store: Store) -> None:
    run = held_run
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
    assert "sqlalchemy" in roots(names)  # the probe saw the store opened
    wait_for(lambda: waiting(store, run) == [2], what="node 2 to wait")
    deciding = [("stop", run), ("reject", run, "2", "--why", "no")]
    for args, (code, names) in zip(deciding, loaded_modules_each(home, deciding), strict=True):
        assert (code, roots(names) & ENGINE) == (0, set()), args
    wait_for(lambda: store.get_run(run).status.value == "stopped", what="the run to stop")
    assert store.node(run, 2).status.is_finished() or store.decision(run, 2, 1) is not None
