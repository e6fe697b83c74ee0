"""OpenAI and OpenAI-compatible servers (vLLM, Ollama, llama.cpp) via the openai SDK.

Retries on 429, 5xx, timeouts and dropped connections are the SDK's (exponential
backoff that honours ``retry-after``); ``timeout`` bounds each attempt. Streamed
(``stream``), ``timeout`` bounds each wait for the next chunk: a stalled stream raises
``StreamStalled`` with the text that had come, and is not retried; a stream that ends
without a finish reason (cut off) is an error too, and one that has given its finish
reason is complete, ``[DONE]`` or not. A server that answers a streamed request with one
whole JSON completion (as some servers and proxies do) is read as such, and the client
asks it for whole answers from then on, said once per run (``base.notice``). An answer
that cannot be used names what came back: status, content type, the body's start.

A prompt's ``structure`` is sent as ``tools`` (the one tool forced, or any of several
required) or as a strict ``json_schema`` response format; tool calls and a JSON answer
both come back as ``Completion.calls``. A JSON answer that does not parse has no calls
(its text is the caller's fallback).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import openai
from openai.types.chat import ChatCompletion

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


class OpenAIChat:
    def __init__(
        self,
        model: str,
        api_key: str | None,
        base_url: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
        key_env: str = "OPENAI_API_KEY",
        stream: bool = False,
    ) -> None:
        self.model, self.key_env, self.timeout, self.stream = model, key_env, timeout, stream
        self.client = shared_client(  # one HTTP client (TLS context, pool) for all
            openai.OpenAI,
            "OPENAI_BASE_URL",
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
        args: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": temperature,
            # the stable prefix first, so every role's calls share one cached prefix
            "messages": [
                {"role": "system", "content": prompt.prefix + "\n\n" + prompt.system},
                {"role": "user", "content": prompt.user},
            ],
            **_structure_args(prompt.structure),
        }
        try:
            if self.stream:
                return self._streamed(args, t0, prompt.structure)
            raw = self.client.chat.completions.with_raw_response.create(**args)
            return self._whole(raw.http_response, lambda: raw.parse(), t0, prompt.structure)
        except openai.APIError as e:
            raise sdk_error(
                openai,
                e,
                model=self.model,
                url=self.url,
                key_env=self.key_env,
                structured=prompt.structure is not None,
            ) from e
        except SHAPE_ERRORS as e:
            raise bad_answer(self.model, e) from e

    def _whole(
        self,
        http: Any,
        parse: Callable[[], Any],
        t0: float,
        structure: Structure | None,
        body: bytes | None = None,
    ) -> Completion:
        """A whole answer (``parse()`` reads it); an unusable one names what came back."""
        try:
            reply = parse()
            if not getattr(reply, "choices", None):
                raise LLMError(
                    f"{self.model}: the answer has no choices; the server answered "
                    f"{came_back(http, body)}"
                )
            choice = reply.choices[0]
            calls = tuple(
                tool_call(c.function.name, c.function.arguments)
                for c in choice.message.tool_calls or ()
            )
            return _completion(
                choice.message.content or "",
                calls,
                structure,
                reply.model or self.model,
                _usage(reply.usage),
                time.monotonic() - t0,
                choice.finish_reason or "stop",
            )
        except SHAPE_ERRORS as e:
            raise bad_answer(self.model, e, http, body) from e

    def _streamed(self, args: dict[str, Any], t0: float, structure: Structure | None) -> Completion:
        """The answer streamed chunk by chunk (a stall raises ``StreamStalled``); a whole
        answer instead of a stream is read as the answer, and this client stops asking
        for streams (said once, see ``notice``)."""
        got, model, finish, usage = Streamed(), self.model, "", None
        first = ""  # the first chunk, for an error
        calls: dict[int, list[str]] = {}  # index -> [name, arguments so far]
        # the SDK's request for any endpoint (its retries, errors and event decoding), its
        # chunks kept as the JSON objects they are: no model object built per chunk
        stream = self.client.post(
            "/chat/completions",
            body={**args, "stream": True, "stream_options": {"include_usage": True}},
            cast_to=object,
            stream=True,
            stream_cls=openai.Stream[Any],  # what JSON the server sent
        )
        http = stream.response
        whole = whole_answer(http)
        if whole is not None:
            stream.close()
            done = self._whole(http, lambda: _chat(json.loads(whole)), t0, structure, whole)
            self.stream = False
            notice(f"stream-off {self.url} {self.model}", streams_off(self.model, self.url, http))
            return done
        chose = False  # a chunk with a choice came
        try:
            for chunk in stream:
                first = first or json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
                model, usage = chunk.get("model") or model, chunk.get("usage") or usage
                for choice in chunk.get("choices") or []:
                    chose = True
                    delta = choice.get("delta") or {}
                    if delta.get("content"):
                        got.add(delta["content"])
                    for c in delta.get("tool_calls") or ():
                        call = calls.setdefault(c.get("index"), ["", ""])
                        if (function := c.get("function")) is not None:
                            call[0] += function.get("name") or ""
                            call[1] += function.get("arguments") or ""
                            got.add(function.get("arguments") or "", text=False)
                    finish = choice.get("finish_reason") or finish
        except Exception as e:
            if stream_timeout(openai, e):
                raise got.stalled(self.model, self.url, self.timeout) from e
            if not dropped(openai, e):
                raise
            if not finish:  # the connection closed before the end; after it: complete
                raise got.dropped(self.model, self.url, e) from e
        finally:
            stream.close()
        if not chose:  # not one chunk with a choice (an error body, a wrong shape)
            raise LLMError(
                f"{self.model}: the answer has no choices; the server answered "
                f"{came_back(http, first.encode())} (its first event)"
            )
        if not finish:  # the stream ended without a finish reason: cut off
            raise LLMError(
                f"{self.model}: the answer from {self.url} was cut off: the stream ended "
                f"without a finish reason, after {estimate_tokens(got.chars)} tokens"
            )
        if usage is None:  # a server that does not report it: estimated
            chars = sum(len(m["content"]) for m in args["messages"])
            usage = Usage(estimate_tokens(chars), estimate_tokens(got.text))
        else:
            usage = _usage(usage)
        made = tuple(tool_call(name, text) for _, (name, text) in sorted(calls.items()))
        return _completion(got.text, made, structure, model, usage, time.monotonic() - t0, finish)


def _chat(data: Any) -> ChatCompletion | None:
    """A chat completion from its JSON (None: not an object)."""
    return ChatCompletion.construct(**data) if isinstance(data, dict) else None


def _structure_args(s: Structure | None) -> dict[str, Any]:
    """The request's arguments for a structured answer (none for plain text)."""
    if s is None:
        return {}
    if s.kind == "json_schema":
        schema = {"name": s.name, "strict": True, "schema": s.schema()}
        return {"response_format": {"type": "json_schema", "json_schema": schema}}
    tools = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in s.tools
    ]
    one = len(s.tools) == 1
    choice = {"type": "function", "function": {"name": s.tools[0].name}} if one else "required"
    return {"tools": tools, "tool_choice": choice}


def _completion(
    content: str,
    calls: tuple[ToolCall, ...],
    structure: Structure | None,
    model: str,
    usage: Usage,
    latency: float,
    finish: str,
) -> Completion:
    """The answer, its calls from tool calls or from a JSON answer."""
    if calls:
        return Completion(calls_text(content, calls), model, usage, latency, finish, calls, content)
    if structure is not None and structure.kind == "json_schema":
        calls = structure.decode(content)
    return Completion(content, model, usage, latency, finish, calls, "" if calls else content)


def _usage(u: Any) -> Usage:
    """The usage of a whole answer (the SDK's object) or of a stream (its JSON)."""
    details = _field(u, "prompt_tokens_details") if u else None
    return Usage(
        input_tokens=(_field(u, "prompt_tokens") or 0) if u else 0,
        output_tokens=(_field(u, "completion_tokens") or 0) if u else 0,
        cached_tokens=(_field(details, "cached_tokens") or 0) if details else 0,
    )


def _field(o: Any, name: str) -> Any:
    return o.get(name) if isinstance(o, dict) else getattr(o, name, None)
