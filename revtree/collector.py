"""Python's cycle collector around a command's imports and its exit (issue 24).

A ``revtree run`` imports about 2,000 modules (LangGraph, SQLAlchemy, the model SDK,
pydantic models by the thousand), and all they make lives as long as the process. With
the collector's defaults every full collection walks all of it: three times over during
a model-driven run's imports, and again while the interpreter shuts down. Held and
frozen as below, a whole ``revtree run`` took about a quarter less CPU on the 2-core
machine (``docs/architecture.md`` has the figures).

- :func:`hold` (``main()``, first thing): full collections wait. The young generations are
  still collected, so a cycle made and dropped at once is freed as before; only what has
  outlived two young collections waits. A command that never settles just runs with
  fewer full collections: ``ls``, ``show``, ``doctor``, ``init``, ``check``, ``holdout``,
  ``sandbox ...``, each bounded (a held ``demo --llm`` of 8 nodes ended with 4,500
  unreachable objects uncollected, 2.5 MB more at its peak).
- :func:`settle` (where a long-lived loop starts: ``Orchestrator.drive`` and
  ``Orchestrator.candidate`` (retry), ``watch``, the dashboard): what exists now moves
  out of the collector's view for good
  (``gc.freeze``: the modules, classes and functions of the imports), and full
  collections resume at the defaults. Only once, and only after :func:`hold`, so that a
  library user (a test process driving runs in-process) keeps its collector as it was.
- :func:`leave` (``main()``'s last step): the same move before the interpreter shuts
  down, whose own collections would otherwise walk everything once more.

What is frozen is never collected: a cycle frozen as garbage stays (about a hundred
objects at a run's settle), and an object in a cycle that owned something to close no
longer has it closed by the shutdown's collection. ``atexit`` handlers and
``weakref.finalize`` still run, so what must close at exit says so there: every database
engine (``memory.db._dispose_all``; without it a command left the SQLite file's
write-ahead log beside it, the file alone no copy of the runs), the fork server, the
workspaces' remover.
"""

from __future__ import annotations

import gc

DEFAULT = gc.get_threshold()  # (700, 10, 10) unless the embedding process changed it
HELD = 1_000_000  # young (gen 1) collections before a full one while held: in effect never
_held = False


def hold() -> None:
    """Full collections wait until :func:`settle` (the young ones go on)."""
    global _held
    if not _held:
        _held = True
        gc.set_threshold(DEFAULT[0], DEFAULT[1], HELD)


def settle() -> None:
    """The imports are done: freeze what they made and resume full collections (once,
    after :func:`hold`; otherwise nothing)."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.set_threshold(*DEFAULT)


def leave() -> None:
    """The process is about to exit: nothing left for the shutdown's collections to walk."""
    gc.freeze()


def held() -> bool:
    return _held
