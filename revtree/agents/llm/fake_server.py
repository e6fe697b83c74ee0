"""A fake OpenAI- and Anthropic-compatible HTTP server on 127.0.0.1, for tests and demos.

The real SDK clients talk to it over real HTTP. A responder decides each answer: text,
an HTTP error with headers (429 with retry-after, 500), a delay (a hung connection),
a raw body (invalid JSON), or a cut-off answer. A request that asks for a stream
(``"stream": true``) gets server-sent events, as the providers send them. Usage is
reported like the providers do, including prompt caching: a prompt prefix seen before
counts as cached tokens.

Structured answers: a responder sees the request's tools and response format
(``FakeRequest.tools``, ``FakeRequest.schema``) and may answer tool calls
(``FakeReply.tool_calls``: OpenAI ``message.tool_calls``, Anthropic ``tool_use`` blocks),
a JSON text, or a 400 whose ``message`` names what the server does not support.

The streamed events are cut in :mod:`revtree.agents.llm.fake_sse`; the embeddings fake
is :class:`revtree.agents.llm.fake_embeddings.EmbeddingsFakeLLMServer`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from revtree.agents.llm.base import estimate_tokens
from revtree.agents.llm.fake_sse import anthropic_events, openai_events


@dataclass
class FakeRequest:
    api: str  # "openai" or "anthropic"
    model: str
    system: str
    user: str
    prefix: str
    body: dict[str, Any]
    key: str = ""  # the API key the request came with (a bearer token or x-api-key)

    @property
    def tools(self) -> list[str]:
        """The names of the tools the request offers (either API)."""
        return [t.get("function", t).get("name", "") for t in self.body.get("tools") or ()]

    @property
    def schema(self) -> dict[str, Any] | None:
        """The JSON schema of a ``json_schema`` response format, if the request has one."""
        fmt = self.body.get("response_format") or {}
        if fmt.get("type") != "json_schema":
            return None
        schema: dict[str, Any] = fmt["json_schema"]["schema"]
        return schema


@dataclass
class FakeReply:
    text: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    raw: bytes | None = None
    finish_reason: str = "stop"
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (name, args)
    message: str | None = None  # an error's message (status >= 400)


Responder = Callable[[FakeRequest], "FakeReply | str"]


class FakeLLMServer:
    """``with FakeLLMServer(responder) as srv:`` then point clients at ``srv.openai_url``
    or ``srv.anthropic_url``.

    A request whose body says ``"stream": true`` is answered as the providers stream,
    with server-sent events (OpenAI chat completion chunks, with the usage in a last
    chunk when ``stream_options.include_usage``; Anthropic message events): the text and
    each tool call's arguments in pieces of ``chunk_chars``, one event every
    ``chunk_delay`` seconds; after ``stall_after`` pieces (when set) the stream goes
    silent for ``stall`` seconds, a stalled stream. A reply's ``delay`` comes before the
    response starts (a hung connection), an error status is answered whole as JSON, and
    a ``raw`` body is sent as one event's data (verbatim when it already reads as
    server-sent events, e.g. a stream cut off mid-way).

    Servers as they are: ``stream=False`` ignores a request's ``stream`` and answers
    every request whole, as some servers and proxies do; ``json_type`` and ``sse_type``
    are the content types of whole answers and of streams (e.g. ``text/plain``, or
    ``text/event-stream; charset=utf-8``)."""

    def __init__(
        self,
        responder: Responder,
        cache_min_tokens: int = 1024,
        port: int = 0,
        *,
        chunk_chars: int = 16,
        chunk_delay: float = 0.0,
        stall_after: int | None = None,
        stall: float = 0.0,
        stream: bool = True,
        json_type: str = "application/json",
        sse_type: str = "text/event-stream",
    ) -> None:
        self.streams, self.json_type, self.sse_type = stream, json_type, sse_type
        self.responder = responder
        self.cache_min_chars = cache_min_tokens * 4
        self.chunk_chars, self.chunk_delay = max(1, chunk_chars), chunk_delay
        self.stall_after, self.stall = stall_after, stall
        self.requests: list[FakeRequest] = []
        self.seen_prefixes: set[tuple[str, str]] = set()
        self.seen_prompts: list[str] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", port), self.handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

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

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                """Quiet."""

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                bearer = self.headers.get("authorization", "").removeprefix("Bearer ")
                req = _parse(self.path, body, bearer or self.headers.get("x-api-key", ""))
                with fake.lock:
                    fake.requests.append(req)
                reply = fake.responder(req)
                if isinstance(reply, str):
                    reply = FakeReply(reply)
                if reply.delay:
                    time.sleep(reply.delay)
                try:
                    if body.get("stream") and fake.streams and reply.status < 400:
                        fake._stream(self, req, reply)
                    else:
                        fake._whole(self, req, reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout, a stall): fine

        return Handler

    def _whole(self, out: BaseHTTPRequestHandler, req: FakeRequest, reply: FakeReply) -> None:
        """The answer as one JSON body (or the reply's raw bytes)."""
        data = reply.raw if reply.raw is not None else json.dumps(self._answer(req, reply)).encode()
        out.send_response(reply.status)
        out.send_header("content-type", self.json_type)
        for k, v in reply.headers.items():
            out.send_header(k, v)
        out.send_header("content-length", str(len(data)))
        out.end_headers()
        out.wfile.write(data)

    def _stream(self, out: BaseHTTPRequestHandler, req: FakeRequest, reply: FakeReply) -> None:
        """The answer as server-sent events, then the connection closes."""
        out.send_response(reply.status)
        out.send_header("content-type", self.sse_type)
        out.send_header("cache-control", "no-cache")
        for k, v in reply.headers.items():
            out.send_header(k, v)
        out.end_headers()
        if reply.raw is not None:
            out.wfile.write(_raw_events(req, reply.raw))
            out.wfile.flush()
            return
        whole = self._answer(req, reply)  # usage, as the whole answer reports it
        n = self.chunk_chars
        if req.api == "openai":
            options = req.body.get("stream_options") or {}
            events = openai_events(whole, n, bool(options.get("include_usage")))
        else:
            events = anthropic_events(whole, n)
        sent, stalled = 0, False  # pieces of text or arguments sent; stalled yet
        for name, data, piece in events:
            if (
                self.stall_after is not None
                and not stalled
                and sent == self.stall_after
                and (piece or sent)
            ):
                stalled = True
                time.sleep(self.stall)
            elif self.chunk_delay:
                time.sleep(self.chunk_delay)
            head = f"event: {name}\n" if name else ""
            out.wfile.write(f"{head}data: {data}\n\n".encode())
            out.wfile.flush()
            sent += piece

    def _answer(self, req: FakeRequest, reply: FakeReply) -> dict[str, Any]:
        if reply.status >= 400:
            error = reply.message or f"fake status {reply.status}"
            return {"error": {"type": "invalid_request_error", "message": error}}
        prompt_tokens = estimate_tokens(req.system + req.user)
        with self.lock:
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
        calls_json = json.dumps(reply.tool_calls) if reply.tool_calls else ""
        out_tokens = estimate_tokens(reply.text + calls_json)
        if req.api == "openai":
            message: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if reply.tool_calls:
                message["content"] = reply.text or None
                message["tool_calls"] = [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                    for i, (name, args) in enumerate(reply.tool_calls)
                ]
            finish = reply.finish_reason
            if reply.tool_calls and finish == "stop":
                finish = "tool_calls"
            return {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": req.model,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": finish,
                        "message": message,
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
            "content": [
                *(
                    [{"type": "text", "text": reply.text}]
                    if reply.text or not reply.tool_calls
                    else []
                ),
                *(
                    {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": args}
                    for i, (name, args) in enumerate(reply.tool_calls)
                ),
            ],
            "stop_reason": "max_tokens"
            if reply.finish_reason == "length"
            else "tool_use"
            if reply.tool_calls
            else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": prompt_tokens - cached_tokens - write,
                "output_tokens": out_tokens,
                "cache_read_input_tokens": cached_tokens,
                "cache_creation_input_tokens": write,
            },
        }


def _common(a: str, b: str) -> int:
    """The length of the prefix ``a`` and ``b`` share: a binary search over slices
    compared in C (a character loop in Python, over the last 64 prompts of about 2,000
    characters, took 5-8 ms of each answer)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _text(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [c.get("text", "") for c in content or [] if isinstance(c, dict)]


def _parse(path: str, body: dict[str, Any], key: str = "") -> FakeRequest:
    messages = body.get("messages") or []
    if path.endswith("/chat/completions"):
        system = "".join(
            t for m in messages if m.get("role") == "system" for t in _text(m.get("content"))
        )
        user = "".join(
            t for m in messages if m.get("role") == "user" for t in _text(m.get("content"))
        )
        prefix = user.split("\n\n", 1)[0] if "\n\n" in user else ""
        return FakeRequest("openai", body.get("model", ""), system, user, prefix, body, key)
    system_blocks = body.get("system")
    system = "".join(_text(system_blocks))
    blocks = [
        b for b in (system_blocks if isinstance(system_blocks, list) else []) if isinstance(b, dict)
    ]
    blocks += [c for m in messages for c in (m.get("content") or []) if isinstance(c, dict)]
    prefix = "".join(c.get("text", "") for c in blocks if c.get("cache_control"))
    user = "".join(t for m in messages for t in _text(m.get("content")))
    return FakeRequest("anthropic", body.get("model", ""), system, user, prefix, body, key)


#: the edit dialects real models write, in the order ``DialectCycle`` rotates through them
DIALECTS = ("named", "bare", "header", "udiff", "whole", "think", "indent", "prose")


def current_file(req: FakeRequest, path: str) -> str | None:
    """The latest text of ``path`` shown in a request (the parent's version if the prompt
    shows one, else the baseline's), as ``render_files`` lays files out."""
    text = req.system + "\n" + req.user
    at = text.rfind(f"--- {path} ---\n")
    if at < 0:
        return None
    body = text[at + len(f"--- {path} ---\n") :]
    ends = [body.find(s) for s in ("\n--- ", "\nEditable files:", "\n\nHypothesis:")]
    cut = min((e for e in ends if e >= 0), default=len(body))
    return body[:cut] + "\n"


class DialectCycle:
    """Writes one-line edits the way real models do, a different dialect each call.

    ``answer(path, text, old, new)`` replaces the line ``old`` of ``text`` (the file at
    ``path``) with ``new``, in the next dialect of ``dialects``; ``used`` lists them."""

    def __init__(self, dialects: tuple[str, ...] = DIALECTS) -> None:
        self.dialects, self.used = dialects, list[str]()

    def answer(self, path: str, text: str, old: str, new: str) -> str:
        dialect = self.dialects[len(self.used) % len(self.dialects)]
        self.used.append(dialect)
        block = f"<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n"
        line = text.splitlines().index(old) + 1
        shift, whole = "    ", text.replace(old + "\n", new + "\n")
        return {
            "named": f"{path}\n{block}",
            "bare": f"Here is the change:\n\n{block}",
            "header": f"### {path}\n\n```python\n{block}```\n",
            "udiff": f"```diff\n--- a/{path}\n+++ b/{path}\n@@ -{line},1 +{line},1 @@\n"
            f"-{old}\n+{new}\n```\n",
            "whole": f"The full program:\n\n```python\n{whole}```",
            "think": f"<think>\nMaybe edit {path}? I will change the harness.\n</think>\n{block}",
            "indent": f"**{path}**\n```python\n<<<<<<< SEARCH\n{shift}{old.strip()}\n=======\n"
            f"{shift}{new.strip()}\n>>>>>>> REPLACE\n```\n",
            "prose": f"I will change the harness.\n{block}",
        }[dialect]


#: every ``FakeLLMServer`` streams when asked: the name is kept for the tests that use it
StreamingFakeLLMServer = FakeLLMServer


def _raw_events(req: FakeRequest, raw: bytes) -> bytes:
    """A raw reply to a streamed request: verbatim if it reads as server-sent events
    already (a hand-made or cut-off stream), else the data of one event (an Anthropic
    one named by its ``type``, if it has one), after which the stream just ends."""
    if raw.lstrip().startswith((b"data:", b"event:", b":")):
        return raw
    data = b"data: " + raw.replace(b"\n", b"\ndata: ") + b"\n\n"
    if req.api == "openai":
        return data
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    kind = parsed.get("type") if isinstance(parsed, dict) else None
    name = kind if isinstance(kind, str) and kind else "message_start"
    return f"event: {name}\n".encode() + data


# -- tool-using coders (appended) ---------------------------------------------------------
_TOOL_STEP = re.compile(r"^You called (\w+)\((.*)\)\nResult:\n", re.M)


def tool_results(req: FakeRequest) -> list[tuple[str, dict[str, Any], str]]:
    """The tool calls a tool-using coder's request shows it made so far, in order, as
    ``(name, arguments, result)`` (read from the 'Your work so far' part of its prompt)."""
    text = req.user
    found = list(_TOOL_STEP.finditer(text))
    out = []
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        result = re.split(r"\n\n## Step \d+\n", text[m.end() : end], maxsplit=1)[0]
        try:
            args = json.loads(m.group(2))
        except ValueError:
            args = {}
        out.append((m.group(1), args if isinstance(args, dict) else {}, result.rstrip("\n")))
    return out


# -- a server from the command line -------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    """``python -m revtree.agents.llm.fake_server [--port N] [--responder MODULE:NAME]
    [--no-stream] [--json-type T] [--sse-type T]``: serve on 127.0.0.1, print the
    OpenAI-style URL, until interrupted."""
    import argparse
    import contextlib
    import importlib

    parser = argparse.ArgumentParser(
        prog="python -m revtree.agents.llm.fake_server",
        description="A fake OpenAI- and Anthropic-compatible model server on 127.0.0.1, "
        "for trying revtree without a key (no real model answers).",
        epilog="e.g. --responder revtree.orchestrator.commands.scaffold:DemoResponder "
        "(the simulated model of `revtree demo --llm`), then `revtree run TASK --model "
        "openai-compatible:fake --base-url URL`",
    )
    parser.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    parser.add_argument(
        "--responder",
        metavar="MODULE:NAME",
        help="a callable (or a class, instantiated) that answers each request; "
        "default: always 'ok'",
    )
    parser.add_argument(
        "--no-stream",
        action="store_true",
        help="ignore a request's 'stream' and answer whole JSON, as some servers do",
    )
    parser.add_argument("--json-type", default="application/json", help="of whole answers")
    parser.add_argument("--sse-type", default="text/event-stream", help="of streams")
    args = parser.parse_args(argv)
    responder: Responder = _ok
    if args.responder:
        module, _, name = args.responder.partition(":")
        found = getattr(importlib.import_module(module), name)
        responder = found() if isinstance(found, type) else found
    kinds = {"json_type": args.json_type, "sse_type": args.sse_type}
    with FakeLLMServer(responder, port=args.port, stream=not args.no_stream, **kinds) as srv:
        print(f"fake model server (no real model) at {srv.openai_url}", flush=True)
        print(f"anthropic-style clients: {srv.anthropic_url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            srv.thread.join()


def _ok(req: FakeRequest) -> str:
    return "ok"


if __name__ == "__main__":
    main()
