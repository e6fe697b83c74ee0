"""The LLM protocol: one call, one answer, with its usage.

A prompt has three parts so providers can cache: ``prefix`` (stable across the whole
run and every role: task, goal, baseline code; it is sent first, as the first system
block, which Anthropic gets marked ``cache_control`` and OpenAI caches by itself as a
long identical prefix), ``system`` (the role's rules) and ``user`` (this call's
variable part).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from revtree.errors import LLMUnreachable, RevtreeError


class LLMError(RevtreeError, RuntimeError):
    """A call failed after its retries (HTTP error, timeout, unusable answer)."""


class StreamStalled(LLMError, TimeoutError):
    """A streamed answer stopped arriving (no data within the timeout); ``partial`` is
    what had come."""

    def __init__(self, message: str, partial: str = "") -> None:
        super().__init__(message)
        self.partial = partial


SHAPE_ERRORS = (ValueError, TypeError, KeyError, AttributeError)
Progress = Callable[[int, float], None]  # (tokens so far, seconds elapsed)
# Where a streaming client reports the progress of the call in this thread, if anywhere
# (set by the meter around each call: the LLM protocol stays one method).
PROGRESS: ContextVar[Progress | None] = ContextVar("revtree_llm_progress", default=None)


@dataclass
class Streamed:
    """A streamed answer as it arrives: its text so far, reported to ``PROGRESS``."""

    parts: list[str] = field(default_factory=list)
    chars: int = 0
    t0: float = field(default_factory=time.monotonic)
    sink: Progress | None = field(default_factory=PROGRESS.get)

    def add(self, piece: str) -> None:
        self.parts.append(piece)
        self.chars += len(piece)
        if self.sink is not None:
            self.sink(estimate_tokens(self.chars), time.monotonic() - self.t0)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def stalled(self, model: str, url: str, timeout: float) -> StreamStalled:
        return StreamStalled(
            f"{model}: the answer from {url} stalled: no data for {timeout:g} s after "
            f"{estimate_tokens(self.chars) if self.chars else 0} tokens "
            f"({time.monotonic() - self.t0:.0f} s); raise agents.timeout if the model is slow",
            self.text,
        )


def bad_answer(model: str, e: Exception) -> LLMError:
    """The error for an answer that is not JSON of the shape the SDK expects."""
    return LLMError(
        f"{model}: the server's answer is not valid JSON of the expected shape "
        f"({type(e).__name__}: {e})"
    )


def sdk_error(
    sdk: Any, e: Exception, *, model: str, url: str, key_env: str
) -> LLMError | LLMUnreachable:
    """The error for an exception of the openai or anthropic SDK (``sdk``, the module).

    An endpoint that cannot be reached, refuses the key or knows no such model is
    ``LLMUnreachable`` (infrastructure: no candidate is to blame), naming the URL, the
    model and, for a refused key, its variable. Anything else is an ``LLMError``."""
    name, where = type(e).__name__, f"{url} (model {model})"
    if isinstance(e, sdk.APITimeoutError) and not _named(e.__cause__, "ConnectTimeout"):
        return LLMError(f"{model}: no answer from {url} in time: {name}: {e}")
    if isinstance(e, sdk.APIConnectionError):
        return LLMUnreachable(f"cannot reach the model endpoint {where}: {name}: {e}")
    if isinstance(e, sdk.AuthenticationError | sdk.PermissionDeniedError):
        return LLMUnreachable(
            f"the model endpoint {where} refused the key in ${key_env}: {name}: {e}"
        )
    if isinstance(e, sdk.NotFoundError):
        return LLMUnreachable(
            f"the model endpoint {where} answered 404: no such model, or a base URL "
            f"without its path (e.g. /v1): {name}: {e}"
        )
    return LLMError(f"{model}: {name}: {e}")


def stream_timeout(sdk: Any, e: BaseException) -> bool:
    """Whether ``e``, raised while reading a stream, is a read timeout (the SDK's own, or
    its HTTP library's, which the SDKs let through while a stream is read)."""
    return isinstance(e, sdk.APITimeoutError) or _named(e, "TimeoutException")


def _named(e: BaseException | None, name: str) -> bool:
    """Whether ``e`` is an instance of a class called ``name`` (the SDKs bundle their
    own copy of httpx, so its exception classes are matched by name)."""
    return e is not None and any(c.__name__ == name for c in type(e).__mro__)


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
