"""Export a node as a branch of your repository.

``export_branch`` writes one commit on top of the user's HEAD through a temporary index
file, so the user's working tree and index are never touched.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
from pathlib import Path

from revtree.errors import RevtreeError
from revtree.memory import GitStore, Node, RunInfo, Store
from revtree.orchestrator.commands.fork import lineage
from revtree.orchestrator.run import RunPaths
from revtree.tasks import TaskSpec
from revtree.tasks.load import source_dir


@dataclasses.dataclass(frozen=True)
class Exported:
    branch: str
    commit: str
    parent: str
    files: list[str]  # paths in the user's repository that the commit changes


def _git(repo: Path, *args: str, env: dict[str, str] | None = None, stdin: str = "") -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=stdin.encode(),
        capture_output=True,
        env=env,
    )
    if proc.returncode != 0:
        raise RevtreeError(
            f"git {' '.join(args)} failed in {repo}: {proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout.decode().strip()


def _hypothesis(node: Node) -> str:
    text = str((node.proposal or {}).get("hypothesis") or "").strip()
    return text.splitlines()[0] if text else "-"


def _score(node: Node) -> str:
    return "-" if node.score is None else f"{node.score:.6g}"


def lineage_message(run: RunInfo, nodes: dict[int, Node], node_id: int) -> str:
    """A commit message: a summary line, then one line per node from the root to the node."""
    node = nodes[node_id]
    lines = [
        f"revtree: node {node_id} of run {run.id} (score {_score(node)})",
        "",
        f"Lineage in run {run.id} (task {run.task_name}), root first:",
    ]
    for n in lineage(nodes, node_id):
        lines.append(
            f"- node {n.id} [{n.operator}] {n.status.value}, score {_score(n)}: {_hypothesis(n)}"
        )
    return "\n".join(lines) + "\n"


def export_branch(
    store: Store, run_id: str, node_id: int, repo: Path, branch: str, home: Path
) -> Exported:
    """Put the node's changes (against the run's root) on a new branch of ``repo``: one
    commit on top of its HEAD, written without touching its working tree or index."""
    run = store.get_run(run_id)
    nodes = {n.id: n for n in store.nodes(run.id)}
    node = nodes.get(node_id)
    if node is None:
        raise RevtreeError(f"run {run.id} has no node {node_id}")
    root = nodes.get(0)
    if node.commit is None or root is None or root.commit is None:
        raise RevtreeError(f"node {node_id} of run {run.id} has no commit")
    repo = Path(repo)
    if not repo.is_dir():
        raise RevtreeError(f"repository {repo} does not exist")
    top = Path(_git(repo, "rev-parse", "--show-toplevel")).resolve()
    head = subprocess.run(
        ["git", "-C", str(top), "rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
        capture_output=True,
        text=True,
    )
    if head.returncode != 0:
        raise RevtreeError(f"repository {top} has no HEAD commit; commit something first")
    parent = head.stdout.strip()
    if subprocess.run(
        ["git", "check-ref-format", "--branch", branch], capture_output=True
    ).returncode:
        raise RevtreeError(f"{branch!r} is not a valid branch name")
    exists = subprocess.run(
        ["git", "-C", str(top), "show-ref", "--verify", "--quiet", f"refs/heads/{branch}"]
    )
    if exists.returncode == 0:
        raise RevtreeError(f"branch {branch!r} already exists in {top}")
    src = source_dir(TaskSpec.stored(run.spec))
    try:
        rel = src.relative_to(top)
    except ValueError:
        raise RevtreeError(
            f"the task's source folder {src} is not inside the repository {top}"
        ) from None
    prefix = "" if str(rel) == "." else rel.as_posix() + "/"

    git = GitStore(RunPaths(home, run.id).repo)
    try:
        if not git.has_commit(node.commit):
            raise RevtreeError(f"commit {node.commit[:10]} of node {node_id} is missing")
        before, after = git.list_files(root.commit), git.list_files(node.commit)
        changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
        with tempfile.TemporaryDirectory(prefix="revtree-export-") as tmp:
            env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
            if not _has_identity(top):
                env.update(
                    GIT_AUTHOR_NAME="revtree",
                    GIT_AUTHOR_EMAIL="revtree@localhost",
                    GIT_COMMITTER_NAME="revtree",
                    GIT_COMMITTER_EMAIL="revtree@localhost",
                )
            _git(top, "read-tree", "HEAD", env=env)
            rows = []
            for path in changed:
                if path in after:
                    binsha, mode = after[path]
                    data = git.blob(binsha)
                    sha = _hash_object(top, data)
                    rows.append(f"{mode:o} {sha}\t{prefix}{path}")
                else:
                    rows.append(f"0 {'0' * 40}\t{prefix}{path}")
            if rows:
                _git(top, "update-index", "--index-info", env=env, stdin="\n".join(rows) + "\n")
            tree = _git(top, "write-tree", env=env)
            message = lineage_message(run, nodes, node_id)
            commit = _git(top, "commit-tree", tree, "-p", parent, "-F", "-", env=env, stdin=message)
        _git(top, "branch", branch, commit)
    finally:
        git.close()
    return Exported(branch, commit, parent, [prefix + p for p in changed])


def _has_identity(top: Path) -> bool:
    return all(
        subprocess.run(["git", "-C", str(top), "config", key], capture_output=True).returncode == 0
        for key in ("user.name", "user.email")
    )


def _hash_object(top: Path, data: bytes) -> str:
    proc = subprocess.run(
        ["git", "-C", str(top), "hash-object", "-w", "--stdin"],
        input=data,
        capture_output=True,
    )
    if proc.returncode != 0:
        raise RevtreeError(f"git hash-object failed in {top}: {proc.stderr.decode().strip()}")
    return proc.stdout.decode().strip()
