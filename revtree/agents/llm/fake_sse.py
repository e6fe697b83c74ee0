"""The server-sent events of the fake server's streamed answers: a whole answer (as
:class:`~revtree.agents.llm.fake_server.FakeLLMServer` builds it) cut into OpenAI chat
completion chunks or Anthropic message events, as the providers stream them."""

from __future__ import annotations

import json
from typing import Any

Event = tuple[str, str, int]  # (event name or "", data, 1 for a piece of text or arguments)


def _pieces(text: str, n: int) -> list[str]:
    return [text[i : i + n] for i in range(0, len(text), n)]


def openai_events(whole: dict[str, Any], n: int, include_usage: bool) -> list[Event]:
    """The chunks of an OpenAI chat completion: the role, the text, each tool call (its
    name, then its arguments), the finish reason, and the usage if asked for."""
    base: dict[str, Any] = {k: whole[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    if include_usage:
        base["usage"] = None  # as the API does: null until the last chunk

    def chunk(delta: dict[str, Any], finish: str | None = None, piece: int = 0) -> Event:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return "", json.dumps({**base, "choices": [choice]}), piece

    message = whole["choices"][0]["message"]
    text = message.get("content") or ""
    events = [chunk({"role": "assistant", "content": "" if text else message["content"]})]
    events += [chunk({"content": p}, piece=1) for p in _pieces(text, n)]
    for i, c in enumerate(message.get("tool_calls") or ()):
        head = {**c, "index": i, "function": {"name": c["function"]["name"], "arguments": ""}}
        events.append(chunk({"tool_calls": [head]}))
        events += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}, piece=1)
            for p in _pieces(c["function"]["arguments"], n)
        ]
    events.append(chunk({}, whole["choices"][0]["finish_reason"]))
    if include_usage:
        events.append(("", json.dumps({**base, "choices": [], "usage": whole["usage"]}), 0))
    return [*events, ("", "[DONE]", 0)]


def anthropic_events(whole: dict[str, Any], n: int) -> list[Event]:
    """The events of an Anthropic message: its start (with the input usage), each content
    block (text deltas, or a ``tool_use`` block's input as JSON deltas), the stop reason
    with the output usage, and the stop."""
    usage = whole["usage"]
    start = {**whole, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[tuple[dict[str, Any], int]] = [
        ({"type": "message_start", "message": start}, 0),
        ({"type": "ping"}, 0),
    ]
    for i, block in enumerate(whole["content"]):
        if block["type"] == "tool_use":
            first, kind, key = {**block, "input": {}}, "input_json_delta", "partial_json"
            pieces = _pieces(json.dumps(block["input"]), n)
        else:
            first, kind, key = {**block, "text": ""}, "text_delta", "text"
            pieces = _pieces(block.get("text", ""), n)
        events.append(({"type": "content_block_start", "index": i, "content_block": first}, 0))
        events += [
            ({"type": "content_block_delta", "index": i, "delta": {"type": kind, key: p}}, 1)
            for p in pieces
        ]
        events.append(({"type": "content_block_stop", "index": i}, 0))
    events.append(
        (
            {
                "type": "message_delta",
                "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
            0,
        )
    )
    events.append(({"type": "message_stop"}, 0))
    return [(e["type"], json.dumps(e), piece) for e, piece in events]
