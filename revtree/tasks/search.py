"""The ``[search]`` section: one model per tree-search policy, told apart by ``policy``;
a policy that is not built in is a :class:`PluginSearch` (see :mod:`revtree.tasks.plugins`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from revtree.tasks.names import POLICIES
from revtree.tasks.plugins import check_options, resolve_policy
from revtree.tasks.sections import Section

DEFAULT_BINS = 6


class _Search(Section):
    profile: str | None = Field(
        None,
        description="A named profile ($REVTREE_HOME/profiles/NAME.toml, written by `revtree "
        "tune`) whose [search] keys are the defaults of this table; a key set here wins.",
    )
    seed: int = Field(0, description="Seed of the policy and proposer RNGs.")
    parallel: int = Field(1, ge=1, le=256, description="Evaluations running at once.")
    lookahead: int | None = Field(
        None,
        ge=0,
        le=256,
        description="Candidates prepared (selected, proposed, coded, reviewed) ahead of a free "
        "evaluation slot, so slots never wait for agents. Default: equal to parallel; at "
        "parallel 1, the next candidate is prepared while one is evaluated, and a seeded run "
        "stays reproducible (each choice, proposal and edit made with the candidate before it "
        "unscored; a stop and resume chooses as the uninterrupted run), unless the run asks "
        "for approval or a model chooses. 0: strictly one at a time, each choice seeing every "
        "score, and no agent work beside an evaluation (for a timing metric).",
    )
    approve: Literal["off", "evaluate"] = Field(
        "off",
        description="Human approval: 'evaluate' holds each candidate before its evaluation "
        "until `revtree approve RUN NODE` (or `revtree reject RUN NODE --why TEXT`); its "
        "hypothesis and diff are in the live log.",
    )
    novelty_threshold: float = Field(
        0.999,
        ge=0,
        le=1,
        description="Refuse, before its evaluation, a candidate whose code is more alike than "
        "this to a node already evaluated in the run (1 - the characters that differ from "
        "that node / the characters it changed from its parent, over the editable files, "
        "trailing spaces and blank lines aside); the twin is named and the proposer told. "
        "1.0: off.",
    )
    novelty_embeddings_threshold: float = Field(
        0.99,
        ge=0,
        le=1,
        description="Where [agents] embeddings_model is set: also refuse a candidate whose "
        "change (its diff from its parent) embeds with a cosine above this to an evaluated "
        "node's change, unless their texts are wholly different (embeddings barely see "
        "numbers: two values of one constant are both tried). 1.0: off.",
    )


COMMON_KEYS = tuple(_Search.model_fields)
"""The ``[search]`` keys of every policy: kept when an override changes the policy."""


class GreedySearch(_Search):
    """AIDE's policy: a few drafts, debug failed leaves, then improve the best."""

    policy: Literal["greedy"] = "greedy"
    num_drafts: int = Field(3, ge=1, description="Children of the root before improving.")
    debug_prob: float = Field(0.5, ge=0, le=1, description="Chance to debug a failed leaf.")
    max_debug_depth: int = Field(3, ge=0, description="Longest chain of debug fixes.")
    operators: Literal["policy", "bandit"] = Field(
        "policy",
        description="Who picks the operator where this policy's rules leave a choice "
        "(after the drafts: draft, improve or debug, instead of debug_prob): 'policy', its fixed "
        "chances; 'bandit', a Thompson-sampling bandit rewarded with each candidate's gain "
        "over the run's best when it finished (the live log names its choice; `revtree show` "
        "and the dashboard give each operator's candidates and mean reward).",
    )


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
    operators: Literal["policy", "bandit"] = Field(
        "policy",
        description="Who picks the operator where this policy's rules leave a choice "
        "(improve or crossover, instead of crossover_rate): 'policy', its fixed "
        "chances; 'bandit', a Thompson-sampling bandit rewarded with each candidate's gain "
        "over the run's best when it finished (the live log names its choice; `revtree show` "
        "and the dashboard give each operator's candidates and mean reward).",
    )
    num_inspirations: int = Field(2, ge=0, description="Other elites shown to the proposer.")
    features: tuple[str, ...] = Field(
        ("depth", "operator"),
        description="MAP-Elites dimensions: 'depth', 'operator', 'lineage', "
        "'knob:NAME:LOW:HIGH', 'score', 'metric:NAME' (an evaluator metric), 'code_size' "
        "(characters of the editable files), 'diff_size' (lines changed from the parent), "
        "'drift' (lines changed from the baseline) -- the last five scaled between the "
        "lowest and highest value seen so far -- or a dotted path to a function "
        "node -> tuple of floats in [0, 1].",
    )
    feature_bins: int | dict[str, int] = Field(
        6,
        description="Bins per feature dimension: one number for all, or a table "
        "feature -> bins (a feature it leaves out gets 6).",
    )

    @model_validator(mode="after")
    def _ratios(self) -> EvolutionSearch:
        if self.exploration_ratio + self.exploitation_ratio > 1:
            raise ValueError("exploration_ratio + exploitation_ratio must be at most 1")
        bins = self.feature_bins
        table = bins if isinstance(bins, dict) else {"": bins}
        bad = {k: v for k, v in table.items() if v < 1}
        if bad:
            raise ValueError(f"feature_bins must be at least 1, got {bad}")
        unknown = sorted(set(table) - set(self.features) - {""})
        if unknown:
            raise ValueError(f"feature_bins names features not in 'features': {unknown}")
        return self

    def bins(self, feature: str) -> int:
        """The bins of one feature dimension."""
        if isinstance(self.feature_bins, dict):
            return self.feature_bins.get(feature, DEFAULT_BINS)
        return self.feature_bins


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


class PluginSearch(_Search):
    """A policy that is not built in: ``"package.module:Class"``, or the name of an entry
    point in the group ``revtree.policies``, built as ``Class(seed, **options)``. Resolved
    and checked against the Policy protocol's methods when the task is loaded."""

    policy: str = Field(
        description="'package.module:Class', or a name an installed package registers in "
        "the entry-point group 'revtree.policies'."
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="[search.options]: keyword arguments of the policy's constructor.",
    )

    @field_validator("policy")
    @classmethod
    def _resolves(cls, policy: str) -> str:
        resolve_policy(policy)
        return policy

    @field_validator("options")
    @classmethod
    def _fit(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        policy = info.data.get("policy")
        if policy is not None:  # else the policy's own error says what is wrong
            check_options(resolve_policy(policy), policy, options)
        return options


PLUGIN = "plugin"
"""The union tag of :class:`PluginSearch` (every ``policy`` that is not built in)."""


def _tag(value: Any) -> str:
    """The union member a ``[search]`` table validates as: its built-in policy, else the
    plugin."""
    name = value.get("policy") if isinstance(value, dict) else getattr(value, "policy", None)
    return name if name in POLICIES else PLUGIN


def _default_policy(value: Any) -> Any:
    """A ``[search]`` table without ``policy`` means the default policy, greedy."""
    if isinstance(value, dict) and "policy" not in value:
        return {**value, "policy": "greedy"}
    return value


SearchConfig = Annotated[
    Annotated[GreedySearch, Tag("greedy")]
    | Annotated[RandomSearch, Tag("random")]
    | Annotated[OptunaSearch, Tag("optuna")]
    | Annotated[MctsSearch, Tag("mcts")]
    | Annotated[EvolutionSearch, Tag("evolution")]
    | Annotated[BgmctsSearch, Tag("bgmcts")]
    | Annotated[ExtsSearch, Tag("exts")]
    | Annotated[AgenticSearch, Tag("agentic")]
    | Annotated[PluginSearch, Tag(PLUGIN)],
    Discriminator(_tag),
    BeforeValidator(_default_policy),
]
