"""The orchestrator: the LangGraph candidate pipeline, the scheduler, budgets, trust,
policies, and the commands that act on runs (see docs/architecture.md).

``Orchestrator``, ``RunPaths`` and ``create_run`` are imported on first use (PEP 562):
importing a submodule (``orchestrator.run``, ``orchestrator.commands.report``) does not
load the pipeline, LangGraph or the agents. Importing the package installs
``revtree.deferred``, so that LangGraph's and the SDKs' imports that follow skip the
package ``__init__`` files they never use."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from revtree import deferred

deferred.install()  # before LangGraph and the model SDK are imported (revtree.deferred)

if TYPE_CHECKING:
    from revtree.orchestrator.core import Orchestrator
    from revtree.orchestrator.run import RunPaths, create_run

_LAZY = {
    "Orchestrator": "revtree.orchestrator.core",
    "RunPaths": "revtree.orchestrator.run",
    "create_run": "revtree.orchestrator.run",
}

__all__ = ["Orchestrator", "RunPaths", "create_run"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
