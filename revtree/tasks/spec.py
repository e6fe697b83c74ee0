"""The task specification: what to optimise, how to score it, and within what budget.

A task is a folder holding a ``task.toml``. Every section is a pydantic model with
``extra="forbid"``: an unknown key is an error, never silently ignored. Errors are
raised as :class:`~revtree.errors.TaskSpecError` naming the file, the key and what was
expected. Checks that need the file system (globs match, knob locations exist) live
in :mod:`revtree.tasks.load`.
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
    ValidationError,
    field_validator,
    model_validator,
)

from revtree.errors import TaskSpecError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZES = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
SECRET_NAME = re.compile(
    r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|DATABASE_URL|_DSN$|REVTREE_DB|"
    r"^AWS_|^GOOGLE_APPLICATION|^AZURE_|PRIVATE_KEY|SSH_AUTH_SOCK)",
    re.I,
)


def is_secret(name: str) -> bool:
    """Whether an environment variable name looks like it holds a secret."""
    return SECRET_NAME.search(name) is not None


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


Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Stage(_Section):
    """A cheap evaluation that gates the full one: below threshold, the node stops there."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Stage name, unique.")
    command: str = Field(min_length=1, description="Shell command run in the workspace.")
    threshold: float = Field(description="Score the stage must reach (in the better direction).")
    metric: str | None = Field(None, description="Metric to gate on; defaults to evaluate.metric.")
    timeout: Duration | None = Field(
        None, description="Wall timeout; defaults to evaluate.timeout."
    )


class Evaluate(_Section):
    """How a candidate is scored."""

    command: str = Field(min_length=1, description="Shell command run in the workspace.")
    metric: str = Field(min_length=1, description="Key of the score in the metrics JSON.")
    direction: Literal["maximize", "minimize"] = Field(description="Which way is better.")
    timeout: Duration = Field(600.0, description="Wall timeout of one run of the command.")
    repeats: int = Field(1, ge=1, le=100, description="Runs of the full stage; score is the mean.")
    stages: tuple[Stage, ...] = Field((), description="Cheap stages run first, in order.")

    @model_validator(mode="after")
    def _unique_stage_names(self) -> Evaluate:
        names = [s.name for s in self.stages]
        dup = {n for n in names if names.count(n) > 1} | ({"full", "holdout"} & set(names))
        if dup:
            raise ValueError(f"stage names must be unique and not 'full'/'holdout': {sorted(dup)}")
        return self


class Holdout(_Section):
    """A final check hidden from the agents: its files never enter the candidates' code."""

    command: str = Field(min_length=1, description="Shell command run in the workspace.")
    files: tuple[str, ...] = Field(
        (), description="Globs of holdout-only files (kept out of the repo)."
    )
    metric: str | None = Field(None, description="Metric to read; defaults to evaluate.metric.")
    timeout: Duration | None = Field(
        None, description="Wall timeout; defaults to evaluate.timeout."
    )


class SandboxConfig(_Section):
    """Where and under which limits evaluations run."""

    backend: Literal["auto", "local", "docker"] = Field(
        "auto", description="'auto' uses docker when an engine answers, else local."
    )
    memory: Size = Field(4 * 2**30, description="Address-space / memory limit per evaluation.")
    cpu_seconds: Duration | None = Field(None, description="CPU-time limit per evaluation.")
    output_cap: Size = Field(2**20, description="Bytes of stdout and of stderr kept per run.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    pass_env: tuple[str, ...] = Field((), description="Host variables passed through by name.")

    @field_validator("env", "pass_env")
    @classmethod
    def _no_secrets(cls, value: Any) -> Any:
        names = value.keys() if isinstance(value, dict) else value
        bad = [n for n in names if is_secret(n)]
        if bad:
            raise ValueError(f"secrets never enter a sandbox; remove {bad}")
        return value


class _Search(_Section):
    seed: int = Field(0, description="Seed of the policy and proposer RNGs.")
    parallel: int = Field(1, ge=1, le=256, description="Evaluations running at once.")
    lookahead: int | None = Field(
        None,
        ge=0,
        le=256,
        description="Candidates prepared (selected, proposed, coded, reviewed) ahead of a free "
        "evaluation slot, so slots never wait for agents. Default: 0 when parallel is 1 (fully "
        "deterministic), else equal to parallel.",
    )


class GreedySearch(_Search):
    """AIDE's policy: a few drafts, debug failed leaves, then improve the best."""

    policy: Literal["greedy"] = "greedy"
    num_drafts: int = Field(3, ge=1, description="Children of the root before improving.")
    debug_prob: float = Field(0.5, ge=0, le=1, description="Chance to debug a failed leaf.")
    max_debug_depth: int = Field(3, ge=0, description="Longest chain of debug fixes.")


class RandomSearch(_Search):
    """Expand a uniformly chosen successful node (or the root)."""

    policy: Literal["random"] = "random"


class OptunaSearch(_Search):
    """The knob study alone decides: every candidate is the root with new knob values."""

    policy: Literal["optuna"] = "optuna"


def _default_policy(value: Any) -> Any:
    """A ``[search]`` table without ``policy`` means the default policy, greedy."""
    if isinstance(value, dict) and "policy" not in value:
        return {**value, "policy": "greedy"}
    return value


SearchConfig = Annotated[
    GreedySearch | RandomSearch | OptunaSearch,
    Field(discriminator="policy"),
    BeforeValidator(_default_policy),
]
POLICIES = ("greedy", "random", "optuna")


class Budget(_Section):
    """Limits checked before any new work starts; reaching one ends the run cleanly."""

    max_nodes: int | None = Field(50, ge=1, description="Nodes in the tree, root included.")
    max_wall: Duration | None = Field(None, description="Wall time the run may be active.")
    max_sandbox_seconds: Duration | None = Field(None, description="Summed evaluation time.")


class Knob(_Section):
    """A numeric or categorical value in the code that the knob proposer may set."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Knob name.")
    type: Literal["int", "float", "categorical"] = Field(description="Value type.")
    low: float | None = Field(None, description="Lower bound (int, float).")
    high: float | None = Field(None, description="Upper bound (int, float).")
    log: bool = Field(False, description="Sample on a log scale.")
    step: float | None = Field(None, gt=0, description="Grid step (int, float).")
    choices: tuple[str | int | float | bool, ...] | None = Field(
        None, description="Categorical values."
    )
    file: str = Field(min_length=1, description="Editable file that holds the value.")
    variable: str | None = Field(
        None, description="Module-level assignment `NAME = value` to rewrite; defaults to name."
    )
    pattern: str | None = Field(
        None, description="Regex with one group around the value (instead of variable)."
    )

    @model_validator(mode="after")
    def _check_kind(self) -> Knob:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical knob needs a non-empty 'choices'")
            if self.low is not None or self.high is not None:
                raise ValueError("a categorical knob takes 'choices', not 'low'/'high'")
            return self
        if self.low is None or self.high is None:
            raise ValueError(f"an {self.type} knob needs 'low' and 'high'")
        if self.low >= self.high:
            raise ValueError(f"'low' ({self.low}) must be below 'high' ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError("a log-scale knob needs 'low' > 0")
        if self.log and self.step is not None:
            raise ValueError("'log' and 'step' cannot be combined")
        if self.choices is not None:
            raise ValueError(f"an {self.type} knob takes 'low'/'high', not 'choices'")
        if self.type == "int" and not (
            float(self.low).is_integer() and float(self.high).is_integer()
        ):
            raise ValueError("an int knob needs integer 'low' and 'high'")
        if self.pattern is not None:
            try:
                groups = re.compile(self.pattern, re.M).groups
            except re.error as e:
                raise ValueError(f"'pattern' is not a valid regex: {e}") from e
            if groups != 1:
                raise ValueError(f"'pattern' must have exactly one group, it has {groups}")
        return self

    @property
    def target(self) -> str:
        return self.variable or self.name


class KnobAgent(_Section):
    """The Optuna knob proposer."""

    sampler: Literal["tpe", "random"] = Field("tpe", description="Optuna sampler.")
    n_startup_trials: int = Field(8, ge=0, description="Random trials before TPE models.")


class Agents(_Section):
    """Agent settings. Offline, only the knob proposer exists."""

    knobs: KnobAgent = KnobAgent()


class TaskSpec(_Section):
    """A whole task. ``root`` (the folder of task.toml) is filled in by the loader."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Task name.")
    goal: str = Field("", description="What to achieve, in words, for the agents.")
    source: str = Field(".", description="Folder of the code base, relative to task.toml.")
    editable: tuple[str, ...] = Field(min_length=1, description="Globs agents may change.")
    protected: tuple[str, ...] = Field((), description="Globs of the evaluator and its data.")
    exclude: tuple[str, ...] = Field((), description="Globs kept out of the repository.")
    evaluate: Evaluate
    holdout: Holdout | None = None
    sandbox: SandboxConfig = SandboxConfig()
    search: SearchConfig = GreedySearch()
    budget: Budget = Budget()
    knobs: tuple[Knob, ...] = ()
    agents: Agents = Agents()
    root: str = Field("", description="Absolute folder of the task; set by the loader.")

    @field_validator("knobs")
    @classmethod
    def _unique_knobs(cls, knobs: tuple[Knob, ...]) -> tuple[Knob, ...]:
        names = [k.name for k in knobs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"knob names must be unique: {dup}")
        return knobs

    @property
    def maximize(self) -> bool:
        return self.evaluate.direction == "maximize"

    def with_overrides(self, **sections: dict[str, Any]) -> TaskSpec:
        """A copy with top-level sections updated key by key, validated again."""
        data = self.model_dump(mode="python")
        for section, values in sections.items():
            if values:
                data[section] = {**(data.get(section) or {}), **values}
        if "search" in sections and "policy" in (sections["search"] or {}):
            base = {k: data["search"][k] for k in ("seed", "parallel", "lookahead")}
            data["search"] = {**base, **sections["search"]}
        try:
            return TaskSpec.model_validate(data)
        except ValidationError as e:
            from revtree.tasks.load import format_validation_error

            raise TaskSpecError(
                format_validation_error(e, f"{self.root}/task.toml (overridden)")
            ) from e
