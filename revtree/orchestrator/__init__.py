"""The orchestrator: the LangGraph candidate pipeline, the scheduler, budgets, policies."""

from revtree.orchestrator.runner import Orchestrator, RunPaths, create_run

__all__ = ["Orchestrator", "RunPaths", "create_run"]
