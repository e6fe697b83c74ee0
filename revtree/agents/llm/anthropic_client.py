"""Anthropic via its SDK, with ``cache_control`` on the stable prefix (first system block)."""

from __future__ import annotations

import time
from typing import Any

import anthropic

from revtree.agents.llm.base import SHAPE_ERRORS, Completion, LLMError, Prompt, Usage, bad_answer


class AnthropicChat:
    def __init__(
        self,
        model: str,
        api_key: str | None,
        base_url: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
    ) -> None:
        self.model = model
        self.client = anthropic.Anthropic(
            api_key=api_key or "not-needed",
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
        )

    def complete(self, prompt: Prompt, *, max_tokens: int, temperature: float) -> Completion:
        t0 = time.monotonic()
        # The stable prefix is the first system block, marked for caching, so the calls
        # of every role share it; the role's rules and the variable part follow.
        system: list[Any] = [
            {"type": "text", "text": prompt.prefix, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": prompt.system},
        ]
        try:
            reply = self.client.messages.create(
                model=self.model,
                max_tokens=max_tokens,
                system=system,
                messages=[{"role": "user", "content": prompt.user}],
                extra_body={"temperature": temperature},  # not a typed argument in every SDK
            )
            blocks = getattr(reply, "content", None)
            if not isinstance(blocks, list):
                raise LLMError(f"{self.model}: the answer has no content list")
            text = "".join(getattr(b, "text", "") or "" for b in blocks)
            u = reply.usage
            usage = Usage(
                input_tokens=(u.input_tokens or 0)
                + (u.cache_read_input_tokens or 0)
                + (u.cache_creation_input_tokens or 0),
                output_tokens=u.output_tokens or 0,
                cached_tokens=u.cache_read_input_tokens or 0,
                cache_write_tokens=u.cache_creation_input_tokens or 0,
            )
            return Completion(
                text,
                reply.model or self.model,
                usage,
                time.monotonic() - t0,
                reply.stop_reason or "stop",
            )
        except anthropic.APIError as e:
            raise LLMError(f"{self.model}: {type(e).__name__}: {e}") from e
        except SHAPE_ERRORS as e:
            raise bad_answer(self.model, e) from e
