"""Metering of LLM calls: budgets checked before each call, usage recorded after.

A call is refused (``BudgetExhausted``) when its worst case (the prompt's estimated
tokens plus ``max_tokens`` of answer, priced), added to what is spent and to the worst
case of the calls still in flight, could take the run past
``budget.max_usd`` or ``budget.max_tokens``, so a cap is never exceeded. Every call,
failed ones included, is a row of ``llm_calls`` with its role, node, tokens and cost.
"""

from __future__ import annotations

import threading
import time

from revtree.agents.llm import LLM, BudgetExhausted, Completion, Prompt, Usage
from revtree.agents.llm.base import estimate_tokens
from revtree.agents.llm.pricing import Rate, cost, rate_for
from revtree.memory import Store
from revtree.memory.records import LLMCall
from revtree.tasks.spec import TaskSpec


class Meter:
    """The run's spend, shared by every metered view of every model."""

    def __init__(self, store: Store, run_id: str, spec: TaskSpec) -> None:
        self.store, self.run_id = store, run_id
        self.max_usd, self.max_tokens = spec.budget.max_usd, spec.budget.max_tokens
        self.prices = {
            k: Rate(p.input, p.output, p.cached_input) for k, p in spec.agents.prices.items()
        }
        self.usd, self.tokens = store.llm_totals(run_id)
        self.refused: str | None = None
        self.reserved_usd, self.reserved_tokens = 0.0, 0  # calls in flight, at worst
        self._lock = threading.Lock()

    def exhausted(self) -> str | None:
        """The budget reason once a cap is reached (or a call was refused), else None."""
        if self.refused:
            return self.refused
        if self.max_usd is not None and self.usd >= self.max_usd:
            return f"budget: max_usd={self.max_usd:g} reached (${self.usd:.4f} spent)"
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            return f"budget: max_tokens={self.max_tokens} reached ({self.tokens} used)"
        return None

    def bind(self, role: str, node_id: int | None, llm: LLM) -> MeteredLLM:
        return MeteredLLM(self, role, node_id, llm)

    def _reserve(self, model: str, prompt: Prompt, max_tokens: int) -> tuple[float, int]:
        """Book a call's worst case against the caps (calls in flight included)."""
        worst = Usage(estimate_tokens(prompt.chars()), max_tokens)
        tokens = worst.input_tokens + max_tokens
        with self._lock:
            usd = cost(worst, rate_for(model, self.prices))
            spent_usd = self.usd + self.reserved_usd
            spent_tokens = self.tokens + self.reserved_tokens
            if self.max_usd is not None and spent_usd + usd > self.max_usd:
                self.refused = (
                    f"budget: max_usd={self.max_usd:g} reached (${self.usd:.4f} "
                    f"spent; the next call could cost ${usd:.4f})"
                )
            elif self.max_tokens is not None and spent_tokens + tokens > self.max_tokens:
                self.refused = f"budget: max_tokens={self.max_tokens} reached ({self.tokens} used)"
            if self.refused:
                raise BudgetExhausted(self.refused)
            self.reserved_usd += usd
            self.reserved_tokens += tokens
            return usd, tokens

    def _release(self, booked: tuple[float, int]) -> None:
        with self._lock:
            self.reserved_usd -= booked[0]
            self.reserved_tokens -= booked[1]

    def _record(self, call: LLMCall) -> None:
        with self._lock:
            self.usd += call.cost_usd
            self.tokens += call.input_tokens + call.output_tokens
        self.store.record_llm_call(self.run_id, call)


class MeteredLLM:
    """An LLM seen through the meter, for one role and node."""

    def __init__(self, meter: Meter, role: str, node_id: int | None, llm: LLM) -> None:
        self.meter, self.role, self.node_id, self.llm = meter, role, node_id, llm
        self.model = llm.model

    def complete(self, prompt: Prompt, *, max_tokens: int, temperature: float) -> Completion:
        pick = getattr(self.llm, "pick", None)
        llm = pick() if pick is not None else self.llm
        booked = self.meter._reserve(llm.model, prompt, max_tokens)
        t0 = time.monotonic()
        try:
            reply = llm.complete(prompt, max_tokens=max_tokens, temperature=temperature)
        except Exception as e:  # billed or not, a failed call is on record
            self.meter._record(
                LLMCall(
                    self.role,
                    llm.model,
                    0,
                    0,
                    0,
                    0,
                    0.0,
                    time.monotonic() - t0,
                    False,
                    self.node_id,
                    str(e)[:500],
                )
            )
            raise
        finally:
            self.meter._release(booked)
        u = reply.usage
        usd = cost(
            u,
            rate_for(reply.model or llm.model, self.meter.prices)
            or rate_for(llm.model, self.meter.prices),
        )
        self.meter._record(
            LLMCall(
                self.role,
                reply.model or llm.model,
                u.input_tokens,
                u.output_tokens,
                u.cached_tokens,
                u.cache_write_tokens,
                usd,
                reply.latency,
                True,
                self.node_id,
            )
        )
        return reply
