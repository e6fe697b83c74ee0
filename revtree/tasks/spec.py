"""The task specification: what to optimise, how to score it, and within what budget.

A task is a folder holding a ``task.toml``. Every section is a pydantic model with
``extra="forbid"``: an unknown key is an error, never silently ignored. Errors are
raised as :class:`~revtree.errors.TaskSpecError` naming the file, the key and what was
expected. Checks that need the file system (globs match, knob locations exist) live
in :mod:`revtree.tasks.load`.

This module holds :class:`TaskSpec`, the whole task; its sections live in
:mod:`revtree.tasks.sections` (evaluate, holdout, budget, trust),
:mod:`revtree.tasks.sandbox` (one ``[sandbox]`` model per backend),
:mod:`revtree.tasks.search` (the search policies), :mod:`revtree.tasks.runner` (where
evaluations run: this machine or a Ray cluster) and :mod:`revtree.tasks.agent_settings`
(agents and knobs), and every name is importable from here as well.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from revtree.errors import TaskSpecError
from revtree.tasks.agent_settings import (
    DEFAULT_SWAPS,
    AgentsSection,
    EnsembleMember,
    Knob,
    KnobAgent,
    MutateAgent,
    Price,
    Role,
    Structured,
)
from revtree.tasks.names import POLICIES, SECRET_NAME, is_secret
from revtree.tasks.runner import RunnerConfig
from revtree.tasks.sandbox import (
    AutoConfig,
    BwrapConfig,
    DockerConfig,
    LocalConfig,
    SandboxBase,
    SandboxConfig,
    keys_for,
)
from revtree.tasks.search import (
    COMMON_KEYS,
    AgenticSearch,
    BgmctsSearch,
    EvolutionSearch,
    ExtsSearch,
    GreedySearch,
    MctsSearch,
    OptunaSearch,
    RandomSearch,
    SearchConfig,
)
from revtree.tasks.sections import (
    BudgetSection,
    Duration,
    Evaluate,
    Globs,
    Grade,
    Holdout,
    Section,
    Size,
    Stage,
    TrustSection,
    check_grade,
    is_workspace_path,
    parse_duration,
    parse_size,
)

MAX_FILE_SIZE = 50 * 2**20
"""The default ``max_file_size``: 50 MiB."""

__all__ = [
    "DEFAULT_SWAPS",
    "MAX_FILE_SIZE",
    "POLICIES",
    "SECRET_NAME",
    "AgenticSearch",
    "AgentsSection",
    "AutoConfig",
    "BgmctsSearch",
    "BudgetSection",
    "BwrapConfig",
    "DockerConfig",
    "Duration",
    "EnsembleMember",
    "Evaluate",
    "EvolutionSearch",
    "ExtsSearch",
    "Globs",
    "Grade",
    "GreedySearch",
    "Holdout",
    "Knob",
    "KnobAgent",
    "LocalConfig",
    "MctsSearch",
    "MutateAgent",
    "OptunaSearch",
    "Price",
    "RandomSearch",
    "Role",
    "RunnerConfig",
    "SandboxBase",
    "SandboxConfig",
    "SearchConfig",
    "Section",
    "Size",
    "Stage",
    "Structured",
    "TaskSpec",
    "TrustSection",
    "is_secret",
    "parse_duration",
    "parse_size",
]


def retarget(data: dict[str, Any], changed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``data`` (a dumped spec, ``changed`` merged in) where ``changed`` names a new
    ``search.policy`` (the keys every policy has, and ``changed``'s) or a new
    ``sandbox.backend`` (the keys of the section it takes): what an override and a
    ``--set`` keep of the sections they switch."""
    search = changed.get("search") or {}
    if "policy" in search:
        base = {k: v for k, v in data["search"].items() if k in COMMON_KEYS}
        data = {**data, "search": {**base, **search}}
    box = changed.get("sandbox") or {}
    if "backend" in box:
        data = {**data, "sandbox": keys_for(data["sandbox"], str(box["backend"]))}
    return data


class TaskSpec(Section):
    """A whole task. ``root`` (the folder of task.toml) is filled in by the loader."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Task name.")
    goal: str = Field("", description="What to achieve, in words, for the agents.")
    source: str = Field(".", description="Folder of the code base, relative to task.toml.")
    editable: Globs = Field(min_length=1, description="Globs agents may change.")
    protected: Globs = Field((), description="Globs of the evaluator and its data.")
    exclude: Globs = Field((), description="Globs kept out of the repository.")
    max_file_size: Size = Field(
        MAX_FILE_SIZE,
        description="Largest source file a run takes into its repository; a larger one "
        "stops the run's creation (keep it out with exclude, or raise this).",
    )
    evaluate: Evaluate
    holdout: Holdout | None = None
    sandbox: SandboxConfig = AutoConfig()
    runner: RunnerConfig = RunnerConfig()
    search: SearchConfig = GreedySearch()
    budget: BudgetSection = BudgetSection()
    knobs: tuple[Knob, ...] = ()
    agents: AgentsSection = AgentsSection()
    trust: TrustSection = TrustSection()
    support_files: dict[str, str] = Field(
        default_factory=dict,
        description="Generated files copied into every evaluation workspace as protected "
        "files, workspace path -> content (e.g. compatibility shims); never in the repository.",
    )
    root: str = Field("", description="Absolute folder of the task; set by the loader.")

    @field_validator("support_files")
    @classmethod
    def _relative_support_files(cls, files: dict[str, str]) -> dict[str, str]:
        bad = [p for p in files if not is_workspace_path(p)]
        if bad:
            raise ValueError(f"support files need relative paths without '..': {bad}")
        return files

    @model_validator(mode="after")
    def _holdout_grade_outputs(self) -> TaskSpec:
        h = self.holdout
        if h is not None and h.grade is not None:
            check_grade(h.grade, self.holdout_outputs, "holdout")
        return self

    @property
    def holdout_outputs(self) -> tuple[str, ...]:
        """The holdout's output globs: its own, else evaluate.outputs."""
        own = self.holdout.outputs if self.holdout is not None else None
        return own if own is not None else self.evaluate.outputs

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

    @classmethod
    def stored(cls, data: dict[str, Any]) -> TaskSpec:
        """A run's stored spec, or one about to be stored (``resume --reload``'s merge):
        its ``[sandbox]`` keeps the keys its backend takes. A version before one model per
        backend stored every backend's keys whatever its backend (a task file is still
        checked whole, at load)."""
        box = data.get("sandbox")
        if isinstance(box, dict):
            data = {**data, "sandbox": keys_for(box, str(box.get("backend", "auto")))}
        return cls.model_validate(data)

    def with_overrides(self, **sections: dict[str, Any]) -> TaskSpec:
        """A copy with top-level sections updated key by key, validated again; a new
        ``sandbox.backend`` keeps the keys of the task's ``[sandbox]`` that it takes."""
        data = self.model_dump(mode="python")
        for section, values in sections.items():
            if values:
                data[section] = {**(data.get(section) or {}), **values}
        data = retarget(data, sections)
        try:
            return TaskSpec.model_validate(data)
        except ValidationError as e:
            from revtree.tasks.load import format_validation_error

            raise TaskSpecError(
                format_validation_error(e, f"{self.root}/task.toml (overridden)")
            ) from e
