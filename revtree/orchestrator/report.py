"""Summaries of runs for ``show``, ``ls`` and the end of ``run``, and a side-by-side
comparison of several runs (a fork against its parent, say)."""

from __future__ import annotations

from typing import Any

from revtree.agents.evaluator import HOLDOUT
from revtree.memory import Node, NodeStatus, RunInfo, Store
from revtree.memory.records import LLMCall
from revtree.orchestrator.tree import Tree


def summarize(store: Store, run: RunInfo, with_nodes: bool = False) -> dict[str, Any]:
    """The run as a JSON-able dict (the contract of ``revtree show --json``)."""
    nodes = store.nodes(run.id)
    tree = Tree.of(nodes, run.maximize)
    best = tree.best()
    root = tree.nodes.get(0)
    count = {s: sum(n.status is s for n in nodes) for s in NodeStatus}
    holdout = [e for e in store.evaluations(run.id) if e.stage == HOLDOUT]
    out: dict[str, Any] = {
        "run_id": run.id,
        "task": run.task_name,
        "status": run.status.value,
        "reason": run.reason,
        "policy": run.policy,
        "direction": run.direction,
        "seed": run.seed,
        "n_nodes": len(nodes),
        "n_evaluated": sum(1 for n in nodes if n.n_evals > 0 or n.status is NodeStatus.SUCCEEDED),
        "n_succeeded": count[NodeStatus.SUCCEEDED],
        "n_failed": count[NodeStatus.FAILED] + count[NodeStatus.REJECTED],
        "n_rejected": count[NodeStatus.REJECTED],
        "n_in_flight": sum(not n.status.is_finished() for n in nodes),
        "baseline_score": root.score if root and root.status is NodeStatus.SUCCEEDED else None,
        "best_score": best.score if best else None,
        "best_node": best.id if best else None,
        "improvement": _improvement(root, best, run.maximize),
        "holdout": [
            {"node": e.node_id, "score": e.score, "ok": e.ok, "error": e.error} for e in holdout
        ],
        "wall_seconds": round(run.wall_used, 3),
        "sandbox_seconds": round(store.sandbox_seconds(run.id), 3),
        "created_at": run.created_at,
        "parent_run": run.parent_run,
        "parent_node": run.parent_node,
        **_own_work(nodes, run),
    }
    calls = store.llm_calls(run.id)
    out["llm"] = llm_spend(calls)
    if with_nodes:
        per_node: dict[int | None, dict[str, Any]] = {}
        for c in calls:
            spent = per_node.setdefault(c.node_id, {"usd": 0.0, "tokens": 0})
            spent["usd"] += c.cost_usd
            spent["tokens"] += c.input_tokens + c.output_tokens
        out["nodes"] = [
            {**node_json(n), **per_node.get(n.id, {"usd": 0.0, "tokens": 0})} for n in nodes
        ]
    return out


def inherited(nodes: list[Node], run: RunInfo) -> set[int]:
    """Ids of the nodes a fork copied from its parent run (none for a run that is not a
    fork): copies keep their creation time, which predates the fork."""
    if run.parent_run is None:
        return set()
    return {n.id for n in nodes if n.created_at < run.created_at}


def _own_work(nodes: list[Node], run: RunInfo) -> dict[str, Any]:
    """What this run added itself: its node count and best node, history left out."""
    old = inherited(nodes, run)
    own = [n for n in nodes if n.id not in old]
    best = Tree.of(own, run.maximize).best()
    return {
        "n_inherited": len(old),
        "n_new": len(own),
        "best_new_score": best.score if best else None,
        "best_new_node": best.id if best else None,
    }


COMPARE_KEYS = (
    "task",
    "status",
    "policy",
    "parent_run",
    "parent_node",
    "n_nodes",
    "n_inherited",
    "n_new",
    "n_failed",
    "baseline_score",
    "best_score",
    "best_node",
    "best_new_score",
    "best_new_node",
    "improvement",
    "holdout_score",
    "wall_seconds",
    "sandbox_seconds",
    "usd",
)


def compare(store: Store, runs: list[RunInfo]) -> list[tuple[str, list[Any]]]:
    """Runs side by side: one row per key of ``COMPARE_KEYS`` (``summarize``'s, plus
    ``holdout_score``: the last holdout of the run's best node, and ``usd``), with one
    value per run, in the order given. A table is ``Table("", *ids)`` and these rows."""
    summaries = [summarize(store, r) for r in runs]
    for s in summaries:
        on_best = [h for h in s["holdout"] if h["node"] == s["best_node"] and h["ok"]]
        s["holdout_score"] = on_best[-1]["score"] if on_best else None
        s["usd"] = s["llm"]["usd"]
    return [(k, [s[k] for s in summaries]) for k in COMPARE_KEYS]


def llm_spend(calls: list[LLMCall]) -> dict[str, Any]:
    """Dollars and tokens, in total and per role, and the share of cached prompt tokens."""

    def total(cs: list[LLMCall]) -> dict[str, Any]:
        prompt = sum(c.input_tokens for c in cs)
        return {
            "calls": len(cs),
            "failed_calls": sum(not c.ok for c in cs),
            "usd": round(sum(c.cost_usd for c in cs), 6),
            "input_tokens": prompt,
            "output_tokens": sum(c.output_tokens for c in cs),
            "cached_share": round(sum(c.cached_tokens for c in cs) / prompt, 4) if prompt else None,
        }

    roles = sorted({c.role for c in calls})
    return {**total(calls), "by_role": {r: total([c for c in calls if c.role == r]) for r in roles}}


def node_json(n: Node) -> dict[str, Any]:
    return {
        "id": n.id,
        "parent": n.parent_id,
        "status": n.status.value,
        "operator": n.operator,
        "score": n.score,
        "score_std": n.score_std,
        "commit": n.commit,
        "n_evaluations": n.n_evals,
        "depth": n.depth,
        "error": n.error,
        "error_kind": n.error_kind,
        "hypothesis": (n.proposal or {}).get("hypothesis"),
        "knobs": (n.proposal or {}).get("knobs"),
    }


def _improvement(root: Node | None, best: Node | None, maximize: bool) -> float | None:
    """Relative gain of the best over the baseline, positive when better."""
    if root is None or best is None or root.score in (None, 0) or best.score is None:
        return None
    assert root.score is not None
    gain = (best.score - root.score) / abs(root.score)
    return gain if maximize else -gain
