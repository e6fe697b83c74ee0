"""The LLM protocol: one call, one answer, with its usage.

A prompt has three parts so providers can cache: ``prefix`` (stable across the whole
run and every role: task, goal, baseline code; it is sent first, as the first system
block, which Anthropic gets marked ``cache_control`` and OpenAI caches by itself as a
long identical prefix), ``system`` (the role's rules) and ``user`` (this call's
variable part).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from revtree.errors import RevtreeError


class LLMError(RevtreeError, RuntimeError):
    """A call failed after its retries (HTTP error, timeout, unusable answer)."""


SHAPE_ERRORS = (ValueError, TypeError, KeyError, AttributeError)


def bad_answer(model: str, e: Exception) -> LLMError:
    """The error for an answer that is not JSON of the shape the SDK expects."""
    return LLMError(
        f"{model}: the server's answer is not valid JSON of the expected shape "
        f"({type(e).__name__}: {e})"
    )


class BudgetExhausted(RevtreeError):
    """A call was refused because it could break the run's token or dollar budget."""


@dataclass(frozen=True)
class Prompt:
    system: str
    prefix: str
    user: str

    def chars(self) -> int:
        return len(self.system) + len(self.prefix) + len(self.user)


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0  # input tokens read from the provider's cache
    cache_write_tokens: int = 0  # input tokens written to it (Anthropic)


@dataclass(frozen=True)
class Completion:
    text: str
    model: str
    usage: Usage
    latency: float
    finish_reason: str = "stop"  # "length" when cut off at max_tokens

    @property
    def truncated(self) -> bool:
        return self.finish_reason in ("length", "max_tokens")


class LLM(Protocol):
    model: str

    def complete(self, prompt: Prompt, *, max_tokens: int, temperature: float) -> Completion: ...


def estimate_tokens(text_or_chars: str | int) -> int:
    """A rough count (4 characters a token) for budgets and prompt trimming."""
    chars = text_or_chars if isinstance(text_or_chars, int) else len(text_or_chars)
    return chars // 4 + 1
