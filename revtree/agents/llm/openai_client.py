"""OpenAI and OpenAI-compatible servers (vLLM, Ollama, llama.cpp) via the openai SDK.

Retries on 429, 5xx, timeouts and dropped connections are the SDK's (exponential
backoff that honours ``retry-after``); ``timeout`` bounds each attempt.
"""

from __future__ import annotations

import time

import openai

from revtree.agents.llm.base import SHAPE_ERRORS, Completion, LLMError, Prompt, Usage, bad_answer


class OpenAIChat:
    def __init__(
        self,
        model: str,
        api_key: str | None,
        base_url: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
    ) -> None:
        self.model = model
        self.client = openai.OpenAI(
            api_key=api_key or "not-needed",
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
        )

    def complete(self, prompt: Prompt, *, max_tokens: int, temperature: float) -> Completion:
        t0 = time.monotonic()
        try:
            reply = self.client.chat.completions.create(
                model=self.model,
                max_tokens=max_tokens,
                temperature=temperature,
                # the stable prefix first, so every role's calls share one cached prefix
                messages=[
                    {"role": "system", "content": prompt.prefix + "\n\n" + prompt.system},
                    {"role": "user", "content": prompt.user},
                ],
            )
            if not getattr(reply, "choices", None):
                raise LLMError(f"{self.model}: the answer has no choices")
            choice = reply.choices[0]
            u = reply.usage
            details = getattr(u, "prompt_tokens_details", None) if u else None
            usage = Usage(
                input_tokens=(u.prompt_tokens or 0) if u else 0,
                output_tokens=(u.completion_tokens or 0) if u else 0,
                cached_tokens=(getattr(details, "cached_tokens", 0) or 0) if details else 0,
            )
            return Completion(
                choice.message.content or "",
                reply.model or self.model,
                usage,
                time.monotonic() - t0,
                choice.finish_reason or "stop",
            )
        except openai.APIError as e:
            raise LLMError(f"{self.model}: {type(e).__name__}: {e}") from e
        except SHAPE_ERRORS as e:
            raise bad_answer(self.model, e) from e
