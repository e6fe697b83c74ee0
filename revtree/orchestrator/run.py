"""A run's creation and its files (whether the process that claims it lives: ``alive``,
from ``orchestrator.liveness``)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
import uuid
from pathlib import Path

from revtree.agents.base import Proposal
from revtree.agents.knob_text import read_knobs
from revtree.errors import TaskSpecError
from revtree.memory import GitStore, Node, NodeStatus, RunInfo, Store
from revtree.memory.gitstore import HOLDOUT_REF, file_mode
from revtree.memory.home import revtree_home
from revtree.memory.recover import write_run_file
from revtree.orchestrator.liveness import alive
from revtree.tasks import TaskSpec, code_files, holdout_files
from revtree.tasks.load import TASK_FILE, link_problem, source_dir

ROOT_TICKET = "root"  # the pipeline thread of the baseline (node 0)


@dataclasses.dataclass(frozen=True)
class RunPaths:
    home: Path
    run_id: str

    @property
    def dir(self) -> Path:
        return self.home / "runs" / self.run_id

    @property
    def repo(self) -> Path:
        return self.dir / "repo.git"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def work(self) -> Path:
        return self.dir / "work"


def read_source(spec: TaskSpec, paths: list[str]) -> tuple[dict[str, bytes], dict[str, int]]:
    """The files at ``paths`` in the task's source folder (a symlink as its target) and
    their git modes. Refuses (:class:`TaskSpecError`, naming every such path) files over
    ``max_file_size`` and symlinks that loop, are absolute or point outside the folder."""
    src = source_dir(spec)
    problems, refused = [], []
    for rel in paths:
        p = src / rel
        if p.is_symlink():
            if (problem := link_problem(src, rel)) is not None:
                problems.append(problem)
                refused.append(rel)
        elif (size := p.stat().st_size) > spec.max_file_size:
            limit = spec.max_file_size
            problems.append(f"{rel!r} is {_mb(size)}, over max_file_size ({_mb(limit)})")
            refused.append(rel)
    if problems:
        task = Path(spec.root) / TASK_FILE
        raise TaskSpecError(
            f"{task if task.is_file() else spec.root}: the source folder {src} holds what a run "
            "cannot take:\n  "
            + "\n  ".join(problems)
            + f"\nKeep them out of the run with exclude = {json.dumps(refused)} in "
            f"{TASK_FILE} (or, for a big file that belongs in it, raise max_file_size, "
            'e.g. max_file_size = "500m")'
        )
    files, modes = {}, {}
    for rel in paths:
        p = src / rel
        modes[rel] = file_mode(p)
        files[rel] = os.readlink(p).encode() if p.is_symlink() else p.read_bytes()
    return files, modes


def _mb(size: int) -> str:
    """``size`` bytes in words: ``200.0 MB``, ``2.0 kB``, ``12 bytes``."""
    if size >= 2**20:
        return f"{size / 2**20:.1f} MB"
    return f"{size / 2**10:.1f} kB" if size >= 2**10 else f"{size} bytes"


def create_run(
    store: Store, spec: TaskSpec, home: Path | None = None, run_id: str | None = None
) -> RunInfo:
    """Snapshot the task's code as the root commit and record a new run with its root node."""
    home = home or revtree_home()
    run_id = run_id or f"{spec.name}-{uuid.uuid4().hex[:6]}"
    paths = RunPaths(home, run_id)
    files, modes = read_source(spec, code_files(spec))  # refused before anything is made
    hfiles, hmodes = read_source(spec, holdout_files(spec))
    git = GitStore(paths.repo)
    root_sha = git.commit_files(files, f"{spec.name}: baseline (untouched source)", modes)
    git.set_node_ref(0, root_sha)
    if spec.holdout and spec.holdout.files:
        git.set_ref(HOLDOUT_REF, git.commit_files(hfiles, "holdout files", hmodes))
    git.close()
    root = Node(
        run_id,
        0,
        None,
        "baseline",
        NodeStatus.REVIEWED,
        commit=root_sha,
        thread_id=ROOT_TICKET,
        created_at=time.time(),
        proposal=Proposal(
            "baseline: the untouched source", read_knobs(spec.knobs, files)
        ).to_json(),
    )
    stored = spec.model_dump(mode="json")
    write_run_file(paths.dir, run_id, store.url, stored)  # what `doctor` rebuilds the row from
    return store.create_run(  # the run and its root node in one transaction
        run_id,
        spec.name,
        spec.search.policy,
        spec.evaluate.direction,
        spec.search.seed,
        stored,
        root=(root, ("select", "node 0: baseline (the untouched source)", None)),
    )


def resume_hint(run_id: str, baseline_failed: bool) -> str:
    """What continues a run that failed, once its cause is fixed: where the baseline
    could not be scored, the fix is in the evaluator or task.toml, which a plain resume
    does not read again (the run keeps its own copy)."""
    if baseline_failed:
        return (
            f"fix the evaluator or task.toml, then `revtree resume {run_id} --reload` "
            "(it reads them again)"
        )
    return f"fix it, then `revtree resume {run_id}`"


def claim(store: Store, run_id: str) -> RunInfo:
    """Claim the run for this process (refused while a live process holds it)."""
    return store.claim_run(run_id, os.getpid(), socket.gethostname(), alive)
