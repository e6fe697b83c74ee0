"""The LLM protocol: one call, one answer, with its usage.

A prompt has three parts so providers can cache: ``prefix`` (stable across the whole
run and every role: task, goal, baseline code; it is sent first, as the first system
block, which Anthropic gets marked ``cache_control`` and OpenAI caches by itself as a
long identical prefix), ``system`` (the role's rules) and ``user`` (this call's
variable part).

A prompt may ask for a structured answer (``Prompt.structure``): typed calls of the
given ``Tool``s, as tool calls (OpenAI ``tools``, Anthropic tool use) or as one JSON
object (OpenAI ``response_format`` json_schema; Anthropic gets tools). The answer's
``Completion.calls`` holds them; ``text`` then holds the whole answer as JSON (what a
transcript keeps). Not guaranteed: that the model calls the tools (a client that cannot,
like ``ScriptedLLM``, or a model that writes prose instead answers text and no calls),
nor that the arguments fit the schema (callers check them). A server that refuses the
structure (HTTP 400 naming tools or response_format) raises ``StructureRefused``.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast

from revtree.errors import LLMUnreachable, RevtreeError


class LLMError(RevtreeError, RuntimeError):
    """A call failed after its retries (HTTP error, timeout, unusable answer)."""


class StreamStalled(LLMError, TimeoutError):
    """A streamed answer stopped arriving (no data within the timeout); ``partial`` is
    what had come."""

    def __init__(self, message: str, partial: str = "") -> None:
        super().__init__(message)
        self.partial = partial


class StructureRefused(LLMError):
    """The server refused a structured request (tools or a response format): the caller
    may ask again for plain text."""


SHAPE_ERRORS = (ValueError, TypeError, KeyError, AttributeError)
Progress = Callable[[int, float], None]  # (tokens so far, seconds elapsed)
# Where a streaming client reports the progress of the call in this thread, if anywhere
# (set by the meter around each call: the LLM protocol stays one method).
PROGRESS: ContextVar[Progress | None] = ContextVar("revtree_llm_progress", default=None)
Notice = Callable[[str, str], None]  # (key, message): said once per key
# Where a client says something once per run (a server that does not stream), if anywhere
# (set by the meter around each call, like ``PROGRESS``; else a Python warning).
NOTICE: ContextVar[Notice | None] = ContextVar("revtree_llm_notice", default=None)
BODY_PREFIX = 200  # bytes of an unusable answer's body that its error shows


def notice(key: str, message: str) -> None:
    """Say ``message`` once (per run where a meter listens; ``key`` names what it is)."""
    sink = NOTICE.get()
    if sink is not None:
        sink(key, message)
    else:
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def came_back(response: Any, body: bytes | None = None) -> str:
    """What a server answered, for an error: HTTP status, content type and the first
    ``BODY_PREFIX`` bytes of the body (``body``, or the response's if it was read)."""
    status = getattr(response, "status_code", "?")
    headers = getattr(response, "headers", None) or {}
    kind = headers.get("content-type") or "no content type"
    if body is None:
        try:
            body = bytes(response.content)
        except Exception:  # a stream, already read: its body is gone
            body = None
    shown = "(already read)" if body is None else repr(body[:BODY_PREFIX])
    more = "…" if body is not None and len(body) > BODY_PREFIX else ""
    return f"HTTP {status}, content-type {kind!r}, body {shown}{more}"


def whole_answer(response: Any) -> bytes | None:
    """The body of an answer to a streamed request when it is not a stream (some servers
    and proxies ignore ``stream`` and answer one whole JSON body), else None: the caller
    reads the stream. A body that reads as server-sent events under another content type
    is a stream; its bytes are kept by the response and read again."""
    kind = (response.headers.get("content-type") or "").lower()
    if "event-stream" in kind:
        return None
    body = bytes(response.read())
    return None if body.lstrip().startswith((b"data:", b"event:", b":")) else body


def streams_off(model: str, url: str, response: Any) -> str:
    """The warning for a model whose server answered a streamed request whole."""
    kind = response.headers.get("content-type") or "no content type"
    return (
        f"{model} at {url} answers streamed requests with one whole answer "
        f"(content-type {kind!r}); read as the answer, and not streamed for the rest of "
        "the run (agents.stream = false asks so from the start)"
    )


@dataclass
class Streamed:
    """A streamed answer as it arrives: its text so far, reported to ``PROGRESS``."""

    parts: list[str] = field(default_factory=list)
    chars: int = 0
    t0: float = field(default_factory=time.monotonic)
    sink: Progress | None = field(default_factory=PROGRESS.get)

    def add(self, piece: str, text: bool = True) -> None:
        """Count ``piece`` for progress, and keep it as text unless ``text`` is false
        (the arguments of a tool call, kept by the client)."""
        if text:
            self.parts.append(piece)
        self.chars += len(piece)
        if self.sink is not None:
            self.sink(estimate_tokens(self.chars), time.monotonic() - self.t0)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def dropped(self, model: str, url: str, e: BaseException) -> LLMError:
        """The error for a stream whose connection closed before its end."""
        return LLMError(
            f"{model}: the answer from {url} was cut off: the connection closed before the "
            f"end of the stream, after {estimate_tokens(self.chars) if self.chars else 0} "
            f"tokens ({type(e).__name__}: {e})"
        )

    def stalled(self, model: str, url: str, timeout: float) -> StreamStalled:
        return StreamStalled(
            f"{model}: the answer from {url} stalled: no data for {timeout:g} s after "
            f"{estimate_tokens(self.chars) if self.chars else 0} tokens "
            f"({time.monotonic() - self.t0:.0f} s); raise agents.timeout if the model is slow",
            self.text,
        )


def bad_answer(
    model: str, e: Exception, response: Any = None, body: bytes | None = None
) -> LLMError:
    """The error for an answer that is not JSON of the shape the SDK expects, naming
    what came back when the response is known."""
    what = f"; the server answered {came_back(response, body)}" if response is not None else ""
    return LLMError(
        f"{model}: the server's answer is not valid JSON of the expected shape "
        f"({type(e).__name__}: {e}){what}"
    )


SAID_CHARS = 300  # of an SDK error's own text (the anthropic SDK's holds the whole body)


def scrubbed(e: LLMError | LLMUnreachable, key: str | None) -> LLMError | LLMUnreachable:
    """``e`` with its message fit to show and store: the API key (which a proxy echoing
    the request puts in its error body) replaced by ``***``, control characters (a body's
    terminal escapes) escaped."""
    if not e.args:
        return e
    text = str(e.args[0])
    if key and len(key) >= 6:
        text = text.replace(key, "***")
        for n in range(len(key) - 1, 3, -1):  # the key's start where a body was cut
            text = re.sub(re.escape(key[:n]) + r"(?=['\"]?…)", "***", text)
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    e.args = (text, *e.args[1:])
    return e


def _said(e: Exception) -> str:
    """An SDK error's own text, cut to ``SAID_CHARS``."""
    text = str(e)
    return text if len(text) <= SAID_CHARS else text[:SAID_CHARS] + "…"


SDK = TypeVar("SDK")
_SHARED: dict[tuple[type, int, str | None], Any] = {}  # (class, pid, base_url) -> first made
_SHARING = threading.Lock()


def shared_client(sdk_class: type[SDK], url_env: str, **options: Any) -> SDK:
    """An ``openai.OpenAI`` or ``anthropic.Anthropic`` with ``options`` (``api_key``,
    ``base_url``, ``timeout``, ``max_retries``): the first one this process makes of that
    class for that ``base_url`` is made as always; every later one is that one's
    ``with_options(...)``, the SDK's own copy with the options given, over the same HTTP
    client. Each SDK client otherwise loads the system's certificates into a TLS context
    of its own (about 25 ms on 2 cores; a `revtree run` with a reviewer made four
    clients, two for the model check and two for the run) and keeps a connection pool
    of its own. Keyed by the URL the new client would use (a copy keeps its original's
    URL where given none, where a new client reads the SDK's variable ``url_env``, e.g.
    ``OPENAI_BASE_URL``, then its default) and by the process (a forked child makes its
    own: an HTTP client's connections are never shared across a fork)."""
    url = options.get("base_url") or os.environ.get(url_env) or None
    key = (sdk_class, os.getpid(), url)
    with _SHARING:
        first = _SHARED.get(key)
    if first is None:  # made outside the lock (a fork meanwhile finds it free)
        made = sdk_class(**options)
        with _SHARING:
            first = _SHARED.setdefault(key, made)
        if first is made:
            return made
    return cast(SDK, first.with_options(**options))


def sdk_error(
    sdk: Any, e: Exception, *, model: str, url: str, key_env: str, structured: bool = False
) -> LLMError | LLMUnreachable:
    """The error for an exception of the openai or anthropic SDK (``sdk``, the module).

    A request that asked for structure (``structured``) and was answered 400 or 422
    naming tools, functions or the response format is ``StructureRefused``.

    An endpoint that cannot be reached, refuses the key or knows no such model is
    ``LLMUnreachable`` (infrastructure: no candidate is to blame), naming the URL, the
    model and, for a refused key, its variable. Anything else is an ``LLMError``; one
    with an HTTP status names what came back (``came_back``)."""
    name, where = type(e).__name__, f"{url} (model {model})"
    if structured and refuses_structure(sdk, e):
        return StructureRefused(
            f"{model}: {url} refused the structured request: {name}: {_said(e)}"
        )
    if isinstance(e, sdk.APITimeoutError) and not _named(e.__cause__, "ConnectTimeout"):
        return LLMError(f"{model}: no answer from {url} in time: {name}: {_said(e)}")
    if isinstance(e, sdk.APIConnectionError):
        return LLMUnreachable(f"cannot reach the model endpoint {where}: {name}: {_said(e)}")
    if isinstance(e, sdk.AuthenticationError | sdk.PermissionDeniedError):
        return LLMUnreachable(
            f"the model endpoint {where} refused the key in ${key_env}: {name}: {_said(e)}"
        )
    if isinstance(e, sdk.NotFoundError):
        return LLMUnreachable(
            f"the model endpoint {where} answered 404: no such model, or a base URL "
            f"without its path (e.g. /v1): {name}: {_said(e)}"
        )
    if isinstance(e, sdk.APIStatusError):
        return LLMError(f"{model}: {name}: {_said(e)}; the server answered {came_back(e.response)}")
    return LLMError(f"{model}: {name}: {_said(e)}")


_STRUCTURE_WORDS = re.compile(r"tool|function|response_format|json_schema|structured", re.I)


def refuses_structure(sdk: Any, e: Exception) -> bool:
    """Whether ``e`` is a server's refusal of tools or a response format."""
    status = getattr(e, "status_code", None)
    return (
        isinstance(e, sdk.APIStatusError)
        and status in (400, 422)
        and bool(_STRUCTURE_WORDS.search(str(e)))
    )


def stream_timeout(sdk: Any, e: BaseException) -> bool:
    """Whether ``e``, raised while reading a stream, is a read timeout (the SDK's own, or
    its HTTP library's, which the SDKs let through while a stream is read)."""
    return isinstance(e, sdk.APITimeoutError) or _named(e, "TimeoutException")


def dropped(sdk: Any, e: BaseException) -> bool:
    """Whether ``e``, raised while reading a stream, is the connection dropping."""
    return isinstance(e, sdk.APIConnectionError) or _named(e, "TransportError")


def _named(e: BaseException | None, name: str) -> bool:
    """Whether ``e`` is an instance of a class called ``name`` (the SDKs bundle their
    own copy of httpx, so its exception classes are matched by name)."""
    return e is not None and any(c.__name__ == name for c in type(e).__mro__)


class BudgetExhausted(RevtreeError):
    """A call was refused because it could break the run's token or dollar budget."""


@dataclass(frozen=True)
class Tool:
    """One typed call a model may make: its name, what it is for, and the JSON schema of
    its arguments (an object, every property required, no others). ``many``: it may be
    called several times in one answer (in a JSON answer, a list under its name)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    many: bool = False

    def signature(self) -> str:
        return f"{self.name}({', '.join(self.parameters.get('properties', {}))})"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any]  # as the model gave them: check before use


@dataclass(frozen=True)
class Structure:
    """A request for a structured answer: ``kind`` "tools" (tool calls) or "json_schema"
    (one JSON object with a key per tool), named ``name``."""

    kind: str
    name: str
    tools: tuple[Tool, ...]

    def schema(self) -> dict[str, Any]:
        """The JSON answer's schema (strict: every key required, no others)."""
        props = {
            t.name: {"type": "array", "items": dict(t.parameters), "description": t.description}
            if t.many
            else {**t.parameters, "description": t.description}
            for t in self.tools
        }
        return {
            "type": "object",
            "properties": props,
            "required": list(props),
            "additionalProperties": False,
        }

    def decode(self, text: str) -> tuple[ToolCall, ...]:
        """The calls of a JSON answer; none when it is not a JSON object."""
        try:
            data = json.loads(text)
        except ValueError:
            return ()
        if not isinstance(data, dict):
            return ()
        calls: list[ToolCall] = []
        for t in self.tools:
            value = data.get(t.name)
            items = value if t.many and isinstance(value, list) else [value]
            calls += [ToolCall(t.name, v) for v in items if isinstance(v, dict)]
        return tuple(calls)

    def chars(self) -> int:
        return sum(len(t.description) + len(json.dumps(t.parameters)) for t in self.tools)


@dataclass(frozen=True)
class Prompt:
    system: str
    prefix: str
    user: str
    structure: Structure | None = None  # ask for typed calls (see the module docstring)

    def chars(self) -> int:
        extra = self.structure.chars() if self.structure else 0
        return len(self.system) + len(self.prefix) + len(self.user) + extra


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
    calls: tuple[ToolCall, ...] = ()  # a structured answer's calls (``text`` is its JSON)
    prose: str = ""  # the text the model wrote besides its tool calls

    @property
    def truncated(self) -> bool:
        return self.finish_reason in ("length", "max_tokens")


def calls_text(prose: str, calls: tuple[ToolCall, ...]) -> str:
    """An answer with tool calls as text, for transcripts: a JSON object of the model's
    prose (``content``) and its calls."""
    data = {
        "content": prose,
        "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in calls],
    }
    return json.dumps(data, ensure_ascii=False, indent=1)


def tool_call(name: str, arguments: str | Mapping[str, Any] | None) -> ToolCall:
    """A call from the arguments as sent (JSON text, or already an object); arguments
    that are no JSON object are kept under ``_invalid`` for the caller to refuse."""
    if isinstance(arguments, Mapping):
        return ToolCall(name, dict(arguments))
    try:
        data = json.loads(arguments or "{}")
    except ValueError:
        data = None
    return ToolCall(name, data if isinstance(data, dict) else {"_invalid": arguments})


class LLM(Protocol):
    model: str

    def complete(self, prompt: Prompt, *, max_tokens: int, temperature: float) -> Completion: ...


def estimate_tokens(text_or_chars: str | int) -> int:
    """A rough count (4 characters a token) for budgets and prompt trimming."""
    chars = text_or_chars if isinstance(text_or_chars, int) else len(text_or_chars)
    return chars // 4 + 1
