"""Check and repair the memory (``doctor``): the SQL rows against the per-run git
stores and the processes that claim runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from revtree.memory import GitStore, NodeStatus, RunInfo, RunStatus, Store
from revtree.memory.gitstore import NODE_REF
from revtree.orchestrator.run import RunPaths, alive

HAS_COMMIT = (
    NodeStatus.CODED,
    NodeStatus.REVIEWED,
    NodeStatus.EVALUATING,
    NodeStatus.SUCCEEDED,
)
CRASHED = "crashed (found by doctor)"


@dataclasses.dataclass
class Finding:
    run: str
    kind: str
    message: str
    repaired: bool = False


def doctor(
    store: Store, home: Path, run_id: str | None = None, repair: bool = False
) -> list[Finding]:
    """Check the database against the git stores and the processes (and fix what can be
    fixed with ``repair``). An empty list means all is well."""
    runs = [store.get_run(run_id)] if run_id else store.list_runs()
    findings: list[Finding] = []
    for run in runs:
        findings.extend(_check_run(store, home, run, repair))
    return findings


def _check_run(store: Store, home: Path, run: RunInfo, repair: bool) -> list[Finding]:
    out: list[Finding] = []

    def found(kind: str, message: str, fix: Any = None) -> None:
        f = Finding(run.id, kind, message)
        if repair and fix is not None:
            fix()
            f.repaired = True
        out.append(f)

    if run.status is RunStatus.RUNNING and run.pid and not alive(run.pid, run.host):
        pid, host = run.pid, run.host
        found(
            "dead-run",
            f"run is marked running but its process {pid} on {host} is gone",
            lambda: store.update_run(
                run.id,
                ("run", f"run failed: {CRASHED}; `revtree resume` continues", None),
                status=RunStatus.FAILED,
                reason=CRASHED,
                pid=None,
            ),
        )

    nodes = {n.id: n for n in store.nodes(run.id)}
    if 0 not in nodes:  # cannot happen since runs are created in one transaction
        found("no-root", "run has no root node (node 0): it cannot be resumed; `revtree rm` it")
    stray = sorted({e.node_id for e in store.evaluations(run.id)} - nodes.keys())
    for node_id in stray:
        found(
            "orphan-evaluation",
            f"evaluations of node {node_id}, which does not exist",
            lambda node_id=node_id: store.delete_evaluations(run.id, node_id, "doctor --repair"),
        )

    for n in nodes.values():
        if n.commit is None and n.status in HAS_COMMIT:
            found("no-commit", f"node {n.id} is {n.status.value} but has no commit")

    repo = RunPaths(home, run.id).repo
    if not (repo / "HEAD").is_file():
        found("missing-repo", f"the git store {repo} is missing")
        return out
    git = GitStore(repo)
    try:
        refs = git.node_refs()
        for n in nodes.values():
            if n.commit is None:
                continue
            if not git.has_commit(n.commit):
                found("missing-commit", f"commit {n.commit[:10]} of node {n.id} is not in {repo}")
                continue
            sha = n.commit
            if n.id not in refs:
                found(
                    "missing-ref",
                    f"node {n.id} has no ref {NODE_REF.format(n.id)}",
                    lambda i=n.id, s=sha: git.set_node_ref(i, s),
                )
            elif refs[n.id] != sha:
                found(
                    "wrong-ref",
                    f"ref of node {n.id} points at {refs[n.id][:10]}, not {sha[:10]}",
                    lambda i=n.id, s=sha: git.set_node_ref(i, s),
                )
        for ref_id in sorted(refs.keys() - nodes.keys()):
            found(
                "stray-ref",
                f"ref {NODE_REF.format(ref_id)} has no node",
                lambda r=ref_id: git.repo.git.update_ref("-d", NODE_REF.format(r)),
            )
    finally:
        git.close()
    return out
