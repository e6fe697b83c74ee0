"""LLM clients: OpenAI, Anthropic, OpenAI-compatible servers, and a scripted fake."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence

from revtree.agents.llm.base import (
    LLM,
    BudgetExhausted,
    Completion,
    LLMError,
    Prompt,
    StreamStalled,
    Usage,
    estimate_tokens,
)
from revtree.agents.llm.scripted import ScriptedLLM

KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
DEFAULT_MODELS = {"openai": "openai:gpt-4o-mini", "anthropic": "anthropic:claude-3-5-haiku-latest"}


def split_model(model: str) -> tuple[str, str]:
    """``'openai:gpt-4o'`` -> ``('openai', 'gpt-4o')``; a bare name is guessed."""
    provider, sep, name = model.partition(":")
    if sep:
        return provider, name
    return ("anthropic" if model.startswith("claude") else "openai"), model


def make_llm(
    model: str,
    base_url: str | None = None,
    api_key_env: str | None = None,
    timeout: float = 120.0,
    max_retries: int = 4,
    stream: bool = False,
) -> LLM:
    """A client for ``provider:name`` (openai, anthropic, openai-compatible); ``stream``:
    answers are streamed (progress reported, stalls detected)."""
    provider, name = split_model(model)
    key_env = api_key_env or KEY_ENV.get(provider, "OPENAI_API_KEY")
    key = os.environ.get(key_env)
    if provider in ("openai", "openai-compatible"):
        if provider == "openai" and not key and not base_url:
            raise LLMError(f"model {model!r} needs {key_env} or a base_url")
        if provider == "openai-compatible" and not base_url:
            raise LLMError(f"model {model!r} needs a base_url (e.g. http://host:8000/v1)")
        from revtree.agents.llm.openai_client import OpenAIChat

        return OpenAIChat(name, key, base_url, timeout, max_retries, key_env, stream)
    if provider == "anthropic":
        if not key and not base_url:
            raise LLMError(f"model {model!r} needs {key_env}")
        from revtree.agents.llm.anthropic_client import AnthropicChat

        return AnthropicChat(name, key, base_url, timeout, max_retries, key_env, stream)
    raise LLMError(
        f"unknown model provider {provider!r} in {model!r}; expected openai, "
        "anthropic or openai-compatible"
    )


def missing_key(model: str, base_url: str | None, api_key_env: str | None) -> str | None:
    """Why ``model`` cannot be called here (no key and no base URL), or None."""
    try:
        provider, _ = split_model(model)
    except ValueError:
        return None  # make_llm says what is wrong with the name
    key_env = api_key_env or KEY_ENV.get(provider, "OPENAI_API_KEY")
    if provider in ("openai", "anthropic") and not os.environ.get(key_env) and not base_url:
        return f"model {model!r} needs {key_env} or a base_url"
    return None


def detect_model() -> str | None:
    """The default model when a provider key is in the environment."""
    for provider, env in KEY_ENV.items():
        if os.environ.get(env):
            return DEFAULT_MODELS[provider]
    return None


class Ensemble:
    """Picks one member per call, by weight, with a seeded RNG."""

    def __init__(self, members: Sequence[LLM], weights: Sequence[float], seed: int) -> None:
        self.members, self.weights = list(members), list(weights)
        self.rng = random.Random(seed)
        self.model = "+".join(m.model for m in self.members)

    def pick(self) -> LLM:
        return self.rng.choices(self.members, self.weights)[0]

    def complete(self, prompt: Prompt, *, max_tokens: int, temperature: float) -> Completion:
        return self.pick().complete(prompt, max_tokens=max_tokens, temperature=temperature)


__all__ = [
    "LLM",
    "BudgetExhausted",
    "Completion",
    "Ensemble",
    "LLMError",
    "Prompt",
    "ScriptedLLM",
    "StreamStalled",
    "Usage",
    "detect_model",
    "estimate_tokens",
    "make_llm",
    "split_model",
]
