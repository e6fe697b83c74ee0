"""Dollars per million tokens by model, overridable per task (``[agents.prices]``).

Prices change; the table holds list prices known when this was written and a task can
override any of them. An unknown model costs 0 (and is reported as such).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from revtree.agents.llm.base import Usage


@dataclass(frozen=True)
class Rate:
    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None


PRICES: dict[str, Rate] = {
    "gpt-4o": Rate(2.5, 10.0, 1.25),
    "gpt-4o-mini": Rate(0.15, 0.6, 0.075),
    "gpt-4.1": Rate(2.0, 8.0, 0.5),
    "gpt-4.1-mini": Rate(0.4, 1.6, 0.1),
    "gpt-4.1-nano": Rate(0.1, 0.4, 0.025),
    "o3-mini": Rate(1.1, 4.4, 0.55),
    "o4-mini": Rate(1.1, 4.4, 0.275),
    "claude-3-5-haiku": Rate(0.8, 4.0, 0.08, 1.0),
    "claude-3-7-sonnet": Rate(3.0, 15.0, 0.3, 3.75),
    "claude-sonnet-4": Rate(3.0, 15.0, 0.3, 3.75),
    "claude-opus-4": Rate(15.0, 75.0, 1.5, 18.75),
}


def rate_for(model: str, overrides: Mapping[str, Rate] | None = None) -> Rate | None:
    """The rate of a model: an exact override, else the longest known name it starts with."""
    name = model.split(":", 1)[-1]
    table = {**PRICES, **(overrides or {})}
    if name in table:
        return table[name]
    matches = [k for k in table if name.startswith(k)]
    return table[max(matches, key=len)] if matches else None


def cost(usage: Usage, rate: Rate | None) -> float:
    if rate is None:
        return 0.0
    fresh = usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens
    cached = rate.cached_input if rate.cached_input is not None else rate.input
    write = rate.cache_write if rate.cache_write is not None else rate.input
    return (
        max(fresh, 0) * rate.input
        + usage.cached_tokens * cached
        + usage.cache_write_tokens * write
        + usage.output_tokens * rate.output
    ) / 1e6
