"""Summaries of runs for ``show``, ``ls`` and the end of ``run``, and a side-by-side
comparison of several runs (a fork against its parent, say)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from revtree.memory.records import (
    EvalResult,
    LLMCall,
    Node,
    NodeStatus,
    RunInfo,
    directed,
)
from revtree.memory.stages import FULL, GUARD, HOLDOUT
from revtree.orchestrator.tree import Tree
from revtree.orchestrator.trust import final_better, gain

if TYPE_CHECKING:
    from revtree.memory.reads import RunReads


def summarize(store: RunReads, run: RunInfo, with_nodes: bool = False) -> dict[str, Any]:
    """The run as a JSON-able dict (the contract of ``revtree show --json``). ``n_failed``
    counts the nodes that failed; ``n_rejected``, apart, the candidates a reviewer or a
    person rejected before their evaluation (not failures of the candidate's code)."""
    nodes = store.nodes(run.id)
    tree = Tree.of(nodes, run.maximize)
    best = tree.best()
    root = tree.nodes.get(0)
    count = {s: sum(n.status is s for n in nodes) for s in NodeStatus}
    evals = store.evaluations(run.id)
    holdout = [e for e in evals if e.stage == HOLDOUT]
    guard = [e for e in evals if e.stage == GUARD]
    held = waiting(store, run, nodes)
    out: dict[str, Any] = {
        "run_id": run.id,
        "task": run.task_name,
        "status": run.status.value,
        "reason": run.reason,
        "policy": run.policy,
        "profile": (run.spec.get("search") or {}).get("profile"),
        "direction": run.direction,
        "seed": run.seed,
        "n_nodes": len(nodes),
        "n_evaluated": sum(1 for n in nodes if n.n_evals > 0 or n.status is NodeStatus.SUCCEEDED),
        "n_succeeded": count[NodeStatus.SUCCEEDED],
        "n_failed": count[NodeStatus.FAILED],  # rejected ones apart: never evaluated
        "n_rejected": count[NodeStatus.REJECTED],
        # held for a person's approval: not finished, and not in flight either
        "n_in_flight": sum(not n.status.is_finished() for n in nodes) - len(held),
        "n_waiting": len(held),
        "waiting": held,
        "baseline_score": root.score if root and root.status is NodeStatus.SUCCEEDED else None,
        "best_score": best.score if best else None,
        "best_node": best.id if best else None,
        "improvement": _improvement(root, best, run.maximize),
        "holdout": [
            {"node": e.node_id, "score": e.score, "ok": e.ok, "error": e.error} for e in holdout
        ],
        "guard": {
            "runs": len(guard),
            "seconds": round(sum(e.duration for e in guard), 3),
            "nodes": [
                {"node": e.node_id, "score": e.score, "ok": e.ok, "error": e.error} for e in guard
            ],
        },
        "alarms": [{"node": n.id, **(n.alarm or {})} for n in nodes if n.alarm is not None],
        "gain": _gain(evals, nodes, root, best, run),
        "final_holdout": final_holdout(holdout, nodes, best, run),
        "wall_seconds": round(run.wall_used, 3),
        "sandbox_seconds": round(store.sandbox_seconds(run.id), 3),
        "created_at": run.created_at,
        "parent_run": run.parent_run,
        "parent_node": run.parent_node,
        **_own_work(nodes, evals, run),
    }
    if run.policy == "evolution":
        out["islands"] = islands(run, tree)
    out.update(learning(store, run, nodes))
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


def waiting(store: RunReads, run: RunInfo, nodes: list[Node]) -> list[int]:
    """Candidates held for a person's approval (``approve = "evaluate"``): coded, not the
    root, with no decision yet on their attempt."""
    if (run.spec.get("search") or {}).get("approve") != "evaluate":
        return []
    coded = {n.id: n.attempt for n in nodes if n.status is NodeStatus.CODED and n.id != 0}
    decided = store.decisions(run.id, coded) if coded else {}
    return sorted(n for n in coded if n not in decided)


def learning(store: RunReads, run: RunInfo, nodes: list[Node]) -> dict[str, Any]:
    """What the search learnt to skip or prefer: ``novelty`` (the threshold, and the
    candidates refused as near twins of evaluated ones, each an evaluation saved at
    least; with embeddings, their threshold and the twins they found); where a bandit
    picks the models, ``models`` (each model's candidates and mean reward, per role);
    where one picks the operators (``[search] operators = "bandit"``), ``operators``
    (:func:`operator_bandit`)."""
    from revtree.memory.records import TWIN

    stored = run.spec or {}  # read by section: a plugin policy need not import here
    search = stored.get("search") or {}
    twins = [n for n in nodes if n.error_kind == TWIN]
    novelty = {"threshold": search.get("novelty_threshold"), "evaluations_saved": len(twins)}
    if (stored.get("agents") or {}).get("embeddings_model"):
        novelty["embeddings_threshold"] = search.get("novelty_embeddings_threshold")
        novelty["by_embeddings"] = sum("embedding similarity" in (n.error or "") for n in twins)
    out: dict[str, Any] = {"novelty": novelty}
    if search.get("operators") == "bandit" and (ops := operator_bandit(run, nodes)):
        out["operators"] = ops
    if (stored.get("agents") or {}).get("model_selection") != "bandit":
        return out  # no model bandit (the default, "weights"): none to load, nor pydantic
    from revtree.orchestrator.model_choice import Setting, summary
    from revtree.tasks.agent_settings import AgentsSection

    try:
        agents = AgentsSection.model_validate(stored.get("agents") or {})
    except ValueError:  # a task stored by another version: no bandit to show
        return out
    setting = Setting.of(agents, int(search.get("seed", 0)), run.maximize)
    if setting.arms:
        out["models"] = summary(setting, store.events_since(run.id, 0, 10**9), nodes)
    return out


def operator_bandit(run: RunInfo, nodes: list[Node]) -> dict[str, Any] | None:
    """The operator bandit of a run whose policy has one (greedy, agentic, evolution),
    rebuilt from its finished nodes as a resume rebuilds it: per arm (the policy's
    ``operator_arms``), the candidates it was rewarded for and their mean reward. None
    for a policy without one. Loads the policies, for such runs only."""
    from revtree.orchestrator.policies import REGISTRY
    from revtree.orchestrator.policies.operators import replay, summary

    klass = REGISTRY.get(run.policy)
    arms = getattr(klass, "operator_arms", None)
    if klass is None or not arms:
        return None
    seed = int((run.spec.get("search") or {}).get("seed", 0))
    return summary(replay(arms, seed, klass.name, nodes, run.maximize))


def islands(run: RunInfo, tree: Tree) -> list[dict[str, Any]]:
    """The evolution policy's islands, rebuilt from the tree as a resume does (its saved
    state, then the tree replayed): per island its programs, its best, the MAP-Elites
    cells it has filled and each cell's elite."""
    from revtree.orchestrator.policies import make_policy  # the policies: evolution runs only
    from revtree.tasks.spec import TaskSpec

    policy: Any = make_policy(TaskSpec.stored(run.spec).search)
    policy.load_state(run.policy_state or {})
    policy.sync(tree)
    return [
        {
            "island": k,
            "programs": len(island.members),
            "best": island.best,
            "cells_filled": len(island.cells),
            "cells": [
                {"key": list(key), "node": node} for key, node in sorted(island.cells.items())
            ],
        }
        for k, island in enumerate(policy.islands)
    ]


def inherited(nodes: list[Node], run: RunInfo) -> set[int]:
    """Ids of the nodes a fork copied from its parent run (none for a run that is not a
    fork): copies keep their creation time, which predates the fork."""
    if run.parent_run is None:
        return set()
    return {n.id for n in nodes if n.created_at < run.created_at}


def _own_work(nodes: list[Node], evals: list[EvalResult], run: RunInfo) -> dict[str, Any]:
    """What this run added itself: its node count and best node, history left out, and
    the sandbox time of the history's evaluations (counted in ``sandbox_seconds``, as the
    history's nodes are in ``n_nodes`` and the budget; ``wall_seconds`` is this run's)."""
    old = inherited(nodes, run)
    own = [n for n in nodes if n.id not in old]
    best = Tree.of(own, run.maximize).best()
    return {
        "n_inherited": len(old),
        "n_new": len(own),
        "inherited_sandbox_seconds": round(sum(e.duration for e in evals if e.node_id in old), 3),
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
    "n_rejected",
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


def compare(store: RunReads, runs: list[RunInfo]) -> list[tuple[str, list[Any]]]:
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
        "alarm": n.alarm,
    }


def recommendation_note(s: dict[str, Any]) -> str | None:
    """Why the recommended node is not the best on dev, when alarms moved it."""
    if not s["alarms"]:
        return None
    nodes = ", ".join(str(a["node"]) for a in s["alarms"][:5])
    more = "" if len(s["alarms"]) <= 5 else f" and {len(s['alarms']) - 5} more"
    return (
        f"node(s) {nodes}{more} carry a drift alarm (see `revtree show {s['run_id']} --json`, "
        f'"alarms") and are never recommended; node {s["best_node"]} is the best without one'
    )


def final_holdout(
    holdout: list[EvalResult], nodes: list[Node], best: Node | None, run: RunInfo
) -> dict[str, Any] | None:
    """The recommended node's final holdout against the baseline's (their current
    attempts): ``better`` is False where it is no better beyond ``[trust] tolerance``,
    and the recommendation is then not an improvement; None where either is missing."""
    if best is None or best.id == 0:
        return None
    attempts = {n.id: n.attempt for n in nodes}

    def score(node_id: int) -> float | None:
        runs = [e for e in holdout if e.node_id == node_id and e.attempt == attempts[node_id]]
        return runs[-1].score if runs and runs[-1].ok else None

    mine, base = score(best.id), score(0)
    if mine is None or base is None:
        return None
    tolerance = float(run.spec.get("trust", {}).get("tolerance", 0.02))
    better = final_better(mine, base, run.maximize, tolerance)
    out: dict[str, Any] = {"node": best.id, "score": mine, "baseline": base, "better": better}
    if not better:
        out["message"] = (
            f"node {best.id}'s final holdout ({mine:.6g}) is no better than the baseline's "
            f"({base:.6g}, tolerance {tolerance:.0%}): not an improvement"
        )
    return out


def gain_text(s: dict[str, Any]) -> str:
    """The improvement of the best, with its noise, in words; never "better" where the
    final holdout says it is not."""
    g, imp = s.get("gain"), s["improvement"]
    if s["best_node"] == 0:
        return " (the baseline: no candidate beat it)"
    if (final := s.get("final_holdout")) is not None and not final["better"]:
        return f", on dev only: {final['message']}"
    pct = f"{imp:+.2%} " if imp is not None else ""
    if g is None or g["beyond_noise"] is None:
        return f" ({pct}better, noise not measured)" if imp is not None else ""
    spread = f"{g['delta']:+.4g} ± {g['stderr']:.2g} (n={g['n_best']} vs {g['n_baseline']})"
    if g["beyond_noise"]:
        return f" ({pct}better: {spread})"
    return f", within the evaluator's noise: {spread}; not a demonstrated improvement"


def _gain(
    evals: list[EvalResult], nodes: list[Node], root: Node | None, best: Node | None, run: RunInfo
) -> dict[str, Any] | None:
    """The best's gain over the baseline with its noise (see ``orchestrator.trust``):
    the best's evaluations that selected it (its first ``repeats``) are left out when it
    has later ones, unless every score of the best and every score of the baseline
    repeat their node's bit for bit (no noise was seen: nothing to select on)."""
    if root is None or best is None or best.id == root.id:
        return None
    repeats = int(run.spec.get("evaluate", {}).get("repeats", 1))

    def full(node: Node) -> list[EvalResult]:
        return [
            e
            for e in evals
            if e.node_id == node.id and e.stage == FULL and e.attempt == node.attempt and e.ok
        ]

    mine = full(best)
    later = [e for e in mine if e.repeat >= repeats]
    scores = [e.score for e in (later or mine) if e.score is not None]
    base = [e.score for e in full(root) if e.score is not None]
    exact = [e.score for e in mine if e.score is not None]
    if later and len(set(exact)) == 1 and len(base) > 1 and len(set(base)) == 1:
        scores = exact
    g = gain(scores, base, run.maximize)
    if g is None:
        return None
    out = g.to_json()
    out["post_selection"] = bool(later) and scores is not exact
    return out


def _improvement(root: Node | None, best: Node | None, maximize: bool) -> float | None:
    """Relative gain of the best over the baseline, positive when better."""
    if root is None or best is None or root.score in (None, 0) or best.score is None:
        return None
    assert root.score is not None
    gain = (best.score - root.score) / abs(root.score)
    return directed(gain, maximize)


def transcripts(store: RunReads, run_id: str, node_id: int | None = None) -> dict[str, Any]:
    """The prompts and replies of a run's model calls (one node's, when given), in order:
    ``{"prefixes": {sha: text}, "calls": [...]}``. Each call names its node, attempt,
    role and number within them (``call``: 2 is the coder's repair round, say); its
    ``prefix`` is a key of ``prefixes`` (stored once per run, shared by every call)."""
    from revtree.agents.llm.meter import read_prompt, unpack

    prefixes: dict[str, str] = {}
    counts: dict[tuple[int | None, int, str], int] = {}
    out = []
    for c in store.llm_calls(run_id):
        p = read_prompt(c.prompt)
        sha = p.get("prefix_sha")
        if sha and p.get("prefix") is not None:
            prefixes.setdefault(sha, p["prefix"])
        key = (c.node_id, int(p.get("attempt", 1)), c.role)
        counts[key] = counts.get(key, 0) + 1
        if node_id is not None and c.node_id != node_id:
            continue
        out.append(
            {
                "node": c.node_id,
                "attempt": key[1],
                "role": c.role,
                "call": counts[key],
                "model": c.model,
                "ok": c.ok,
                "error": c.error,
                "input_tokens": c.input_tokens,
                "output_tokens": c.output_tokens,
                "latency": round(c.latency, 3),
                "system": p.get("system"),
                "prefix": sha,
                "user": p.get("user"),
                "response": unpack(c.response),
            }
        )
    used = {c["prefix"] for c in out}
    return {"prefixes": {k: v for k, v in prefixes.items() if k in used}, "calls": out}


def transcript_renderables(data: dict[str, Any], with_prefix: bool = False) -> list[Any]:
    """``transcripts(...)`` for a terminal, by node, attempt and role: a rule per call,
    then its system and user parts and the reply, as plain text (no markup is read in
    them). The shared prefix is printed once, first, with ``with_prefix``."""
    from rich.rule import Rule
    from rich.text import Text

    out: list[Any] = []
    if with_prefix:
        for sha, text in data["prefixes"].items():
            out += [Rule(f"shared prefix {sha}", style="cyan"), Text(text)]
    calls = sorted(data["calls"], key=lambda c: (c["node"] is None, c["node"] or 0, c["attempt"]))
    if not calls:
        out.append(Text("(no model calls recorded)"))
    for c in calls:
        where = f"node {c['node']} attempt {c['attempt']}" if c["node"] is not None else "run"
        state = "ok" if c["ok"] else "FAILED"
        head = f"{where} · {c['role']} call {c['call']} · {c['model']} · {state}"
        out.append(Rule(Text(head), style="bold" if c["ok"] else "bold red"))
        tokens = f"{c['input_tokens']} tokens in, {c['output_tokens']} out, {c['latency']:.1f} s"
        out.append(Text(tokens, style="dim"))
        for part in ("system", "user"):
            if c[part]:
                out += [Text(f"── {part} ──", style="cyan"), Text(c[part])]
        if c["prefix"] and not with_prefix:
            out.append(
                Text("(the shared prefix: task, goal, baseline code; --json has it)", style="dim")
            )
        if c["error"]:
            out += [Text("── error ──", style="red"), Text(c["error"])]
        if c["response"] is not None:
            out += [Text("── reply ──", style="green"), Text(c["response"])]
    return out
