"""Anthropic via its SDK, with ``cache_control`` on the stable prefix (first system block).

Streamed (``stream``), ``timeout`` bounds each wait for the next event: a stalled stream
raises ``StreamStalled`` with the text that had come, and is not retried; a stream that
ends without a stop reason (cut off) is an error too, and one that has given its stop
reason is complete, ``message_stop`` or not. A server that answers a streamed request
with one whole ``message`` is read as such, and the client asks it for whole answers from
then on, said once per run (``base.notice``). An answer that cannot be used names what
came back: status, content type, the body's start.

A prompt's ``structure`` is sent as tools (the one tool forced, or any of several
required; a "json_schema" structure too, as Anthropic has no response format), and the
``tool_use`` blocks of the answer come back as ``Completion.calls``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anthropic
from anthropic.types import Message

from revtree.agents.llm.base import (
    SHAPE_ERRORS,
    Completion,
    LLMError,
    Prompt,
    Streamed,
    Structure,
    ToolCall,
    Usage,
    bad_answer,
    calls_text,
    came_back,
    dropped,
    estimate_tokens,
    notice,
    scrubbed,
    sdk_error,
    shared_client,
    stream_timeout,
    streams_off,
    tool_call,
    whole_answer,
)
from revtree.errors import LLMUnreachable


class AnthropicChat:
    def __init__(
        self,
        model: str,
        api_key: str | None,
        base_url: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        key_env: str = "ANTHROPIC_API_KEY",
        stream: bool = False,
    ) -> None:
        self.model, self.key_env, self.timeout, self.stream = model, key_env, timeout, stream
        self.client = shared_client(  # one HTTP client (TLS context, pool) for all
            anthropic.Anthropic,
            "ANTHROPIC_BASE_URL",
            api_key=api_key or "not-needed",
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
        )
        self.url = str(self.client.base_url).rstrip("/")

    def complete(self, prompt: Prompt, *, max_tokens: int, temperature: float) -> Completion:
        try:
            return self._complete(prompt, max_tokens, temperature)
        except (LLMError, LLMUnreachable) as e:
            raise scrubbed(e, self.client.api_key) from e.__cause__

    def _complete(self, prompt: Prompt, max_tokens: int, temperature: float) -> Completion:
        t0 = time.monotonic()
        # The stable prefix is the first system block, marked for caching, so the calls
        # of every role share it; the role's rules and the variable part follow.
        system: list[Any] = [
            {"type": "text", "text": prompt.prefix, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": prompt.system},
        ]
        args: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "system": system,
            "messages": [{"role": "user", "content": prompt.user}],
            "extra_body": {"temperature": temperature},  # not a typed argument in every SDK
            **_structure_args(prompt.structure),
        }
        try:
            if self.stream:
                return self._streamed(args, t0)
            raw = self.client.messages.with_raw_response.create(**args)
            return self._whole(raw.http_response, lambda: raw.parse(), t0)
        except anthropic.APIError as e:
            raise sdk_error(
                anthropic,
                e,
                model=self.model,
                url=self.url,
                key_env=self.key_env,
                structured=prompt.structure is not None,
            ) from e
        except SHAPE_ERRORS as e:
            raise bad_answer(self.model, e) from e

    def _whole(
        self, http: Any, parse: Callable[[], Any], t0: float, body: bytes | None = None
    ) -> Completion:
        """A whole answer (``parse()`` reads it); an unusable one names what came back."""
        try:
            reply = parse()
            blocks = getattr(reply, "content", None)
            if not isinstance(blocks, list):
                raise LLMError(
                    f"{self.model}: the answer has no content list; the server answered "
                    f"{came_back(http, body)}"
                )
            text = "".join(getattr(b, "text", "") or "" for b in blocks)
            calls = tuple(
                tool_call(b.name, b.input) for b in blocks if getattr(b, "type", "") == "tool_use"
            )
            return _completion(
                text,
                calls,
                reply.model or self.model,
                _usage(reply.usage, reply.usage.output_tokens),
                time.monotonic() - t0,
                reply.stop_reason or "stop",
            )
        except SHAPE_ERRORS as e:
            raise bad_answer(self.model, e, http, body) from e

    def _streamed(self, args: dict[str, Any], t0: float) -> Completion:
        """The answer streamed event by event (a stall raises ``StreamStalled``); a whole
        ``message`` instead of a stream is read as the answer, and this client stops
        asking for streams (said once, see ``notice``)."""
        got, model, stop, start, out = Streamed(), self.model, "", None, 0
        first = ""  # the first event, for an error
        calls: dict[int, list[str]] = {}  # block index -> [name, input JSON so far]
        stream = self.client.messages.create(**args, stream=True)
        http = stream.response
        whole = whole_answer(http)
        if whole is not None:
            stream.close()
            done = self._whole(http, lambda: _message(json.loads(whole)), t0, whole)
            self.stream = False
            notice(f"stream-off {self.url} {self.model}", streams_off(self.model, self.url, http))
            return done
        try:
            for event in stream:
                first = first or event.to_json(indent=None)
                if event.type == "message_start":
                    model, start = event.message.model or model, event.message.usage
                elif event.type == "content_block_start" and event.content_block.type == "tool_use":
                    calls[event.index] = [event.content_block.name, ""]
                elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                    got.add(event.delta.text)
                elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                    calls[event.index][1] += event.delta.partial_json
                    got.add(event.delta.partial_json, text=False)
                elif event.type == "message_delta":
                    stop, out = event.delta.stop_reason or stop, event.usage.output_tokens or out
        except Exception as e:
            if stream_timeout(anthropic, e):
                raise got.stalled(self.model, self.url, self.timeout) from e
            if not dropped(anthropic, e):
                raise
            if not stop:  # the connection closed before the end; after it: complete
                raise got.dropped(self.model, self.url, e) from e
        finally:
            stream.close()
        if start is None:  # no message_start (an error body, a wrong shape)
            raise LLMError(
                f"{self.model}: the streamed answer has no message; the server answered "
                f"{came_back(http, first.encode())} (its first event)"
            )
        if not stop:  # the stream ended without a stop reason: cut off
            raise LLMError(
                f"{self.model}: the answer from {self.url} was cut off: the stream ended "
                f"without a stop reason, after {estimate_tokens(got.chars)} tokens"
            )
        usage = _usage(start, out)
        made = tuple(tool_call(name, text) for _, (name, text) in sorted(calls.items()))
        return _completion(got.text, made, model, usage, time.monotonic() - t0, stop)


def _message(data: Any) -> Message | None:
    """A message from its JSON (None: not one; an error object names its type)."""
    if not isinstance(data, dict) or data.get("type", "message") != "message":
        return None
    return Message.construct(**data)


def _structure_args(s: Structure | None) -> dict[str, Any]:
    """The request's tools for a structured answer (none for plain text)."""
    if s is None:
        return {}
    tools = [
        {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
        for t in s.tools
    ]
    one = len(s.tools) == 1
    return {
        "tools": tools,
        "tool_choice": {"type": "tool", "name": s.tools[0].name} if one else {"type": "any"},
    }


def _completion(
    text: str, calls: tuple[ToolCall, ...], model: str, usage: Usage, latency: float, stop: str
) -> Completion:
    if not calls:
        return Completion(text, model, usage, latency, stop, prose=text)
    return Completion(calls_text(text, calls), model, usage, latency, stop, calls, text)


def _usage(u: Any, output_tokens: int | None) -> Usage:
    return Usage(
        input_tokens=(u.input_tokens or 0)
        + (u.cache_read_input_tokens or 0)
        + (u.cache_creation_input_tokens or 0),
        output_tokens=output_tokens or 0,
        cached_tokens=u.cache_read_input_tokens or 0,
        cache_write_tokens=u.cache_creation_input_tokens or 0,
    )
