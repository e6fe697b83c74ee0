"""The evaluator: runs a candidate's stages and repeats in a sandbox and reads the metrics.

Metrics protocol: the command writes one JSON object to file descriptor 3
(``METRICS_FD``). The task's metric must be a finite number in it. Anything else (a
crash, a timeout, no JSON, a missing, non-numeric or NaN metric) makes a failed
evaluation whose ``error`` says why; nothing raises out of :meth:`Evaluator.evaluate`
but ``Cancelled``. The last non-empty stdout line is read instead only where the task
opts in (``evaluate.stdout_metrics``), and always for a grade step.

The grade step (``[evaluate.grade]``, ``[holdout.grade]``): each (stage, repeat) is a
run step over the candidate's workspace that declares ``outputs``, then, if it exited
cleanly and its outputs are all regular files, a grade step in a *fresh* sandbox
execution whose workspace holds only the protected files and the outputs under
``outputs/`` (``$REVTREE_OUTPUTS``). The score comes from the grade step alone; what
the run step printed or wrote to its metrics channel is kept as a log, nothing else.

What is guaranteed: with a grade step, no code of the candidate runs in the grader's
workspace, an output never replaces a protected file or shadows a module the grader
imports, and a refused or missing output fails the evaluation (``error_kind``
"outputs"). What is not: a single-step score is as trustworthy as the evaluator that
runs candidate code (``spec.evaluate.forgeable``); the grader itself must not trust
numbers the candidate wrote, and must not execute the outputs.

Each (stage, repeat) already in ``done`` is reused, never run again, and each new
result is handed to ``record`` as soon as it exists, so a resumed candidate loses
nothing and repeats nothing.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from revtree.agents.readings import failure_of, mean_metrics, parse_metrics
from revtree.agents.stage_inputs import GradeStep, Prepared, grade_step, rewrite_archive, run_env
from revtree.memory.records import EvalResult, directed, finite_mean
from revtree.memory.stages import FULL, GUARD, HOLDOUT
from revtree.sandboxes.base import (
    ExecRequest,
    ExecResult,
    Limits,
    Sandbox,
    Staged,
    Warmed,
    archive_of,
)
from revtree.sandboxes.zygote_compile import sources
from revtree.sandboxes.zygote_preload import module_imports
from revtree.tasks.names import matches
from revtree.tasks.spec import TaskSpec

TAIL = 4000
OUTPUTS = "outputs"  # the grade step's folder of the run step's declared outputs
_WILDCARD = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Outcome:
    """The verdict on a node after all its stages."""

    ok: bool
    score: float | None
    score_std: float | None
    n_evals: int
    error: str | None = None
    error_kind: str | None = None
    sandbox_seconds: float = 0.0
    # the numeric metrics of the evaluations that gave the score, averaged over repeats
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Step:
    label: str
    command: str
    result: ExecResult


def outputs_problem(result: ExecResult, globs: tuple[str, ...]) -> str | None:
    """Why the run step's declared outputs cannot be graded (a refused file, a path out
    of the workspace, a missing file: a glob without wildcards names a required file,
    one with wildcards may match nothing), or None."""
    refused = {p: why for p, why in result.refused.items() if matches(p, globs)}
    if len(result.files) > OUTPUT_FILES_CAP:
        return f"{len(result.files)} output files: more than the {OUTPUT_FILES_CAP} allowed"
    for path in result.files:  # files of [sandbox] outputs that are not graded: ignored
        if not _inside(path) and matches(path, globs):
            refused.setdefault(path, "not a declared output path inside the workspace")
        elif len(path) > OUTPUT_PATH_CAP:
            refused.setdefault(path, f"a path longer than {OUTPUT_PATH_CAP} characters")
    if refused:
        path, why = sorted(refused.items())[0]
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        return f"output {path!r} refused: {why}{more}"
    missing = [g for g in globs if not _WILDCARD.search(g) and g not in result.files]
    if missing:
        return f"missing outputs {missing}: the run step must write them in its workspace"
    return None


OUTPUT_FILES_CAP = 10_000  # declared output files per evaluation
OUTPUT_PATH_CAP = 1024  # characters of an output's path (the grader's folder is deeper)


def _inside(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and "\\" not in path and all(p not in ("", ".", "..") for p in parts)


def grade_archive(protected: Mapping[str, bytes], files: Mapping[str, bytes]) -> bytes:
    """The grade step's workspace: the protected files, and the outputs under ``outputs/``."""
    return archive_of({**protected, **{f"{OUTPUTS}/{p}": d for p, d in files.items()}})


class Evaluator:
    """Runs the task's evaluation cascade for one node. ``protected`` is the overlay of
    protected (and support) files every workspace gets: the grade step's whole workspace."""

    def __init__(
        self,
        spec: TaskSpec,
        sandbox: Sandbox,
        log_dir: Path | None = None,
        protected: Mapping[str, bytes] | None = None,
    ) -> None:
        self.spec, self.sandbox, self.log_dir = spec, sandbox, log_dir
        self.protected = dict(protected or {})
        self.imports = module_imports(self.protected)  # for a backend to load ahead
        self.sources = sources(self.protected)  # for a backend to compile ahead
        self.prepared = Prepared()
        sb = spec.sandbox
        self.base_env = {**{k: os.environ[k] for k in sb.pass_env if k in os.environ}, **sb.env}
        graded = spec.evaluate.grade or (spec.holdout and spec.holdout.grade)
        if graded and not self.protected:
            raise ValueError("a task with a grade step needs its protected files (protected=)")
        clash = [p for p in self.protected if p == OUTPUTS or p.startswith(f"{OUTPUTS}/")]
        if graded and clash:
            raise ValueError(f"protected files under {OUTPUTS}/ clash with the grade step: {clash}")

    def warm_up(self) -> None:
        """Have the sandbox start what its first evaluation would wait for, where it can
        (``Warmed``: the local backend's fork server), with the task's environment."""
        if isinstance(self.sandbox, Warmed):
            self.sandbox.warm_up(self.base_env)

    @property
    def forgeable(self) -> bool:
        """Whether the task's score comes from the sandbox that runs candidate code."""
        return self.spec.evaluate.forgeable

    def grade_step(self, stage: str) -> GradeStep | None:
        """The grade step of a stage (``full``, ``holdout`` or a cascade stage), if any."""
        return grade_step(self.spec, stage, holdout=stage in (HOLDOUT, GUARD))

    def staged(
        self,
        archive: bytes,
        done: Mapping[tuple[str, int], EvalResult],
        started: Callable[[], object],
    ) -> AbstractContextManager[bool]:
        """The workspace of ``evaluate``'s first run unpacked now, while the candidate
        waits for its slot, where the sandbox can (``Staged``) and the run has not been
        made (``done``) nor has its archive rewritten (a grade step's hidden inputs):
        yields whether it did, and then that run calls ``started`` as its process runs."""
        ev = self.spec.evaluate
        first = ev.stages[0].name if ev.stages else FULL
        grade = self.grade_step(first)
        if not isinstance(self.sandbox, Staged) or (first, 0) in done:
            return nullcontext(False)
        if grade is not None and grade.rewrites:
            return nullcontext(False)
        return self.sandbox.staged(archive, started)

    def run_one(
        self,
        node_id: int,
        archive: bytes,
        stage: str,
        repeat: int,
        command: str,
        metric: str,
        timeout: float,
        cancel: threading.Event | None,
        labels: Mapping[str, str] | None = None,
        protected: Mapping[str, bytes] | None = None,
    ) -> EvalResult:
        """One (stage, repeat): the command, then its grade step where the task has one
        (over ``protected``, default the evaluator's)."""
        env = {
            **self.base_env,
            "REVTREE_NODE": str(node_id),
            "REVTREE_STAGE": stage,
            "REVTREE_REPEAT": str(repeat),
            "REVTREE_SEED": str(self.spec.search.seed + repeat),
        }
        grade = self.grade_step(stage)
        outputs = grade.outputs if grade else ()
        protected = self.protected if protected is None else protected
        if grade is not None and grade.rewrites:
            prep = self._limits(grade.timeout)
            inputs = self.prepared.of(
                stage, repeat, grade, protected, env, prep, self.sandbox, cancel
            )
            archive = rewrite_archive(archive, grade.hidden, inputs)
        hides = grade is not None and grade.hides_stage
        request = ExecRequest(
            archive, command, self._limits(timeout), run_env(env, hides), dict(labels or {}),
            outputs, () if grade else self.imports,  # (a run step runs the candidate's own)
            () if grade else self.sources,  # (none where there is a grade step)
        )  # fmt: skip
        run = self.sandbox.execute(request, cancel)
        steps = [_Step("run step" if grade else "", command, run)]
        if grade is None:
            metrics, score, error = parse_metrics(run, metric, self.spec.evaluate.stdout_metrics)
            kind = "metrics" if error else None
            if (failure := failure_of(run, timeout)) is not None:
                kind, error = failure
            return self._result(node_id, stage, repeat, steps, metrics, score, error, kind)
        if (failure := failure_of(run, timeout)) is not None:
            kind, why = failure
            return self._result(node_id, stage, repeat, steps, {}, None, f"run step: {why}", kind)
        if (problem := outputs_problem(run, grade.outputs)) is not None:
            return self._result(node_id, stage, repeat, steps, {}, None, problem, "outputs")
        request = ExecRequest(
            grade_archive(
                protected,
                {p: d for p, d in run.files.items() if matches(p, grade.outputs)},
            ),
            grade.command,
            self._limits(grade.timeout),
            {**env, "REVTREE_OUTPUTS": OUTPUTS},
            {**(labels or {}), "revtree.step": "grade"},
            imports=self.imports,
        )
        graded = self.sandbox.execute(request, cancel)
        steps.append(_Step("grade step", grade.command, graded))
        metrics, score, error = parse_metrics(graded, metric, stdout=True)
        kind = "metrics" if error else None
        if error is not None:
            error = f"grade step: {error}"
        if (failure := failure_of(graded, grade.timeout)) is not None:
            kind, error = failure[0], f"grade step: {failure[1]}"
        return self._result(node_id, stage, repeat, steps, metrics, score, error, kind)

    def _limits(self, timeout: float) -> Limits:
        sb = self.spec.sandbox
        return Limits(
            timeout=timeout,
            memory_bytes=sb.memory,
            cpu_seconds=sb.cpu_seconds,
            output_cap=sb.output_cap,
        )

    def _result(
        self,
        node_id: int,
        stage: str,
        repeat: int,
        steps: list[_Step],
        metrics: dict[str, Any],
        score: float | None,
        error: str | None,
        kind: str | None,
    ) -> EvalResult:
        return EvalResult(
            node_id=node_id,
            stage=stage,
            repeat=repeat,
            ok=error is None,
            score=score,
            metrics=_jsonable(metrics),
            exit_code=steps[-1].result.exit_code,
            duration=sum(s.result.duration for s in steps),
            stdout_tail=_tails(steps, "stdout"),
            stderr_tail=_tails(steps, "stderr"),
            error=error,
            error_kind=kind,
            log_path=self._log(node_id, stage, repeat, steps, error),
            host=steps[0].result.host,
            gpus=tuple(steps[0].result.gpus),
        )

    def _log(
        self,
        node_id: int,
        stage: str,
        repeat: int,
        steps: list[_Step],
        error: str | None,
    ) -> str | None:
        """The whole captured output in a file, where the database's tails lose some of
        it (a longer output, or a grade step's two); None where they hold it all (most
        evaluations: a file each was an inode and a write on the evaluation's path)."""
        if self.log_dir is None or _whole_in_tails(steps):
            return None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"node{node_id}-{stage}-{repeat}.log"
        parts = [f"error: {error}\n"]
        for step in steps:
            r = step.result
            parts.append(
                (f"=== {step.label} ===\n" if step.label else "")
                + f"$ {step.command}\nexit code: {r.exit_code}  duration: {r.duration:.3f}s  "
                f"timed out: {r.timed_out}  truncated: {r.truncated}\n"
            )
            if step.label == "run step" and r.metrics_text:
                parts.append(
                    f"metrics written (ignored: only the grade step scores):\n"
                    f"{r.metrics_text[:TAIL]}\n"
                )
            if r.refused:
                parts.append(f"outputs refused: {dict(r.refused)}\n")
            parts.append(f"--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr}\n")
        path.write_text("".join(parts), encoding="utf-8", errors="replace")
        return str(path)

    def evaluate(
        self,
        node_id: int,
        archive: bytes,
        done: Mapping[tuple[str, int], EvalResult],
        record: Callable[[EvalResult], object],
        cancel: threading.Event | None = None,
        labels: Mapping[str, str] | None = None,
        hold: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> Outcome:
        """Each stage, then each repeat, until one fails or misses its threshold; each run
        within ``hold`` (its slot), and handed to ``record`` after it (``done``: the runs
        stored before, not run again)."""
        ev = self.spec.evaluate
        results: list[EvalResult] = []

        def run(stage: str, repeat: int, command: str, metric: str, timeout: float) -> EvalResult:
            res = done.get((stage, repeat))
            if res is None:
                with hold():
                    res = self.run_one(
                        node_id, archive, stage, repeat, command, metric, timeout, cancel, labels
                    )
                record(res)
            results.append(res)
            return res

        for st in ev.stages:
            res = run(st.name, 0, st.command, st.metric or ev.metric, st.timeout or ev.timeout)
            if not res.ok:
                return self._outcome(results, f"stage {st.name!r}: {res.error}", res.error_kind)
            assert res.score is not None
            m = self.spec.maximize
            better = directed(res.score, m) >= directed(st.threshold, m)
            if not better:
                if ev.cascade == "keep":  # OpenEvolve: the stage's score stands
                    return self._outcome(results, None, None, res.score, scored=[res])
                msg = (
                    f"stage {st.name!r}: {res.score:.6g} does not reach threshold {st.threshold:g}"
                )
                return self._outcome(results, msg, "gated")
        scores = []
        for r in range(ev.repeats):
            res = run(FULL, r, ev.command, ev.metric, ev.timeout)
            if not res.ok:
                return self._outcome(results, f"repeat {r}: {res.error}", res.error_kind)
            assert res.score is not None
            scores.append(res.score)
        std = statistics.stdev(scores) if len(scores) > 1 else None
        full = [r for r in results if r.stage == FULL]
        mean = finite_mean(scores)  # repeats all equal are their value, to the last bit
        if mean is None:  # finite scores whose mean rounds past the largest double
            return self._outcome(results, f"the mean of the repeats {scores} overflows", "crash")
        return self._outcome(results, None, None, mean, std, full)

    def _outcome(
        self,
        results: list[EvalResult],
        error: str | None,
        kind: str | None,
        score: float | None = None,
        std: float | None = None,
        scored: list[EvalResult] | None = None,
    ) -> Outcome:
        return Outcome(
            metrics=mean_metrics(scored or []),
            ok=error is None,
            score=score,
            score_std=std,
            n_evals=len(results),
            error=error,
            error_kind=kind,
            sandbox_seconds=sum(r.duration for r in results),
        )

    def holdout(
        self,
        node_id: int,
        archive: bytes,
        cancel: threading.Event | None = None,
        protected: Mapping[str, bytes] | None = None,
        split: str = HOLDOUT,
        repeat: int = 0,
    ) -> EvalResult | None:
        """The holdout evaluation; ``protected`` (the protected plus holdout files) is
        what its grade step sees, default the evaluator's protected files. ``split`` is
        ``GUARD`` (during the search) or ``HOLDOUT`` (the final judge): the stage name,
        which the command reads as ``$REVTREE_STAGE`` to pick its half of the data."""
        h = self.spec.holdout
        if h is None:
            return None
        metric, timeout = (
            h.metric or self.spec.evaluate.metric,
            h.timeout or self.spec.evaluate.timeout,
        )
        return self.run_one(
            node_id, archive, split, repeat, h.command, metric, timeout, cancel, protected=protected
        )


def _whole_in_tails(steps: list[_Step]) -> bool:
    """Whether the stored row says all the log would: one step, each stream within its
    tail and not cut at the cap, no output refused."""
    if len(steps) != 1 or steps[0].label:
        return False
    r = steps[0].result
    short = len(r.stdout) <= TAIL and len(r.stderr) <= TAIL
    return short and not r.truncated and not r.refused


def _tails(steps: list[_Step], stream: str) -> str:
    """The tail of one stream: a single step's as is, two steps' each labelled."""
    if len(steps) == 1 and not steps[0].label:
        text: str = getattr(steps[0].result, stream)
        return text[-TAIL:]
    share = TAIL // len(steps)
    return "\n".join(
        f"[{s.label}: {s.command}]\n{getattr(s.result, stream)[-share:]}" for s in steps
    )


def _jsonable(metrics: dict[str, Any]) -> dict[str, Any]:
    """Metrics as storable JSON (NaN and infinities become strings)."""

    def fix(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return str(v)
        if isinstance(v, dict):
            return {str(k): fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        return v

    out: dict[str, Any] = fix(metrics)
    return out
