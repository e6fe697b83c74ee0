"""A fake OpenAI- and Anthropic-compatible HTTP server on 127.0.0.1, for tests and demos.

The real SDK clients talk to it over real HTTP. A responder decides each answer: text,
an HTTP error with headers (429 with retry-after, 500), a delay (a hung connection),
a raw body (invalid JSON), or a cut-off answer. Usage is reported like the providers
do, including prompt caching: a prompt prefix seen before counts as cached tokens.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from revtree.agents.llm.base import estimate_tokens


@dataclass
class FakeRequest:
    api: str  # "openai" or "anthropic"
    model: str
    system: str
    user: str
    prefix: str
    body: dict[str, Any]


@dataclass
class FakeReply:
    text: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    raw: bytes | None = None
    finish_reason: str = "stop"


Responder = Callable[[FakeRequest], "FakeReply | str"]


class FakeLLMServer:
    """``with FakeLLMServer(responder) as srv:`` then point clients at ``srv.openai_url``
    or ``srv.anthropic_url``."""

    def __init__(self, responder: Responder, cache_min_tokens: int = 1024) -> None:
        self.responder = responder
        self.cache_min_chars = cache_min_tokens * 4
        self.requests: list[FakeRequest] = []
        self.seen_prefixes: set[tuple[str, str]] = set()
        self.seen_prompts: list[str] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeLLMServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                """Quiet."""

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                req = _parse(self.path, body)
                with fake._lock:
                    fake.requests.append(req)
                reply = fake.responder(req)
                if isinstance(reply, str):
                    reply = FakeReply(reply)
                if reply.delay:
                    time.sleep(reply.delay)
                payload = (
                    reply.raw
                    if reply.raw is not None
                    else json.dumps(fake._answer(req, reply)).encode()
                )
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): fine

        return Handler

    def _answer(self, req: FakeRequest, reply: FakeReply) -> dict[str, Any]:
        if reply.status >= 400:
            return {"error": {"type": "fake_error", "message": f"fake status {reply.status}"}}
        prompt_tokens = estimate_tokens(req.system + req.user)
        with self._lock:
            if req.api == "anthropic":  # explicit: the block marked cache_control
                key = (req.api, req.prefix)
                hit = len(req.prefix) >= self.cache_min_chars and key in self.seen_prefixes
                self.seen_prefixes.add(key)
                cached_tokens = estimate_tokens(req.prefix) if hit else 0
            else:  # automatic: the longest prefix shared with an earlier prompt
                full = req.system + req.user
                common = max((_common(full, p) for p in self.seen_prompts[-64:]), default=0)
                common -= common % 512
                cached_tokens = estimate_tokens(common) if common >= self.cache_min_chars else 0
                self.seen_prompts.append(full)
        out_tokens = estimate_tokens(reply.text)
        if req.api == "openai":
            return {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": req.model,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": reply.finish_reason,
                        "message": {"role": "assistant", "content": reply.text},
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": out_tokens,
                    "total_tokens": prompt_tokens + out_tokens,
                    "prompt_tokens_details": {"cached_tokens": cached_tokens},
                },
            }
        write = (
            0
            if cached_tokens or len(req.prefix) < self.cache_min_chars
            else estimate_tokens(req.prefix)
        )
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": req.model,
            "content": [{"type": "text", "text": reply.text}],
            "stop_reason": "max_tokens" if reply.finish_reason == "length" else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": prompt_tokens - cached_tokens - write,
                "output_tokens": out_tokens,
                "cache_read_input_tokens": cached_tokens,
                "cache_creation_input_tokens": write,
            },
        }


def _common(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _text(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [c.get("text", "") for c in content or [] if isinstance(c, dict)]


def _parse(path: str, body: dict[str, Any]) -> FakeRequest:
    messages = body.get("messages") or []
    if path.endswith("/chat/completions"):
        system = "".join(
            t for m in messages if m.get("role") == "system" for t in _text(m.get("content"))
        )
        user = "".join(
            t for m in messages if m.get("role") == "user" for t in _text(m.get("content"))
        )
        prefix = user.split("\n\n", 1)[0] if "\n\n" in user else ""
        return FakeRequest("openai", body.get("model", ""), system, user, prefix, body)
    system_blocks = body.get("system")
    system = "".join(_text(system_blocks))
    blocks = [
        b for b in (system_blocks if isinstance(system_blocks, list) else []) if isinstance(b, dict)
    ]
    blocks += [c for m in messages for c in (m.get("content") or []) if isinstance(c, dict)]
    prefix = "".join(c.get("text", "") for c in blocks if c.get("cache_control"))
    user = "".join(t for m in messages for t in _text(m.get("content")))
    return FakeRequest("anthropic", body.get("model", ""), system, user, prefix, body)
