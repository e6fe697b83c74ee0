"""Metering of LLM calls: budgets checked before each call, usage recorded after.

A call is refused (``BudgetExhausted``) when its worst case (the prompt's estimated
tokens plus ``max_tokens`` of answer, priced), added to what is spent and to the worst
case of the calls still in flight, could take the run past
``budget.max_usd`` or ``budget.max_tokens``, so a cap is never exceeded. Every call,
failed ones included, is a row of ``llm_calls`` with its role, node, tokens and cost.

A client's notice (``base.notice``: a server that does not stream) is a warning event,
once per run and key, however many roles and calls meet it.

Transcripts: every row also holds the call's prompt (system, prefix and user part, as a
JSON object with the node's attempt) and its reply (``None`` when the call failed).
Secrets are redacted from both: the values of every secret-looking environment variable
(the configured key's included), ``sk-...`` keys, bearer tokens, ``key=value`` pairs
named like secrets, and the password of a database URL. Each part is capped at
``CAP`` characters (head and tail kept) and a long text is stored zlib-compressed,
base64 under the ``revtree-zlib:`` marker (the column stays TEXT); ``unpack`` reads
either form. The run's shared prefix is stored in full once per meter (the first
call that uses it); later calls store only its hash (``prefix_sha``).
What is not covered: a secret that is not in the environment and matches none of the
patterns, and secrets split across the cap's cut.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any, Protocol

from revtree.agents.llm import KEY_ENV, LLM, BudgetExhausted, Completion, Prompt, Usage
from revtree.agents.llm.base import NOTICE, PROGRESS, StreamStalled, estimate_tokens
from revtree.agents.llm.pricing import Rate, cost, rate_for
from revtree.memory.records import LLMCall
from revtree.tasks.spec import TaskSpec, is_secret

CAP = 200_000  # characters kept of each part of a transcript
ZMARK = "revtree-zlib:"
PACK_ABOVE = 2048  # characters; shorter texts are stored as they are
PROGRESS_EVERY = 10.0  # seconds between two progress events of one streamed answer
SECRET_PATTERNS = (  # (pattern, replacement, what its match must hold, casefolded)
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{12,}"), "sk-***", ("sk-",)),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{8,}"), r"\1***", ("bearer",)),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), "***", ("akia", "asia")),
    (
        re.compile(r"\b(gh[pousr]_|github_pat_|xox[abprs]-|AIza)[A-Za-z0-9_\-]{16,}"),
        r"\1***",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox", "aiza"),
    ),
    (
        re.compile(
            r"(?i)\b((?:api[_-]?key|access[_-]?token|auth[_-]?token|secret|password|passwd)"
            r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]{4,}"
        ),
        r"\1***",
        ("key", "token", "secret", "passw"),
    ),
    (re.compile(r"(\b[a-z][a-z0-9+.\-]*://[^\s:/@]+:)[^\s@/]+@"), r"\1***@", ("://",)),
)


def secret_values(keys: tuple[str, ...] = (), env: dict[str, str] | None = None) -> tuple[str, ...]:
    """Values to redact, longest first: those of the variables ``keys`` (the configured
    API keys), and the token-like values (12+ characters, letters and digits, no space)
    of every secret-looking variable."""
    env = dict(os.environ) if env is None else env
    found = {env[k] for k in keys if len(env.get(k, "")) >= 8}
    found |= {v for k, v in env.items() if is_secret(k) and _token_like(v)}
    return tuple(sorted(found, key=len, reverse=True))


def run_secrets(spec: TaskSpec) -> tuple[str, ...]:
    """What a run's stored model text is redacted of: its API keys' values, and those of
    every secret-looking variable (``secret_values``)."""
    keys = (spec.agents.api_key_env or "", *KEY_ENV.values())
    return secret_values(tuple(k for k in keys if k))


def _token_like(value: str) -> bool:
    return (
        len(value) >= 12
        and not any(c.isspace() for c in value)
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
    )


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with known secret values and secret-shaped strings replaced by ``***``.
    A pattern runs only where the text holds what its match must (casefolded, as the
    patterns' IGNORECASE matches the long s and the Kelvin sign): a scan per pattern was a
    fifth of a model call's own CPU."""
    for value in secrets:
        text = text.replace(value, "***")
    folded = text.casefold()
    for pattern, replacement, needs in SECRET_PATTERNS:
        if any(n in folded for n in needs):
            text = pattern.sub(replacement, text)
    return text


def cap(text: str, limit: int = CAP) -> str:
    """At most about ``limit`` characters: the head and the tail, the cut said."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def pack(text: str) -> str:
    """Text for a TEXT column: as it is, or compressed under ``ZMARK`` when long."""
    if len(text) < PACK_ABOVE and not text.startswith(ZMARK):
        return text
    return ZMARK + base64.b64encode(zlib.compress(text.encode("utf-8"), 6)).decode("ascii")


def unpack(stored: str | None) -> str | None:
    """The text that ``pack`` stored (either form)."""
    if stored is None or not stored.startswith(ZMARK):
        return stored
    return zlib.decompress(base64.b64decode(stored[len(ZMARK) :])).decode("utf-8")


def read_prompt(stored: str | None) -> dict[str, Any]:
    """A stored prompt as ``{attempt, system, prefix, prefix_sha, user}`` (``prefix`` is
    None when only its hash was stored); a plain-text prompt comes back as ``user``."""
    text = unpack(stored)
    if text is None:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("v") == 1:
        return data
    return {"user": text}


class Ledger(Protocol):
    """Where metered calls go: the run's memory (``revtree.memory.Store`` is one)."""

    def llm_totals(self, run_id: str) -> tuple[float, int]: ...

    def record_llm_call(self, run_id: str, call: LLMCall) -> None: ...

    def add_event(
        self,
        run_id: str,
        kind: str,
        message: str,
        node_id: int | None = None,
        data: dict[str, Any] | None = None,
    ) -> Any: ...


class Meter:
    """The run's spend, shared by every metered view of every model."""

    def __init__(self, store: Ledger, run_id: str, spec: TaskSpec) -> None:
        self.store, self.run_id = store, run_id
        self.max_usd, self.max_tokens = spec.budget.max_usd, spec.budget.max_tokens
        self.prices = {
            k: Rate(p.input, p.output, p.cached_input) for k, p in spec.agents.prices.items()
        }
        self.usd, self.tokens = store.llm_totals(run_id)
        self.refused: str | None = None
        self.reserved_usd, self.reserved_tokens = 0.0, 0  # calls in flight, at worst
        self.secrets = run_secrets(spec)
        self._prefixes: set[str] = set()  # hashes of the prefixes stored in full
        self._noticed: set[str] = set()  # keys of the notices said
        self.by_node: dict[tuple[int, str], float] = {}  # (node, role) -> dollars, this process
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

    def notice(self, key: str, message: str) -> None:
        """A client's notice (``base.notice``): a warning event, once per key."""
        with self._lock:
            if key in self._noticed:
                return
            self._noticed.add(key)
        self.store.add_event(self.run_id, "warning", message, None, {"notice": key})

    def bind(self, role: str, node_id: int | None, llm: LLM, attempt: int = 1) -> MeteredLLM:
        return MeteredLLM(self, role, node_id, llm, attempt)

    def transcript(self, prompt: Prompt, attempt: int) -> str:
        """The stored form of a prompt: redacted, capped, the prefix in full only once."""
        sha = hashlib.sha256(prompt.prefix.encode("utf-8")).hexdigest()[:16]
        with self._lock:
            first = sha not in self._prefixes
            self._prefixes.add(sha)
        data = {
            "v": 1,
            "attempt": attempt,
            "system": self.clean(prompt.system),
            "prefix": self.clean(prompt.prefix) if first else None,
            "prefix_sha": sha,
            "prefix_chars": len(prompt.prefix),
            "user": self.clean(prompt.user),
        }
        return pack(json.dumps(data, ensure_ascii=False))

    def clean(self, text: str) -> str:
        return cap(redact(text, self.secrets))

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
            if call.node_id is not None:
                key = (call.node_id, call.role)
                self.by_node[key] = self.by_node.get(key, 0.0) + call.cost_usd
        self.store.record_llm_call(self.run_id, call)


class MeteredLLM:
    """An LLM seen through the meter, for one role and node (and the node's attempt)."""

    def __init__(
        self, meter: Meter, role: str, node_id: int | None, llm: LLM, attempt: int = 1
    ) -> None:
        self.meter, self.role, self.node_id, self.llm = meter, role, node_id, llm
        self.model, self.attempt = llm.model, attempt

    def complete(self, prompt: Prompt, *, max_tokens: int, temperature: float) -> Completion:
        pick = getattr(self.llm, "pick", None)
        llm = pick() if pick is not None else self.llm
        booked = self.meter._reserve(llm.model, prompt, max_tokens)
        asked = self.meter.transcript(prompt, self.attempt)
        t0 = time.monotonic()
        token, said = PROGRESS.set(self._progress(llm.model)), NOTICE.set(self.meter.notice)
        try:
            reply = llm.complete(prompt, max_tokens=max_tokens, temperature=temperature)
        except Exception as e:  # billed or not, a failed call is on record
            partial = e.partial if isinstance(e, StreamStalled) else None
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
                    self.meter.clean(str(e))[:500],
                    prompt=asked,
                    response=pack(self.meter.clean(partial)) if partial else None,
                )
            )
            raise
        finally:
            PROGRESS.reset(token)
            NOTICE.reset(said)
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
                prompt=asked,
                response=pack(self.meter.clean(reply.text)),
            )
        )
        return reply

    def _progress(self, model: str) -> Callable[[int, float], None]:
        """A sink for a streamed answer's progress: an ``llm`` event in the live log once
        the answer has taken ``PROGRESS_EVERY`` seconds, then at most that often."""
        last = [0.0]
        where = f"node {self.node_id}: " if self.node_id is not None else ""

        def report(tokens: int, elapsed: float) -> None:
            if elapsed - last[0] < PROGRESS_EVERY:
                return
            last[0] = elapsed
            self.meter.store.add_event(
                self.meter.run_id,
                "llm",
                f"{where}{self.role} ({model}) answering: {tokens} tokens so far, {elapsed:.0f} s",
                self.node_id,
                {"role": self.role, "tokens": tokens, "elapsed": round(elapsed, 1)},
            )

        return report
