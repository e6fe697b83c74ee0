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


def _output_globs(value: Any) -> Any:
    bad = [g for g in value or () if not _is_workspace_path(g)]
    if bad:
        raise ValueError(
            f"outputs must be relative globs inside the workspace (no '/' at the start, "
            f"no '..'): {bad}"
        )
    return value


class Grade(_Section):
    """The trusted grade step: it runs in a fresh sandbox holding only the protected
    files and the run step's declared outputs (under ``outputs/``, named by
    ``$REVTREE_OUTPUTS``), never candidate code; the score comes from it alone."""

    command: str = Field(min_length=1, description="Shell command of the trusted grader.")
    timeout: Duration | None = Field(
        None, description="Wall timeout of the grader; defaults to the run step's timeout."
    )


class Stage(_Section):
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


class Evaluate(_Section):
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
    outputs: tuple[str, ...] = Field(
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
        _check_grade(self.grade, self.outputs, "evaluate")
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


def _check_grade(grade: Grade | None, outputs: tuple[str, ...], where: str) -> None:
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
    outputs: tuple[str, ...] | None = Field(
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
            _check_grade(None, self.outputs, "holdout")
        return self


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
    image: str | None = Field(
        None,
        description="Docker image of the evaluations. Default: the locally bootstrapped "
        "revtree-base image if the engine has it, else python:3.11-slim.",
    )
    cpus: float | None = Field(None, gt=0, description="Docker: CPUs per evaluation (nano_cpus).")
    gpus: int = Field(
        0, ge=0, description="Docker: GPUs per evaluation, distinct among concurrent ones."
    )
    network: Literal["none", "bridge", "host"] = Field(
        "none", description="Docker: network of the container; 'none' unless you opt in."
    )
    mounts: dict[str, str] = Field(
        default_factory=dict,
        description="Docker: read-only bind mounts, container path -> host path (relative "
        "host paths are relative to task.toml), e.g. datasets.",
    )
    warm_pool: int = Field(
        2,
        ge=0,
        le=64,
        description="Docker: containers created and started ahead (running only an idle "
        "process, never reused), so an evaluation skips container start-up; 0 turns it off.",
    )
    outputs: tuple[str, ...] = Field(
        (), description="Docker: workspace files copied out after each evaluation (size-capped)."
    )
    disk: Size = Field(
        512 * 2**20, description="Docker: size cap of the writable workspace (and of /tmp)."
    )

    @field_validator("mounts")
    @classmethod
    def _absolute_targets(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [t for t in value if not t.startswith("/") or t.rstrip("/") in ("", "/sandbox")]
        if bad:
            raise ValueError(f"mount targets must be absolute container paths: {bad}")
        return value

    @field_validator("outputs")
    @classmethod
    def _relative_outputs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [o for o in value if o.startswith("/") or ".." in o.split("/") or not o.strip()]
        if bad:
            raise ValueError(f"outputs must be paths inside the workspace: {bad}")
        return value

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


class _Verified(_Search):
    """Noise handling shared by the tree policies (needs the orchestrator's "verify")."""

    verify_top_k: int = Field(
        0,
        ge=0,
        description="Re-evaluate the k best nodes before exploiting them (0: off; needs the "
        "orchestrator's 'verify' operator).",
    )
    verify_repeats: int = Field(
        3, ge=1, description="Evaluations a top-k node must have before it is exploited."
    )
    noise_z: float = Field(
        1.0,
        ge=0,
        description="Rank nodes by mean - noise_z * standard error (0: by the mean).",
    )


class MctsSearch(_Verified):
    """UCT over the candidate tree (AIRA-dojo), Q min-max normalised in the better direction."""

    policy: Literal["mcts"] = "mcts"
    uct_c: float = Field(1.0, ge=0, description="Exploration constant of UCT.")
    num_children: int = Field(5, ge=1, description="Children a node holds before UCT descends.")
    progressive_widening: bool = Field(
        False, description="Allow ceil(pw_k * visits^pw_alpha) children instead."
    )
    pw_k: float = Field(1.0, gt=0, description="Progressive widening: scale.")
    pw_alpha: float = Field(0.5, gt=0, le=1, description="Progressive widening: exponent.")
    max_debug_depth: int = Field(3, ge=0, description="Longest chain of debug fixes.")


class EvolutionSearch(_Verified):
    """MAP-Elites with islands (OpenEvolve, FunSearch)."""

    policy: Literal["evolution"] = "evolution"
    num_islands: int = Field(4, ge=1, description="Islands; the ring migrates elites.")
    migration_interval: int = Field(
        5, ge=1, description="Generations (programs per island) between migrations."
    )
    migration_rate: float = Field(
        0.1, ge=0, le=1, description="Fraction of an island's programs sent to the next."
    )
    archive_size: int = Field(20, ge=1, description="Elites kept in the global archive.")
    exploration_ratio: float = Field(
        0.2, ge=0, le=1, description="Chance the parent is a random cell elite of the island."
    )
    exploitation_ratio: float = Field(
        0.7, ge=0, le=1, description="Chance the parent comes from the elite archive."
    )
    crossover_rate: float = Field(
        0.1, ge=0, le=1, description="Chance of a 'crossover' with a second elite parent."
    )
    num_inspirations: int = Field(2, ge=0, description="Other elites shown to the proposer.")
    features: tuple[str, ...] = Field(
        ("depth", "operator"),
        description="MAP-Elites dimensions: 'depth', 'operator', 'lineage', "
        "'knob:NAME:LOW:HIGH', or a dotted path to a function node -> tuple of floats in [0, 1].",
    )
    feature_bins: int = Field(6, ge=1, description="Bins per feature dimension.")

    @model_validator(mode="after")
    def _ratios(self) -> EvolutionSearch:
        if self.exploration_ratio + self.exploitation_ratio > 1:
            raise ValueError("exploration_ratio + exploitation_ratio must be at most 1")
        return self


class BgmctsSearch(_Verified):
    """Budget-guided MCTS (Miyamoto et al., 2026): explore early, go deep late."""

    policy: Literal["bgmcts"] = "bgmcts"
    uct_c: float = Field(1.0, ge=0, description="Exploration constant, scaled by 1 - rho.")
    kappa: float = Field(0.5, ge=0, description="Depth bonus kappa * rho * depth / d_ans.")
    lam: float = Field(
        2.0, ge=0, description="Virtual child: mean + lam * (1 - rho) * var of the children."
    )
    d_ans: float | None = Field(
        None, gt=0, description="Depth scale of an answer; default: the deepest node so far."
    )
    max_debug_depth: int = Field(3, ge=0, description="Longest chain of debug fixes.")


class ExtsSearch(_Verified):
    """Tree search that expands a node when its value of information pays for the cost."""

    policy: Literal["exts"] = "exts"
    prior_strength: float = Field(
        1.0, gt=0, description="Pseudo-children behind the prior mean of a node's children."
    )
    prior_alpha: float = Field(2.0, gt=1, description="Normal-Inverse-Gamma shape prior.")
    prior_var: float = Field(0.05, gt=0, description="Prior variance of a child's reward.")
    threshold: float = Field(
        0.2, ge=0, description="Expected improvement per cost needed to expand, at rho = 1."
    )
    base_children: int = Field(2, ge=1, description="Children any node may hold.")
    widen: float = Field(2.0, ge=0, description="Extra children for a node at percentile 1.")
    debug_prob: float = Field(0.5, ge=0, le=1, description="Chance to debug a failed leaf.")
    max_debug_depth: int = Field(3, ge=0, description="Longest chain of debug fixes.")


class AgenticSearch(GreedySearch):
    """An LLM agent reads a summary of the tree, memory and budget and picks the parent
    and operator (or verifies a node, or restarts from the root). An answer it cannot
    use falls back to greedy, with the reason recorded."""

    policy: Literal["agentic"] = "agentic"  # type: ignore[assignment]
    summary_nodes: int = Field(12, ge=3, le=200, description="Nodes shown to the agent.")
    verify_repeats: int = Field(3, ge=2, le=50, description="Repeats when it asks to verify.")


def _default_policy(value: Any) -> Any:
    """A ``[search]`` table without ``policy`` means the default policy, greedy."""
    if isinstance(value, dict) and "policy" not in value:
        return {**value, "policy": "greedy"}
    return value


SearchConfig = Annotated[
    GreedySearch
    | RandomSearch
    | OptunaSearch
    | MctsSearch
    | EvolutionSearch
    | BgmctsSearch
    | ExtsSearch
    | AgenticSearch,
    Field(discriminator="policy"),
    BeforeValidator(_default_policy),
]
POLICIES = ("greedy", "random", "optuna", "mcts", "evolution", "bgmcts", "exts", "agentic")


class Budget(_Section):
    """Limits checked before any new work starts; reaching one ends the run cleanly."""

    max_nodes: int | None = Field(50, ge=1, description="Nodes in the tree, root included.")
    max_wall: Duration | None = Field(None, description="Wall time the run may be active.")
    max_sandbox_seconds: Duration | None = Field(None, description="Summed evaluation time.")
    max_usd: float | None = Field(None, gt=0, description="LLM spend in dollars (never exceeded).")
    max_tokens: int | None = Field(None, gt=0, description="LLM tokens, input plus output.")


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


class MutateAgent(_Section):
    """The offline mutation proposer (``mode = "mutate"``): seeded random edits of the
    code's number literals and of interchangeable tokens, no knobs and no model."""

    max_edits: int = Field(2, ge=1, le=20, description="Most mutations in one candidate.")
    draft_edits: int = Field(4, ge=1, le=50, description="Mutations in a draft from the root.")
    scale: float = Field(
        0.5, gt=0, description="Std of the log-factor that multiplies a float literal."
    )
    p_number: float = Field(
        0.6, ge=0, le=1, description="Chance a mutation changes a number, else swaps a token."
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


class EnsembleMember(_Section):
    """One model of a role's weighted ensemble."""

    model: str = Field(min_length=1, description="Model, e.g. 'openai:gpt-4o-mini'.")
    weight: float = Field(1.0, gt=0, description="Relative chance of being picked for a call.")


Structured = Literal["auto", "tools", "json_schema", "off"]


class Role(_Section):
    """Settings of one LLM role. Unset values fall back to the [agents] defaults."""

    model: str | None = Field(None, description="Model for this role, e.g. 'anthropic:NAME'.")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, ge=16, description="Longest answer, in tokens.")
    ensemble: tuple[EnsembleMember, ...] = Field(
        (), description="Weighted models (instead of model)."
    )
    prompt: str | None = Field(None, description="Template file overriding the built-in prompt.")
    enabled: bool = Field(
        True,
        description="Off: the role is skipped (reviewer, analyst); a disabled proposer "
        "means one call per candidate (see agents.calls); the coder cannot be disabled.",
    )
    structured: Structured | None = Field(
        None, description="Structured answers for this role (default: agents.structured)."
    )
    tools: Literal["auto", "on", "off"] | None = Field(
        None,
        description="Work in steps with tools (search_code, read_file, list_files, run, "
        "the edit tools, done): on, off, or auto (the default for the coder): on where the "
        "role's answers are structured as tool calls. Only the coder uses tools, and only "
        "in two-call mode (agents.calls).",
    )


class Price(_Section):
    """Dollars per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0, description="Defaults to input.")


class Agents(_Section):
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
    edit_format: Literal["search_replace", "whole_file", "auto"] = Field(
        "auto", description="How the coder edits: SEARCH/REPLACE blocks, whole files, or either."
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
    proposer: Role = Role()
    coder: Role = Role()
    reviewer: Role = Field(
        Role(),
        description="On by default in LLM mode (no effect offline); enabled = false skips it.",
    )
    analyst: Role = Role(enabled=False)
    knobs: KnobAgent = KnobAgent()
    mutate: MutateAgent = MutateAgent()

    @model_validator(mode="after")
    def _roles_needed(self) -> Agents:
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


class Trust(_Section):
    """How far a reported best is trusted: re-evaluation against noise, the holdout
    guard against drift (reward hacks, overfitting to the dev evaluator), and when a
    run stops rather than burn its budget on failures that are not the candidates'."""

    verify_repeats: int = Field(
        3,
        ge=1,
        le=100,
        description="Full-stage repeats of a new best and of the baseline before a best is "
        "reported (1: off); the summary's improvement carries their uncertainty.",
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


def _is_workspace_path(path: str) -> bool:
    """A relative posix path inside the workspace: no '..', '.', empty parts or backslashes."""
    parts = path.split("/")
    return bool(path) and "\\" not in path and all(p not in ("", ".", "..") for p in parts)


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
    trust: Trust = Trust()
    support_files: dict[str, str] = Field(
        default_factory=dict,
        description="Generated files copied into every evaluation workspace as protected "
        "files, workspace path -> content (e.g. compatibility shims); never in the repository.",
    )
    root: str = Field("", description="Absolute folder of the task; set by the loader.")

    @field_validator("support_files")
    @classmethod
    def _relative_support_files(cls, files: dict[str, str]) -> dict[str, str]:
        bad = [p for p in files if not _is_workspace_path(p)]
        if bad:
            raise ValueError(f"support files need relative paths without '..': {bad}")
        return files

    @model_validator(mode="after")
    def _holdout_grade_outputs(self) -> TaskSpec:
        h = self.holdout
        if h is not None and h.grade is not None:
            _check_grade(h.grade, self.holdout_outputs, "holdout")
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
