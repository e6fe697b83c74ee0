"""The orchestrator: the LangGraph candidate pipeline, the scheduler, budgets, trust,
policies, and the commands that act on runs (see docs/architecture.md)."""

from revtree.orchestrator.core import Orchestrator
from revtree.orchestrator.run import RunPaths, create_run

__all__ = ["Orchestrator", "RunPaths", "create_run"]
