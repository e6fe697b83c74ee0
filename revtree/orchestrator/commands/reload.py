"""Reload: a run takes up its task's fixed evaluator or task.toml (``resume --reload``).

A run keeps its own copy of its task: the spec in SQL (``runs.spec``) and the protected
files in its git store (the root commit, or ``refs/revtree/protected`` after a reload or
a ``fork --task``), overlaid fresh on every evaluation. A fix made in the task folder
after the run was created is therefore not seen by a plain ``resume``. :func:`reload_task`
reads the folder the run was created from (``spec.root``) again and:

- refuses a change of metric or direction once any node has a score: the old scores
  would not compare with the new ones (``revtree fork --task`` starts a run that
  evaluates with the new task); before any score (a baseline that failed), it is the fix;
- keeps what belongs to the run rather than to the task: its name, search, budget and
  runner, and the sandbox backend and the agents' mode, model and base URL (what the
  command line sets); task.toml's differences there are reported as not applied;
- commits the protected (and holdout) files read again as the run's refs; the earlier
  commits stay in the store, named by ``refs/revtree/reloaded/N/...``;
- stores the new spec, with one ``run`` event that lists what changed (settings, and a
  short diff of each protected file).

The tree is left alone: the root commit is the run's baseline, and editable files
changed in the folder since are not taken (a new run takes them). Nothing recorded is
lost: earlier evaluations stay as they were; a baseline whose last evaluation failed is
evaluated again on resume, as its next attempt; nodes scored by the earlier evaluator
keep their scores (the event says how many).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from revtree.errors import RevtreeError, RunBusy
from revtree.memory import GitStore, RunInfo, RunStatus, Store
from revtree.memory.gitstore import HOLDOUT_REF, PROTECTED_REF
from revtree.orchestrator.run import RunPaths, alive, read_source
from revtree.tasks import TaskSpec, code_files, holdout_files, load_task, matches

RUN_SECTIONS = ("name", "search", "budget", "runner", "root")  # the run's, not the task's
RUN_KEYS = {"sandbox": ("backend",), "agents": ("mode", "model", "base_url")}
DIFF_LINES = 12  # per protected file, in the printed summary (the event keeps 200)


@dataclass
class Reloaded:
    """What a reload found: ``settings`` (``key: old -> new``), ``files`` (a diff per
    protected file that changed), ``kept`` (task.toml differences in the run's own
    settings, not applied) and ``scored`` (nodes scored by the earlier evaluator)."""

    run_id: str
    folder: str
    settings: list[str] = field(default_factory=list)
    files: dict[str, list[str]] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)
    scored: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.settings or self.files)

    def lines(self) -> list[str]:
        """The summary to print."""
        if not self.changed:
            out = [f"run {self.run_id}: the task in {self.folder} is as the run has it"]
        else:
            out = [f"run {self.run_id}: task reloaded from {self.folder}"]
            out += [f"  {s}" for s in self.settings]
            for path, diff in self.files.items():
                out.append(f"  {path}:")
                out += [f"    {d}" for d in diff[:DIFF_LINES]]
                if len(diff) > DIFF_LINES:
                    out.append(f"    … {len(diff) - DIFF_LINES} more diff lines")
        out += [f"  not applied (the run's own; `revtree fork` changes it): {k}" for k in self.kept]
        if self.scored and self.changed:
            out.append(
                f"  {self.scored} node(s) keep their scores from the earlier task; new "
                "evaluations use the reloaded one"
            )
        return out


def reload_task(store: Store, run_id: str, home: Path) -> Reloaded:
    """Read the run's task folder again and store what changed (see the module)."""
    run = store.get_run(run_id)
    if run.status is RunStatus.RUNNING and run.pid and alive(run.pid, run.host):
        raise RunBusy(f"run {run.id} is being driven by pid {run.pid} on {run.host}")
    old = TaskSpec.stored(run.spec)
    folder = Path(old.root)
    if not old.root or not folder.is_dir():
        raise RevtreeError(
            f"run {run.id}: its task folder {old.root or '(not recorded)'} is gone; "
            f"`revtree fork {run.id} --node 0 --task DIR` starts a run with a task from DIR"
        )
    fresh = load_task(folder)
    new, kept = _merge(old, fresh)
    scored = [n for n in store.nodes(run.id) if n.score is not None]
    _refuse_incomparable(run, old, new, len(scored), folder)
    found = Reloaded(run.id, str(folder), _settings(old, new), kept=kept, scored=len(scored))
    paths = RunPaths(home, run.id)
    git = GitStore(paths.repo)
    try:
        before = _protected(git, run, store, old)
        wanted = [p for p in code_files(new) if matches(p, new.protected)]
        after, modes = read_source(new, wanted)
        found.files = _file_diffs(before, after)
        held, hmodes = read_source(new, holdout_files(new))
        if found.changed:
            n = sum(1 for e in store.events_since(run.id, 0, 100_000) if _is_reload(e.data))
            for ref in (PROTECTED_REF, HOLDOUT_REF):
                if (sha := git.find(ref)) is not None:
                    git.set_ref(f"refs/revtree/reloaded/{n + 1}/{ref.rsplit('/', 1)[1]}", sha)
            git.set_ref(PROTECTED_REF, git.commit_files(after, "protected files (reloaded)", modes))
            if held:
                git.set_ref(HOLDOUT_REF, git.commit_files(held, "holdout files (reloaded)", hmodes))
    finally:
        git.close()
    data: dict[str, Any] = {
        "reload": str(folder),
        "settings": found.settings,
        "files": {p: d[:200] for p, d in found.files.items()},
        "kept": kept,
        "scored": len(scored),
    }
    what = "; ".join(found.settings + [f"{p} changed" for p in found.files]) or "nothing changed"
    store.update_run(
        run.id,
        ("run", f"task reloaded from {folder}: {what}", data),
        spec=new.model_dump(mode="json"),
        direction=new.evaluate.direction,
    )
    return found


def _is_reload(data: dict[str, Any] | None) -> bool:
    return bool(data and "reload" in data)


def _merge(old: TaskSpec, fresh: TaskSpec) -> tuple[TaskSpec, list[str]]:
    """``fresh`` with the run's own settings of ``old``; the differences not applied."""
    o, f = old.model_dump(mode="json"), fresh.model_dump(mode="json")
    data, kept = dict(f), []
    for section in RUN_SECTIONS:
        data[section] = o.get(section)
        if section != "root":
            kept += _diff_lines(o.get(section), f.get(section), section)
    for section, keys in RUN_KEYS.items():
        data[section] = dict(f[section])
        for key in keys:
            data[section][key] = o[section].get(key)
            kept += _diff_lines(o[section].get(key), f[section].get(key), f"{section}.{key}")
    merged = TaskSpec.stored(data)  # [sandbox]: the keys the run's backend takes
    return merged, [k.replace(" -> ", " (task.toml: ") + ")" for k in kept]


def _refuse_incomparable(
    run: RunInfo, old: TaskSpec, new: TaskSpec, scored: int, folder: Path
) -> None:
    was, now = old.evaluate, new.evaluate
    if scored and (was.metric, was.direction) != (now.metric, now.direction):
        raise RevtreeError(
            f"{folder}/task.toml now scores {now.metric!r} ({now.direction}); run {run.id} "
            f"scored {scored} node(s) by {was.metric!r} ({was.direction}), and new scores "
            f"would not compare with them: `revtree fork {run.id} --node 0 --task {folder}` "
            "starts a run that evaluates with the changed task (run unchanged)"
        )


def _settings(old: TaskSpec, new: TaskSpec) -> list[str]:
    o, n = old.model_dump(mode="json"), new.model_dump(mode="json")
    support = o.pop("support_files", {}) != n.pop("support_files", {})
    return _diff_lines(o, n, "") + (["support files (generated shims) changed"] if support else [])


def _diff_lines(old: Any, new: Any, key: str) -> list[str]:
    """``key: old -> new`` for each leaf that differs (dicts recursed into)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            sub = f"{key}.{k}" if key else k
            out += _diff_lines(old.get(k), new.get(k), sub)
        return out
    if old == new:
        return []
    return [f"{key}: {json.dumps(old)} -> {json.dumps(new)}"]


def _protected(git: GitStore, run: RunInfo, store: Store, spec: TaskSpec) -> dict[str, bytes]:
    """The protected files the run's evaluations have overlaid so far."""
    root = store.node(run.id, 0).commit
    source = git.find(PROTECTED_REF) or root
    assert source is not None
    return {p: d for p, d in git.read_files(source).items() if matches(p, spec.protected)}


def _file_diffs(before: dict[str, bytes], after: dict[str, bytes]) -> dict[str, list[str]]:
    out = {}
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if a == b:
            continue
        if a is None or b is None:
            out[path] = ["(new protected file)" if a is None else "(no longer protected)"]
            continue
        try:
            old_lines, new_lines = a.decode().splitlines(), b.decode().splitlines()
        except UnicodeDecodeError:
            out[path] = [f"(binary: {len(a)} -> {len(b)} bytes)"]
            continue
        diff = difflib.unified_diff(old_lines, new_lines, lineterm="", n=1)
        out[path] = [d for d in diff if not d.startswith(("---", "+++"))]
    return out
