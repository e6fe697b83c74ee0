"""Inputs for the run step, labels for the grader.

A grade step may declare ``files`` (protected or holdout files only it sees: the labels)
and a trusted ``prepare`` command that writes the stage's ``inputs`` for the run step.
The run step's workspace is then the candidate's commit and the protected files less
the grader's files, plus the prepared inputs; and its environment does not name the
stage (``REVTREE_STAGE``), which only the trusted steps are told. So a candidate that
reads whatever data file is present, or picks the half of the holdout by the stage,
finds neither the labels nor the half.

The prepare step runs with no candidate code, over what the grader sees (the
protected and, for the holdout, the holdout files), once per (stage, repeat) of an
evaluator: its inputs depend on the stage and the seed, never on the candidate.
"""

from __future__ import annotations

import io
import tarfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from revtree.errors import SandboxError
from revtree.sandboxes.base import ExecRequest, ExecResult, Limits, Sandbox, archive_of
from revtree.tasks.names import matches
from revtree.tasks.spec import TaskSpec

STAGE_VAR = "REVTREE_STAGE"


@dataclass(frozen=True)
class GradeStep:
    """The trusted step that scores one stage: its command, timeout and output globs,
    the grader's own files (never in the run step's workspace), and the prepare step
    that writes the run step's inputs."""

    command: str
    timeout: float
    outputs: tuple[str, ...]
    hidden: tuple[str, ...] = ()
    prepare: str | None = None
    inputs: tuple[str, ...] = ()
    hides_stage: bool = False  # the run step is not told the stage

    @property
    def rewrites(self) -> bool:
        """Whether the run step's archive is not the candidate's (files taken out or
        prepared inputs put in)."""
        return bool(self.hidden or self.prepare)


def grade_step(spec: TaskSpec, stage: str, holdout: bool) -> GradeStep | None:
    """The grade step of a stage (the holdout's, with ``holdout``), if any. The dev
    labels (``[evaluate.grade] files``) stay out of the holdout's run step too."""
    ev, h = spec.evaluate, spec.holdout
    if holdout:
        if h is None or h.grade is None:
            return None
        hg, timeout = h.grade, h.grade.timeout or h.timeout or ev.timeout
        hidden = (*hg.files, *(ev.grade.files if ev.grade else ()))
        outputs = spec.holdout_outputs
        return GradeStep(
            hg.command, timeout, outputs, hidden, hg.prepare, hg.inputs, hg.hides_stage
        )
    if (g := ev.grade) is None:
        return None
    own = next((st.grade for st in ev.stages if st.name == stage), None)
    return GradeStep(
        own or g.command,
        ev.grade_timeout,
        ev.outputs,
        g.files,
        g.prepare,
        g.inputs,
        g.hides_stage,
    )


def rewrite_archive(archive: bytes, drop: tuple[str, ...], add: Mapping[str, bytes]) -> bytes:
    """``archive`` without its files matching ``drop``, with ``add`` added or replacing."""
    if not drop and not add:
        return archive
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(archive), mode="r") as src,
        tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst,
    ):
        for info in src.getmembers():
            if info.name in add or (drop and matches(info.name, drop)):
                continue
            dst.addfile(info, src.extractfile(info) if info.isfile() else None)
        for path, data in sorted(add.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            dst.addfile(info, io.BytesIO(data))
    return out.getvalue()


def run_env(env: Mapping[str, str], hides_stage: bool) -> dict[str, str]:
    """The run step's environment: without the stage when the task hides it."""
    return {k: v for k, v in env.items() if not (hides_stage and k == STAGE_VAR)}


class Prepared:
    """The prepare step's inputs per (stage, repeat), made once each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[tuple[str, int], dict[str, bytes]] = {}
        self._once: dict[tuple[str, int], threading.Lock] = {}

    def inputs(
        self,
        key: tuple[str, int],
        make: Callable[[], ExecRequest],
        execute: Callable[[ExecRequest], ExecResult],
        globs: tuple[str, ...],
    ) -> dict[str, bytes]:
        """The inputs of ``key``: the files matching ``globs`` that the prepare step
        (``make()``, run by ``execute``) wrote. A failure, or a declared input without
        wildcards that it did not write, raises ``SandboxError`` (the task's, not the
        candidate's)."""
        with self._lock:
            once = self._once.setdefault(key, threading.Lock())
        with once:
            if key in self._done:
                return self._done[key]
            request = make()
            result = execute(request)
            why = None
            if result.timed_out:
                why = f"killed after its {request.limits.timeout:g}s timeout"
            elif result.exit_code != 0:
                last = next((ln for ln in reversed(result.stderr.splitlines()) if ln.strip()), "")
                why = f"exit code {result.exit_code}: {last[-300:]}"
            files = {p: d for p, d in result.files.items() if matches(p, globs)}
            missing = [g for g in globs if not any(c in g for c in "*?[") and g not in files]
            if why is None and missing:
                why = f"it did not write the inputs {missing}"
            if why is not None:
                raise SandboxError(f"the prepare step of stage {key[0]!r} failed: {why}")
            self._done[key] = files
            return files

    def of(
        self,
        stage: str,
        repeat: int,
        grade: GradeStep,
        protected: Mapping[str, bytes],
        env: Mapping[str, str],
        limits: Limits,
        sandbox: Sandbox,
        cancel: threading.Event | None,
    ) -> dict[str, bytes]:
        """The inputs of a stage's run step from its prepare step (none without one)."""
        if grade.prepare is None:
            return {}
        command = grade.prepare

        def make() -> ExecRequest:
            workspace = prepare_archive(protected)
            env_ = {**env, "REVTREE_NODE": ""}
            return ExecRequest(
                workspace, command, limits, env_, {"revtree.step": "prepare"}, grade.inputs
            )

        return self.inputs(
            (stage, repeat), make, lambda r: sandbox.execute(r, cancel), grade.inputs
        )


def prepare_archive(protected: Mapping[str, bytes]) -> bytes:
    """The prepare step's workspace: what the grader sees, no candidate code."""
    return archive_of(dict(protected))


def labels_visible(spec: TaskSpec) -> list[str]:
    """Where a grader's labels are in the run step's workspace (``check``'s warnings):
    a grade step with no ``files`` of its own, a holdout whose files are not all the
    grader's, or a run step told the stage it runs."""
    out = []
    ev, h = spec.evaluate, spec.holdout
    data = [g for g in spec.protected if not g.endswith(".py")]
    if ev.grade is not None and not ev.grade.files and data:
        out.append(
            f"the dev grader has no files of its own: the protected data {data} is in the "
            "run step's workspace, where the candidate can read it; list the labels in "
            '[evaluate.grade] files (e.g. files = ["labels.json"]): protected files only the '
            "grade step sees"
        )
    if h is not None and h.grade is not None:
        shown = [g for g in h.files if g not in h.grade.files]
        if shown:
            out.append(
                f"the holdout files {shown} are in the holdout's run step workspace, so a "
                "candidate can read the guard's and the final set's labels; list them in "
                "[holdout.grade] files and write the run step's inputs of each half with "
                "[holdout.grade] prepare and inputs"
            )
        if not h.grade.hides_stage:
            out.append(
                f"the holdout's run step is told the stage (${STAGE_VAR}: guard or holdout), "
                "so it can pick the half it is judged on; give [holdout.grade] files (and a "
                "prepare step), and only the trusted steps are told it"
            )
    return out
