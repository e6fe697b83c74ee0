"""OpenAI and OpenAI-compatible servers (vLLM, Ollama, llama.cpp) via the openai SDK.

Retries on 429, 5xx, timeouts and dropped connections are the SDK's (exponential
backoff that honours ``retry-after``); ``timeout`` bounds each attempt. Streamed
(``stream``), ``timeout`` bounds each wait for the next chunk: a stalled stream raises
``StreamStalled`` with the text that had come, and is not retried.
"""

from __future__ import annotations

import time
from typing import Any

import openai

from revtree.agents.llm.base import (
    SHAPE_ERRORS,
    Completion,
    LLMError,
    Prompt,
    Streamed,
    Usage,
    bad_answer,
    estimate_tokens,
    sdk_error,
    stream_timeout,
)


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
        self.client = openai.OpenAI(
            api_key=api_key or "not-needed",
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
        )
        self.url = str(self.client.base_url).rstrip("/")

    def complete(self, prompt: Prompt, *, max_tokens: int, temperature: float) -> Completion:
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
        }
        try:
            if self.stream:
                return self._streamed(args, t0)
            reply = self.client.chat.completions.create(**args)
            if not getattr(reply, "choices", None):
                raise LLMError(f"{self.model}: the answer has no choices")
            choice = reply.choices[0]
            return Completion(
                choice.message.content or "",
                reply.model or self.model,
                _usage(reply.usage),
                time.monotonic() - t0,
                choice.finish_reason or "stop",
            )
        except openai.APIError as e:
            raise sdk_error(openai, e, model=self.model, url=self.url, key_env=self.key_env) from e
        except SHAPE_ERRORS as e:
            raise bad_answer(self.model, e) from e

    def _streamed(self, args: dict[str, Any], t0: float) -> Completion:
        """The answer streamed chunk by chunk (a stall raises ``StreamStalled``)."""
        got, model, finish, usage = Streamed(), self.model, "stop", None
        stream = self.client.chat.completions.create(
            **args, stream=True, stream_options={"include_usage": True}
        )
        try:
            for chunk in stream:
                model, usage = chunk.model or model, chunk.usage or usage
                for choice in chunk.choices or []:
                    if choice.delta is not None and choice.delta.content:
                        got.add(choice.delta.content)
                    finish = choice.finish_reason or finish
        except Exception as e:
            if stream_timeout(openai, e):
                raise got.stalled(self.model, self.url, self.timeout) from e
            raise
        finally:
            stream.close()
        if usage is None:  # a server that does not report it: estimated
            chars = sum(len(m["content"]) for m in args["messages"])
            usage = Usage(estimate_tokens(chars), estimate_tokens(got.text))
        else:
            usage = _usage(usage)
        return Completion(got.text, model, usage, time.monotonic() - t0, finish)


def _usage(u: Any) -> Usage:
    details = getattr(u, "prompt_tokens_details", None) if u else None
    return Usage(
        input_tokens=(u.prompt_tokens or 0) if u else 0,
        output_tokens=(u.completion_tokens or 0) if u else 0,
        cached_tokens=(getattr(details, "cached_tokens", 0) or 0) if details else 0,
    )
