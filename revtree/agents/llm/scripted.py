"""A scripted LLM for tests and demos: answers from a list or a function, no network.

An answer is text, or a sequence of ``ToolCall``s (a structured answer: its calls, its
text their JSON), given whether or not the prompt asked for structure."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from revtree.agents.llm.base import (
    Completion,
    LLMError,
    Prompt,
    ToolCall,
    Usage,
    calls_text,
    estimate_tokens,
)

Answer = str | Sequence[ToolCall]
Responder = Callable[[Prompt], Answer]


class ScriptedLLM:
    """Returns ``outputs`` in order (then repeats the last), or ``responder(prompt)``."""

    def __init__(self, outputs: Sequence[Answer] | Responder, model: str = "scripted") -> None:
        self.model = model
        self.outputs, self.calls, self._lock = outputs, 0, threading.Lock()
        self.prompts: list[Prompt] = []

    def complete(self, prompt: Prompt, *, max_tokens: int, temperature: float) -> Completion:
        with self._lock:
            self.prompts.append(prompt)
            i, self.calls = self.calls, self.calls + 1
        if callable(self.outputs):
            answer = self.outputs(prompt)
        elif not self.outputs:
            raise LLMError("scripted LLM has no outputs")
        else:
            answer = self.outputs[min(i, len(self.outputs) - 1)]
        calls = () if isinstance(answer, str) else tuple(answer)
        text = answer if isinstance(answer, str) else calls_text("", calls)
        usage = Usage(estimate_tokens(prompt.chars()), estimate_tokens(text))
        return Completion(text, self.model, usage, 0.0, calls=calls, prose="" if calls else text)
