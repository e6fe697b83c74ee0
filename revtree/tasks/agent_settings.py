"""The ``[agents]`` section (who proposes and codes: the LLM roles, the offline knob and
mutation proposers) and the ``[[knobs]]`` the knob proposer sets."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from revtree.tasks.names import EDIT_FORMATS
from revtree.tasks.plugins import resolve_edit_format
from revtree.tasks.sections import Duration, Section


class Knob(Section):
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


class KnobAgent(Section):
    """The Optuna knob proposer. With ``sampler = "local"``, a ``draft`` or ``tune`` asks
    the TPE study as ``"tpe"`` does, while ``improve``, ``debug`` and ``crossover`` search
    near the parent: they perturb its knob values (the first parent's, for crossover)."""

    sampler: Literal["tpe", "random", "local"] = Field(
        "tpe",
        description="tpe, random (Optuna samplers), or local: tpe for drafts, "
        "perturbations of the parent's values for improve, debug and crossover.",
    )
    n_startup_trials: int = Field(8, ge=0, description="Random trials before TPE models.")
    local_scale: float = Field(
        0.2,
        gt=0,
        le=1,
        description="local: std of a knob's Gaussian step as a fraction of its range, "
        "in log space for a log knob; the result is rounded to the int or step grid "
        "and clipped to the range.",
    )
    local_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="local: chance that each knob changes (at least one always does); "
        "a categorical knob that changes takes another of its choices.",
    )


DEFAULT_SWAPS = (("+", "-"), ("*", "/"), ("<", ">"), ("<=", ">="), ("+=", "-="), ("min", "max"))


class MutateAgent(Section):
    """The offline mutation proposer (``mode = "mutate"``): seeded random edits of the
    code's number literals and of interchangeable tokens, no knobs and no model."""

    max_edits: int = Field(2, ge=1, le=20, description="Most mutations in one candidate.")
    draft_edits: int = Field(4, ge=1, le=50, description="Mutations in a draft from the root.")
    scale: float = Field(
        0.5, gt=0, description="Std of the log-factor that multiplies a float literal."
    )
    p_number: float = Field(
        0.9,
        ge=0,
        le=1,
        description="Chance a mutation changes a number, else swaps a token (before the "
        "run learns which kinds break the program).",
    )
    swaps: tuple[tuple[str, ...], ...] = Field(
        DEFAULT_SWAPS,
        description="Groups of interchangeable tokens (operators or names, e.g. "
        '["sin", "cos"]); a swap replaces a token by another of its group.',
    )

    @field_validator("swaps")
    @classmethod
    def _groups(cls, swaps: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...]:
        if any(len(set(g)) < 2 for g in swaps):
            raise ValueError("each swap group needs at least two different tokens")
        return swaps


class EnsembleMember(Section):
    """One model of a role's weighted ensemble."""

    model: str = Field(min_length=1, description="Model, e.g. 'openai:gpt-4o-mini'.")
    weight: float = Field(1.0, gt=0, description="Relative chance of being picked for a call.")


Structured = Literal["auto", "tools", "json_schema", "off"]


class Role(Section):
    """Settings of one LLM role. Unset values fall back to the [agents] defaults."""

    model: str | None = Field(None, description="Model for this role, e.g. 'anthropic:NAME'.")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, ge=16, description="Longest answer, in tokens.")
    ensemble: tuple[EnsembleMember, ...] = Field(
        (), description="Weighted models (instead of model)."
    )
    prompt: str | None = Field(
        None,
        description="Template file overriding the built-in prompt, relative to the task "
        "folder and inside it (no absolute path, no '..').",
    )
    enabled: bool = Field(
        True,
        description="Off: the role is skipped (reviewer, analyst); a disabled proposer "
        "means one call per candidate (see agents.calls); the coder cannot be disabled.",
    )
    structured: Structured | None = Field(
        None, description="Structured answers for this role (default: agents.structured)."
    )

    @field_validator("prompt")
    @classmethod
    def _inside_task(cls, value: str | None) -> str | None:
        """A template is read and sent to the model: only one of the task's own files."""
        if value is None:
            return None
        parts = value.replace("\\", "/").split("/")
        if value.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", value) or ".." in parts:
            raise ValueError(
                f"the prompt template must be a file inside the task folder, given relative "
                f"to it (such as 'prompts/coder.md'), got {value!r}"
            )
        return value

    tools: Literal["auto", "on", "off"] | None = Field(
        None,
        description="Work in steps with tools (search_code, read_file, list_files, run, "
        "the edit tools, done): on, off, or auto (the default for the coder): on where the "
        "role's answers are structured as tool calls. Only the coder uses tools, and only "
        "in two-call mode (agents.calls).",
    )


class Price(Section):
    """Dollars per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0, description="Defaults to input.")


class AgentsSection(Section):
    """Who proposes and codes. ``mode = "auto"`` uses LLM agents when a model is set or an
    OPENAI_API_KEY / ANTHROPIC_API_KEY is present, else the offline knob proposer."""

    mode: Literal["auto", "llm", "knobs", "mutate"] = Field(
        "auto", description="auto, llm, knobs, or mutate (offline random code mutations)."
    )
    model: str | None = Field(
        None,
        description="Default model: 'openai:NAME', 'anthropic:NAME', "
        "'openai-compatible:NAME' (with base_url) or 'scripted:...' (tests).",
    )
    base_url: str | None = Field(None, description="OpenAI-compatible server, e.g. vLLM.")
    api_key_env: str | None = Field(None, description="Variable holding the key (by provider).")
    timeout: Duration = Field(120.0, description="Per-call timeout.")
    max_retries: int = Field(4, ge=0, le=20, description="Retries on 429, 5xx and timeouts.")
    stream: bool = Field(
        True,
        description="Stream the answers: the live log shows a long answer's progress, and "
        "timeout bounds each wait for the next chunk (a stalled stream fails the call).",
    )
    temperature: float = Field(0.7, ge=0, le=2, description="Default temperature.")
    max_tokens: int = Field(4096, ge=16, description="Default longest answer, in tokens.")
    edit_format: str = Field(
        "auto",
        description="How the coder edits: search_replace (SEARCH/REPLACE blocks), whole_file "
        "(whole files) or auto (either); or an edit format of one's own: "
        "'package.module:Class' or an entry point of group revtree.edit_formats.",
    )
    structured: Structured = Field(
        "auto",
        description="Typed answers (edits as edit_file/write_file calls, the hypothesis, "
        "plan and verdict as fields): tools (tool calls), json_schema (an OpenAI JSON "
        "response format; tools for Anthropic), off (plain text), or auto: tools for "
        "openai: and anthropic: models, text for openai-compatible: ones. A server that "
        "refuses them gets plain text for the rest of the run.",
    )
    calls: Literal["auto", "one", "two"] = Field(
        "auto",
        description="Model calls per candidate: two (the proposer's hypothesis, then the "
        "coder's edits) or one (the coder answers both, as OpenEvolve does); auto is one "
        "when [agents.proposer] is disabled, else two.",
    )
    memory_tokens: int = Field(1500, ge=0, description="Token budget of memory in a prompt.")
    context_tokens: int = Field(
        24000,
        ge=1000,
        description="Token budget of code in a prompt: the editable files first, then a "
        "repository map, then the files retrieval finds for the candidate.",
    )
    repo_map_share: float = Field(
        0.1, ge=0, le=0.5, description="Share of context_tokens for the repository map."
    )
    related_files: int = Field(
        5, ge=0, le=50, description="Most files retrieval adds to a candidate's prompt."
    )
    embeddings_model: str | None = Field(
        None,
        description="Model of an OpenAI-compatible /embeddings endpoint (at base_url) for "
        "semantic search; unset: keyword search (BM25) only.",
    )
    max_steps: int = Field(
        12, ge=1, le=200, description="Most model calls of a tool-using coder per candidate."
    )
    max_runs: int = Field(
        3, ge=0, le=50, description="Most run(command) checks of a tool-using coder per candidate."
    )
    run_timeout: Duration = Field(20.0, description="Time limit of each run(command) check.")
    prices: dict[str, Price] = Field(default_factory=dict, description="Per-model price overrides.")
    model_selection: Literal["weights", "bandit"] = Field(
        "weights",
        description="How a role with an ensemble (the proposer's, the coder's) picks the "
        "model of each candidate: weights (by its weight, each call), or bandit (Thompson "
        "sampling, per candidate, rewarded by the candidate's gain over its parent).",
    )
    bandit_cost_penalty: float = Field(
        0.0,
        ge=0,
        description="bandit: reward taken off per dollar a candidate's calls to the model "
        "cost (a reward is between 0 and 1).",
    )
    proposer: Role = Role()
    coder: Role = Role()
    reviewer: Role = Field(
        Role(),
        description="On by default in LLM mode (no effect offline); enabled = false skips it.",
    )
    analyst: Role = Role(enabled=False)
    knobs: KnobAgent = KnobAgent()
    mutate: MutateAgent = MutateAgent()

    @field_validator("edit_format")
    @classmethod
    def _known_format(cls, name: str) -> str:
        if name not in EDIT_FORMATS:
            resolve_edit_format(name)  # a one-line ValueError where it does not resolve
        return name

    @model_validator(mode="after")
    def _roles_needed(self) -> AgentsSection:
        if not self.coder.enabled and self.mode in ("auto", "llm"):
            raise ValueError(
                "agents.coder.enabled = false: the coder writes every candidate's edits "
                'and cannot be disabled (to skip the proposer, set agents.calls = "one")'
            )
        for name in ("proposer", "reviewer", "analyst"):
            if getattr(self, name).tools == "on":
                raise ValueError(f'agents.{name}.tools = "on": only the coder works with tools')
        if self.calls == "two" and not self.proposer.enabled:
            raise ValueError(
                'agents.calls = "two" needs the proposer, which is disabled: enable '
                '[agents.proposer] or set agents.calls = "one"'
            )
        return self

    @property
    def one_call(self) -> bool:
        """Whether one coder call gives both the hypothesis and the edits."""
        return self.calls == "one" or (self.calls == "auto" and not self.proposer.enabled)
