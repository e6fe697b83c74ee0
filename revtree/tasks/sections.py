"""The sections of a task spec that say how a candidate is scored and within what limits:
``[evaluate]`` (its stages and trusted grade step), ``[holdout]``, ``[budget]`` and
``[trust]`` (``[sandbox]``, one model per backend, is :mod:`revtree.tasks.sandbox`'s);
and what every section shares: the :class:`Section` base,
durations and sizes (the secret-name check is :mod:`revtree.tasks.names`'s).

The whole task is :class:`revtree.tasks.spec.TaskSpec`; the ``[search]`` policies are in
:mod:`revtree.tasks.search`, the ``[agents]`` settings and the knobs in
:mod:`revtree.tasks.agent_settings`.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZES = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
# The longest duration a setting takes: beyond it a timeout means nothing, and
# a clock or a thread's wait given it overflows (threading.TIMEOUT_MAX, Docker's API).
MAX_SECONDS = 365 * 86400.0


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string like ``"90s"``, ``"10m"``, ``"2h"``."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 60, '90s', '10m' or '2h'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := re.fullmatch(r"\s*([0-9.]+)\s*([smhd]?)\s*", value)):
        seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    else:
        raise ValueError(f"expected a duration such as 60, '90s', '10m' or '2h', got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"expected a positive duration, got {value!r}")
    if seconds > MAX_SECONDS:
        raise ValueError(f"expected a duration of at most 365 days ('365d'), got {value!r}")
    return seconds


def parse_size(value: Any) -> int:
    """Bytes from a number or a string like ``"512m"``, ``"2g"``."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str) and (
        m := re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)b?\s*", value, re.I)
    ):
        size = int(float(m.group(1)) * _SIZES.get(m.group(2).lower(), 1))
        if size > 0:
            return size
    raise ValueError(f"expected a positive size such as 1048576, '512m' or '2g', got {value!r}")


def one_or_many(value: Any) -> Any:
    """A single string where a list of strings is expected, as a one-element list."""
    return (value,) if isinstance(value, str) else value


Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]
Globs = Annotated[tuple[str, ...], BeforeValidator(one_or_many)]
"""Globs (or names): a list of strings, where one string means a list of one."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def is_workspace_path(path: str) -> bool:
    """A relative posix path inside the workspace: no '..', '.', empty parts or backslashes."""
    parts = path.split("/")
    return bool(path) and "\\" not in path and all(p not in ("", ".", "..") for p in parts)


def _output_globs(value: Any) -> Any:
    bad = [g for g in value or () if not is_workspace_path(g)]
    if bad:
        raise ValueError(
            f"outputs must be relative globs inside the workspace (no '/' at the start, "
            f"no '..'): {bad}"
        )
    return value


class Grade(Section):
    """The trusted grade step: it runs in a fresh sandbox holding only the protected
    files and the run step's declared outputs (under ``outputs/``, named by
    ``$REVTREE_OUTPUTS``), never candidate code; the score comes from it alone."""

    command: str = Field(min_length=1, description="Shell command of the trusted grader.")
    timeout: Duration | None = Field(
        None, description="Wall timeout of the grader; defaults to the run step's timeout."
    )
    files: Globs = Field(
        (),
        description="Globs of protected (or holdout) files only this grade step sees, such as "
        "the labels: they are left out of the run step's workspace.",
    )
    prepare: str | None = Field(
        None,
        min_length=1,
        description="Trusted command that writes the stage's inputs (the files of 'inputs') "
        "for the run step; it runs with no candidate code, sees what the grader sees, and is "
        "told the stage ($REVTREE_STAGE), which the run step then is not.",
    )
    inputs: Globs = Field(
        (), description="Globs of the files 'prepare' writes, copied into the run step's workspace."
    )

    @field_validator("files", "inputs")
    @classmethod
    def _relative(cls, value: Any) -> Any:
        return _output_globs(value)

    @model_validator(mode="after")
    def _prepare_needs_inputs(self) -> Grade:
        if (self.prepare is None) != (not self.inputs):
            raise ValueError(
                "prepare and inputs go together: prepare writes the files that inputs names, "
                'e.g. prepare = "python3 prepare.py" and inputs = ["inputs.json"]'
            )
        return self

    @property
    def hides_stage(self) -> bool:
        """Whether the run step is laid out without the stage's labels: it is then not
        told the stage either (only the trusted steps are)."""
        return bool(self.files) or self.prepare is not None


class Stage(Section):
    """A cheap evaluation that gates the full one: below threshold, the node stops there
    (failed, or scored by the stage: see ``evaluate.cascade``). With a grade step, the
    stage's command is its run step and the grader scores it."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Stage name, unique.")
    command: str = Field(min_length=1, description="Shell command run in the workspace.")
    threshold: float = Field(description="Score the stage must reach (in the better direction).")
    metric: str | None = Field(None, description="Metric to gate on; defaults to evaluate.metric.")
    timeout: Duration | None = Field(
        None, description="Wall timeout; defaults to evaluate.timeout."
    )
    grade: str | None = Field(
        None,
        min_length=1,
        description="Grader command for this stage; defaults to evaluate.grade.command "
        "(needs [evaluate.grade]).",
    )


class Evaluate(Section):
    """How a candidate is scored."""

    command: str = Field(min_length=1, description="Shell command run in the workspace.")
    metric: str = Field(min_length=1, description="Key of the score in the metrics JSON.")
    direction: Literal["maximize", "minimize"] = Field(description="Which way is better.")
    timeout: Duration = Field(600.0, description="Wall timeout of one run of the command.")
    repeats: int = Field(1, ge=1, le=100, description="Runs of the full stage; score is the mean.")
    stages: tuple[Stage, ...] = Field((), description="Cheap stages run first, in order.")
    cascade: Literal["gate", "keep"] = Field(
        "gate",
        description="A node below a stage's threshold: 'gate' fails it (error_kind 'gated'); "
        "'keep' (OpenEvolve's meaning) succeeds with that stage's score and runs no later "
        "stage.",
    )
    outputs: Globs = Field(
        (), description="Globs of workspace files the run step hands to the grade step."
    )
    grade: Grade | None = Field(
        None, description="The trusted grade step; without it a candidate can forge its score."
    )
    stdout_metrics: bool = Field(
        False,
        description="Single-step tasks: also read the metrics from the last stdout line when "
        "nothing was written to file descriptor 3 (forgeable by the code the command runs).",
    )

    @field_validator("outputs")
    @classmethod
    def _relative_outputs(cls, value: Any) -> Any:
        return _output_globs(value)

    @model_validator(mode="after")
    def _unique_stage_names(self) -> Evaluate:
        names = [s.name for s in self.stages]
        reserved = {"full", "holdout", "guard"}
        dup = {n for n in names if names.count(n) > 1} | (reserved & set(names))
        if dup:
            raise ValueError(
                f"stage names must be unique and not 'full', 'holdout' or 'guard': {sorted(dup)}"
            )
        return self

    @model_validator(mode="after")
    def _grade_needs_outputs(self) -> Evaluate:
        check_grade(self.grade, self.outputs, "evaluate")
        staged = [s.name for s in self.stages if s.grade is not None]
        if staged and self.grade is None:
            raise ValueError(
                f"stages {staged} set 'grade' but there is no [evaluate.grade]: declare the "
                "grade step (and its outputs) first"
            )
        return self

    @property
    def forgeable(self) -> bool:
        """True when the score comes from the same sandbox as the candidate's code (no
        grade step): whatever that code runs can write the metrics."""
        return self.grade is None

    @property
    def grade_timeout(self) -> float:
        return (self.grade.timeout if self.grade else None) or self.timeout


def check_grade(grade: Grade | None, outputs: tuple[str, ...], where: str) -> None:
    if grade is not None and not outputs:
        raise ValueError(
            f"[{where}.grade] needs outputs: declare the files the run step writes for the "
            f'grader, e.g. {where}.outputs = ["answers.json"]'
        )
    if grade is None and outputs:
        raise ValueError(
            f"{where}.outputs is set but there is no [{where}.grade]: outputs only go to a "
            f'grade step (add [{where}.grade] with command = "python3 grade.py")'
        )


class Holdout(Section):
    """A final check hidden from the agents: its files never enter the candidates' code."""

    command: str = Field(min_length=1, description="Shell command run in the workspace.")
    files: Globs = Field((), description="Globs of holdout-only files (kept out of the repo).")
    metric: str | None = Field(None, description="Metric to read; defaults to evaluate.metric.")
    timeout: Duration | None = Field(
        None, description="Wall timeout; defaults to evaluate.timeout."
    )
    outputs: Globs | None = Field(
        None, description="Globs handed to [holdout.grade]; defaults to evaluate.outputs."
    )
    grade: Grade | None = Field(
        None, description="The holdout's trusted grade step (sees the holdout files too)."
    )

    @field_validator("outputs")
    @classmethod
    def _relative_outputs(cls, value: Any) -> Any:
        return _output_globs(value)

    @model_validator(mode="after")
    def _outputs_need_grade(self) -> Holdout:
        if self.outputs and self.grade is None:
            check_grade(None, self.outputs, "holdout")
        return self


class BudgetSection(Section):
    """Limits checked before any new work starts; reaching one ends the run cleanly."""

    max_nodes: int | None = Field(
        50,
        ge=1,
        description="Nodes in the tree, root included; near twins refused before evaluation "
        "([search] novelty_threshold) are not counted (max_twins bounds them).",
    )
    max_twins: int | None = Field(
        None,
        ge=1,
        description="Near twins refused before evaluation; reaching it ends the run, so a "
        "proposer that keeps repeating itself cannot loop (default: as many as max_nodes).",
    )
    max_wall: Duration | None = Field(None, description="Wall time the run may be active.")
    max_sandbox_seconds: Duration | None = Field(None, description="Summed evaluation time.")
    max_usd: float | None = Field(None, gt=0, description="LLM spend in dollars (never exceeded).")
    max_tokens: int | None = Field(None, gt=0, description="LLM tokens, input plus output.")


class TrustSection(Section):
    """How far a reported best is trusted: re-evaluation against noise, the holdout
    guard against drift (reward hacks, overfitting to the dev evaluator), and when a
    run stops rather than burn its budget on failures that are not the candidates'."""

    verify_repeats: int = Field(
        3,
        ge=1,
        le=100,
        description="Most full-stage repeats of a new best and of the baseline before a best "
        "is reported (1: off); fewer where more would decide nothing (never fewer than one "
        "re-run of the reported best); where the evaluator has reproduced every repeat bit "
        "for bit, a new best is re-run at the end of the run rather than as it is found; the "
        "summary's improvement carries their uncertainty.",
    )
    verify_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Most of the run's evaluations spent verifying new bests during the run "
        "(counted, so a resumed run decides alike; the final best and the baseline are always "
        "verified at the end).",
    )
    guard: bool = Field(
        True,
        description="Run the holdout (split 'guard') on the baseline and on every new best, "
        "and raise a drift alarm where it disagrees with the dev score.",
    )
    guard_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Most of the run's evaluations spent on guard holdouts (the baseline's "
        "and the final best's are always run).",
    )
    tolerance: float = Field(
        0.02,
        ge=0,
        description="Relative holdout tolerance: a node better than the baseline on dev but "
        "worse on the holdout by more than this share of the baseline's holdout is alarmed.",
    )
    min_rank_agreement: float = Field(
        0.0,
        ge=-1,
        le=1,
        description="Alarm the top dev node when Kendall's tau between dev and guard-holdout "
        "scores of the guarded nodes (at least 4) falls below this.",
    )
    infra_failures: int = Field(
        2,
        ge=1,
        le=100,
        description="Infrastructure failures in a row (model endpoint unreachable, disk full, "
        "database error) after which the run stops 'failed', resumable.",
    )
    same_failures: int = Field(
        4,
        ge=0,
        le=1000,
        description="Finished candidates in a row that failed at the same step with the same "
        "error class, where the error is the model's, the reviewer's, the parser's or the "
        "sandbox's and not the candidate code's, after which the run stops 'failed', "
        "resumable (0: never).",
    )
