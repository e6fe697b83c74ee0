"""The dashboard's JSON, built from the Store and the report helpers of ``revtree show``
and ``revtree compare`` (``orchestrator.commands.report``): one function per route of
docs/dashboard.md. Errors are :class:`~revtree.errors.RevtreeError` (the app turns a
missing run or node into 404, the rest into 400)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer
from sqlalchemy import select
from sqlalchemy.engine import make_url

from revtree.errors import RevtreeError
from revtree.memory import RunInfo, Store
from revtree.memory.db import transaction
from revtree.memory.gitstore import GitStore
from revtree.memory.home import revtree_home
from revtree.memory.models import RUNS
from revtree.memory.records import Node, Score
from revtree.orchestrator.commands.report import (
    compare,
    llm_spend,
    node_json,
    summarize,
    transcripts,
)
from revtree.orchestrator.run import RunPaths
from revtree.orchestrator.tree import Tree
from revtree.tasks import TaskSpec
from revtree.web.queries import SummaryView, last_seq, node_columns, run_marks

DIFF_LIMIT = 400_000  # characters of a diff rendered; the rest is cut with a note


def hidden_password(url: str) -> str:
    """The database URL with its password masked (it reaches the page)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy reads: say nothing of it
        return "(the database)"


class NotFound(RevtreeError):
    """An unknown run or node (HTTP 404)."""


class Views:
    """The JSON of every GET route, over one Store. Run summaries are cached per run
    until the run changes (a new event, a new ``updated_at`` or a new model call)."""

    def __init__(self, store: Store, home: Path | None = None) -> None:
        self.store = store
        self.home = home  # the revtree home of the runs' git stores (None: $REVTREE_HOME)
        self.lean = SummaryView(store)
        self._cache: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def run(self, run_id: str) -> RunInfo:
        """The run (an exact id, a unique prefix, or 'last'), else :class:`NotFound`."""
        try:
            return self.store.get_run(run_id)
        except RevtreeError as e:  # RunNotFound, or an ambiguous prefix
            url = self.store.url
            raise NotFound(str(e).replace(url, hidden_password(url))) from None

    def summary(self, run: RunInfo, mark: tuple[Any, ...] | None = None) -> dict[str, Any]:
        """``summarize(store, run)`` (``revtree show --json``), cached until the run moves.

        ``mark``: the run's mark as read before ``run`` was. Without it the mark is read
        here and, on a miss, the run again after it: what is cached under a mark is
        never older than the mark (a run stopped between a read of it and the read of
        its mark was cached as running under the mark of its stop, for good)."""
        reread = mark is None
        if mark is None:
            mark = run_marks(self.store, run.id).get(run.id, ())
        with self._lock:
            hit = self._cache.get(run.id)
        if hit is not None and hit[0] == mark:
            return hit[1]
        if reread:
            run = self.run(run.id)  # (deleted meanwhile: NotFound)
        data = summarize(self.lean, run)
        with self._lock:
            self._cache[run.id] = (mark, data)
        return data

    # -- routes ---------------------------------------------------------------------
    def runs(self) -> dict[str, Any]:
        marks = run_marks(self.store)
        out = []
        for run in sorted(self.store.list_runs(), key=lambda r: r.created_at, reverse=True):
            s = self.summary(run, marks.get(run.id, ()))
            on_best = [h for h in s["holdout"] if h["node"] == s["best_node"] and h["ok"]]
            out.append(
                {
                    "id": run.id,
                    "task": run.task_name,
                    "status": run.status.value,
                    "reason": run.reason,
                    "policy": run.policy,
                    "direction": run.direction,
                    "best_score": s["best_score"],
                    "best_node": s["best_node"],
                    "baseline_score": s["baseline_score"],
                    "holdout_score": on_best[-1]["score"] if on_best else None,
                    "n_nodes": s["n_nodes"],
                    "usd": s["llm"]["usd"],
                    "created_at": run.created_at,
                    "updated_at": run.updated_at,
                    "parent_run": run.parent_run,
                    "parent_node": run.parent_node,
                    "n_alarms": len(s["alarms"]),
                }
            )
        return {"runs": out}

    def run_detail(self, run_id: str) -> dict[str, Any]:
        run = self.run(run_id)
        s = dict(self.summary(run))
        b = run.spec.get("budget") or {}  # the stored spec: a validated TaskSpec's dump
        twins = (s.get("novelty") or {}).get("evaluations_saved") or 0
        s["maximize"] = run.maximize
        s["budget"] = {
            # near twins are refused unevaluated and not counted toward max_nodes
            "nodes": {"used": s["n_nodes"] - twins, "max": b.get("max_nodes"), "twins": twins},
            "wall": {"used": s["wall_seconds"], "max": b.get("max_wall")},
            "sandbox_seconds": {"used": s["sandbox_seconds"], "max": b.get("max_sandbox_seconds")},
            "usd": {"used": s["llm"]["usd"], "max": b.get("max_usd")},
        }
        s["approve"] = (run.spec.get("search") or {}).get("approve") == "evaluate"
        s["last_seq"] = last_seq(self.store, run.id)
        s["forks"] = self.forks(run.id)
        return s

    def forks(self, run_id: str) -> list[dict[str, Any]]:
        """The runs forked from ``run_id``: ``{"id", "node", "status"}``, oldest first."""
        with transaction(self.store.engine) as conn:
            rows = conn.execute(
                select(RUNS.c.id, RUNS.c.parent_node, RUNS.c.status)
                .where(RUNS.c.parent_run == run_id)
                .order_by(RUNS.c.created_at, RUNS.c.id)
            ).all()
        return [{"id": r.id, "node": r.parent_node, "status": r.status} for r in rows]

    def nodes(self, run_id: str, since: int | None = None) -> dict[str, Any]:
        run = self.run(run_id)
        repeats = int(run.spec.get("evaluate", {}).get("repeats", 1))
        return node_columns(self.store, run.id, run.maximize, repeats, since)

    def node_of(self, run: RunInfo, node_id: int) -> Node:
        """The node, else :class:`NotFound`."""
        try:
            return self.store.node(run.id, node_id)
        except RevtreeError:
            raise NotFound(f"run {run.id} has no node {node_id}") from None

    def node(self, run_id: str, node_id: int, against: str = "parent") -> dict[str, Any]:
        run = self.run(run_id)
        n = self.node_of(run, node_id)
        out = node_json(n)
        proposal = n.proposal or {}
        out.update(
            hypothesis=proposal.get("hypothesis"),
            plan=proposal.get("plan"),
            review=n.review,
            lesson=n.lesson,
            attempt=n.attempt,
            extra_parents=list(n.extra_parents),
            created_at=n.created_at,
            finished_at=n.finished_at,
        )
        out.update(self.diff(run, n.id, n.parent_id, n.commit, against))
        out["evaluations"] = [
            {**e.__dict__, "gpus": list(e.gpus)} for e in self.store.evaluations(run.id, n.id)
        ]
        calls = [c for c in self.store.llm_calls(run.id) if c.node_id == n.id]
        out["llm_calls"] = [
            {
                "role": c.role,
                "model": c.model,
                "tokens": c.input_tokens + c.output_tokens,
                "input_tokens": c.input_tokens,
                "output_tokens": c.output_tokens,
                "cost_usd": c.cost_usd,
                "latency": c.latency,
                "ok": c.ok,
                "error": c.error,
            }
            for c in calls
        ]
        out["llm"] = llm_spend(calls)
        out["transcript"] = transcripts(self.store, run.id, n.id)
        return out

    def diff(
        self, run: RunInfo, node_id: int, parent: int | None, commit: str | None, against: str
    ) -> dict[str, Any]:
        """The node's diff against its parent or the root, as Pygments HTML (escaped)."""
        if against not in ("parent", "root"):
            raise RevtreeError("against must be 'parent' or 'root'")
        base_id = (node_id if parent is None else parent) if against == "parent" else 0
        base = self.store.node(run.id, base_id)
        empty = {"diff_html": "", "diff_stat": [], "diff_against": base_id}
        if not (commit and base.commit):
            return {**empty, "diff_note": "no commit yet"}
        repo = RunPaths(self.home or revtree_home(), run.id).repo
        if not repo.is_dir():
            return {**empty, "diff_note": f"no git store at {repo}"}
        try:  # a commit gone from the store, a broken repo: a note, not a 500
            git = GitStore(repo)
            try:
                text = git.diff(base.commit, commit)
            finally:
                git.close()
        except Exception as e:
            said = str(getattr(e, "stderr", "") or e)  # git's own words first
            lines = said.replace("stderr: ", "").strip().strip("'").strip().splitlines()
            why = (lines or [type(e).__name__])[0][:300]
            return {**empty, "diff_note": f"no diff: {why}"}
        # git's bytes that are not UTF-8 come back as lone surrogates, which no JSON
        # answer can encode: make them U+FFFD
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        text, note = text if text.strip() else "", None
        if len(text) > DIFF_LIMIT:
            text, note = text[:DIFF_LIMIT], f"cut at {DIFF_LIMIT} characters"
        html = highlight(text, DiffLexer(), HtmlFormatter(nowrap=True)) if text else ""
        return {
            "diff_html": html,
            "diff_stat": diff_stat(text),
            "diff_against": base_id,
            "diff_note": note,
        }

    def compare(self, ids: list[str]) -> dict[str, Any]:
        if len(ids) < 1:
            raise RevtreeError("give runs=A,B")
        runs = [self.run(i) for i in ids]
        rows = compare(self.lean, runs)  # the same summaries, from lean reads
        return {
            "runs": [r.id for r in runs],
            "rows": [[k, v] for k, v in rows],
            "curves": {r.id: self.curve(r) for r in runs},
        }

    def curve(self, run: RunInfo) -> list[list[float]]:
        """[seconds since the run's start, best score so far] at each improvement."""
        nodes = [n for n in self.lean.nodes(run.id) if n.finished_at is not None]
        nodes.sort(key=lambda n: (n.finished_at or 0.0, n.id))
        out: list[list[float]] = []
        best: Score | None = None
        for n in nodes:
            score = n.score_of(run.maximize)
            if score.is_valid and (best is None or score > best):
                best = score
                assert n.finished_at is not None and n.score is not None
                out.append([round(max(0.0, n.finished_at - run.created_at), 3), n.score])
        return out

    def islands(self, run_id: str) -> dict[str, Any]:
        """The evolution policy's islands and cells, rebuilt from the tree as a resume
        does (its saved state, then the tree replayed); empty for other policies."""
        run = self.run(run_id)
        empty: dict[str, Any] = {"islands": [], "cells": []}
        if run.policy != "evolution":
            return empty
        from revtree.orchestrator.policies import make_policy

        spec = TaskSpec.stored(run.spec)
        policy: Any = make_policy(spec.search)
        policy.load_state(run.policy_state or {})
        tree = Tree.of(self.store.nodes(run.id), run.maximize)
        policy.sync(tree)
        islands, cells = [], []
        for k, island in enumerate(policy.islands):
            islands.append({"id": k, "nodes": list(island.members), "best": island.best})
            for key, node in sorted(island.cells.items()):
                cells.append(
                    {
                        "island": k,
                        "key": list(key),
                        "node": node,
                        "score": tree.nodes[node].score if node in tree.nodes else None,
                    }
                )
        return {"islands": islands, "cells": cells}


def diff_stat(text: str) -> list[dict[str, Any]]:
    """Per file of a unified diff: ``{"file", "added", "removed"}``."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        if line.startswith("diff --git "):
            out.append({"file": line.split(" b/", 1)[-1], "added": 0, "removed": 0})
        elif out and line.startswith("+") and not line.startswith("+++"):
            out[-1]["added"] += 1
        elif out and line.startswith("-") and not line.startswith("---"):
            out[-1]["removed"] += 1
    return out
