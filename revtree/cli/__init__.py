"""The ``revtree`` command (``revtree.cli:main``, also ``python -m revtree``).

The package is cut by what a command does, so that each module reads as one concern:

- ``app``: the typer app, the options shared by the commands (``--db``, the run id...),
  the consoles, ``main()`` (a :class:`~revtree.errors.RevtreeError` becomes ``error: ...``
  and exit code 2) and the two helpers every kind of command needs (``open_store``,
  ``node_or_best``). It imports no command module, so there is no import cycle.
- ``run``: the commands that start or drive evaluations: run, resume, fork, retry, and
  also holdout and pilot, which are placed here rather than with the read-only commands
  because they evaluate too: pilot creates and drives a run with the same live log and
  task loading as ``run``, and holdout drives an Orchestrator. Keeping them here keeps
  the live log, ``_drive`` and ``_load`` private to one module.
- ``inspect``: the commands that read a run without driving it: watch, ls, show,
  compare, diff, export.
- ``admin``: acting on a run without driving it: rm, stop, approve, reject, doctor, gc.
- ``sandbox``: the ``revtree sandbox ...`` sub-app.
- ``dashboard``: ``revtree dashboard``, the web view (the server is ``revtree.web``).
- ``tune``: ``revtree tune``, search configurations tried on a suite, the best written
  as a profile (the engine is ``revtree.orchestrator.tune``).
- ``coercion``: typer's parameter coercion, passed by where a value already has its
  type (typer 0.2x builds a pydantic adapter for every parameter, even ``RUN``).
- ``render``: how things are shown, shared by the commands: scores, live-log lines, the
  run summary, the family tree of forks.

Each command module registers its commands on ``app.app`` with decorators when it is
imported, which this ``__init__`` does; ``app.order_commands()`` then puts them back in
the order ``revtree --help`` listed them in when they lived in one file.

Every command module is imported by every command, so at their top they import only
typer, rich, each other, ``revtree.errors``, ``revtree.memory.records`` and
``revtree.tasks.names``; the engine (the store, the orchestrator, the agents, the task
loader) is imported inside the command that uses it. So ``--version`` and ``--help``
load no SQLAlchemy, pydantic or LangGraph, and the commands that read or decide load no
LangGraph, model SDK, Docker client or Optuna; those that only read (ls, show, watch,
stop, compare: ``app.open_reads``) load no SQLAlchemy on a current SQLite home, and
``coercion`` spares typer's pydantic where a value needs no coercing
(tests/orchestrator/test_light_imports.py; ``benchmarks/cli_start.py`` measures the
start).
"""

from revtree.cli import (  # noqa: F401  (registers the commands)
    admin,
    dashboard,
    inspect,
    run,
    sandbox,
    start,
    tune,
)
from revtree.cli.app import app, main, order_commands

order_commands()

__all__ = ["app", "main"]
