"""Servers as they are: ones that ignore ``stream``, odd content types, streams that end
without ``[DONE]``, and errors that name what came back.

The real openai and anthropic SDKs talk over HTTP to the fake server on 127.0.0.1."""

from __future__ import annotations

import functools
import json
import multiprocessing
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from revtree.agents.llm import LLMError, Prompt, base, make_llm
from revtree.agents.llm.base import NOTICE, Completion
from revtree.agents.llm.fake_server import FakeLLMServer, FakeReply, FakeRequest

APIS = ["openai", "anthropic"]
PROMPT = Prompt("system", "prefix", "user")


def url(srv: FakeLLMServer, api: str) -> str:
    return srv.openai_url if api == "openai" else srv.anthropic_url


@contextmanager
def notices() -> Iterator[list[tuple[str, str]]]:
    said: list[tuple[str, str]] = []
    token = NOTICE.set(lambda key, message: said.append((key, message)))
    try:
        yield said
    finally:
        NOTICE.reset(token)


def ask(srv: FakeLLMServer, api: str, n: int = 1, **kw: object) -> list[Completion]:
    llm = make_llm(f"{api}:m", base_url=url(srv, api), max_retries=0, stream=True, **kw)  # type: ignore[arg-type]
    return [llm.complete(PROMPT, max_tokens=200, temperature=0) for _ in range(n)]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("json_type", ["application/json", "text/plain; charset=utf-8"])
def test_a_whole_answer_to_a_streamed_request_is_the_answer_and_streaming_stops(
    api: str, json_type: str
) -> None:
    with FakeLLMServer(
        lambda req: f"answer {len(req.user)}", stream=False, json_type=json_type
    ) as srv:
        with notices() as said:
            replies = ask(srv, api, n=3)
        asked = [bool(r.body.get("stream")) for r in srv.requests]
    assert [r.text for r in replies] == ["answer 4"] * 3
    assert all(r.usage.output_tokens > 0 and r.usage.input_tokens > 0 for r in replies)
    assert asked == [True, False, False]  # switched after the first whole answer
    assert len(said) == 1, said
    assert "m at http://127.0.0.1:" in said[0][1] and "not streamed for the rest" in said[0][1]
    assert json_type.split(";")[0] in said[0][1]


@pytest.mark.parametrize("api", APIS)
def test_tool_calls_in_a_whole_answer_to_a_streamed_request_are_read(api: str) -> None:
    from revtree.agents.llm.base import Structure, Tool

    tool = Tool("verdict", "say it", {"type": "object", "properties": {"ok": {"type": "boolean"}}})
    prompt = Prompt("s", "p", "u", Structure("tools", "verdict", (tool,)))

    def answer(req: FakeRequest) -> FakeReply:
        return FakeReply(tool_calls=[("verdict", {"ok": True})])

    with FakeLLMServer(answer, stream=False) as srv, notices():
        llm = make_llm(f"{api}:m", base_url=url(srv, api), max_retries=0, stream=True)
        reply = llm.complete(prompt, max_tokens=200, temperature=0)
    assert [(c.name, dict(c.arguments)) for c in reply.calls] == [("verdict", {"ok": True})]


def test_without_a_meter_the_switch_is_a_python_warning_once() -> None:
    server = FakeLLMServer(lambda req: "ok", stream=False)
    with server as srv, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [r.text for r in ask(srv, "openai", n=3)] == ["ok"] * 3
    said = [w for w in caught if "not streamed for the rest" in str(w.message)]
    assert len(said) == 1 and said[0].category is RuntimeWarning


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    "sse_type", ["text/event-stream; charset=utf-8", "application/json", "text/plain"]
)
def test_a_stream_under_any_content_type_is_read_as_a_stream(api: str, sse_type: str) -> None:
    text = "streamed " * 20
    with FakeLLMServer(lambda req: text, sse_type=sse_type, chunk_chars=9) as srv:
        with notices() as said:
            replies = ask(srv, api, n=2)
        asked = [bool(r.body.get("stream")) for r in srv.requests]
    assert [r.text for r in replies] == [text, text] and asked == [True, True] and not said


def openai_sse(*chunks: dict[str, object], done: bool) -> bytes:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    events = [f"data: {json.dumps({**base, 'choices': [c]})}\n\n" for c in chunks]
    return ("".join(events) + ("data: [DONE]\n\n" if done else "")).encode()


def anthropic_sse(stop: str | None, message_stop: bool) -> bytes:
    usage = {"input_tokens": 3, "output_tokens": 1}
    message = {"id": "x", "type": "message", "role": "assistant", "model": "m", "content": []}
    events: list[dict[str, object]] = [
        {"type": "message_start", "message": {**message, "stop_reason": None, "usage": usage}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_stop", "index": 0},
    ]
    if stop:
        delta = {"stop_reason": stop, "stop_sequence": None}
        events.append({"type": "message_delta", "delta": delta, "usage": {"output_tokens": 2}})
    if message_stop:
        events.append({"type": "message_stop"})
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


@pytest.mark.parametrize("api", APIS)
def test_a_stream_that_ends_after_its_finish_reason_is_complete_without_done(api: str) -> None:
    if api == "openai":
        complete = openai_sse(
            {"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None},
            {"index": 0, "delta": {}, "finish_reason": "stop"},
            done=False,
        )
        cut = openai_sse(
            {"index": 0, "delta": {"content": "hi"}, "finish_reason": None}, done=False
        )
    else:
        complete, cut = anthropic_sse("end_turn", False), anthropic_sse(None, False)
    with FakeLLMServer(lambda req: FakeReply(raw=complete)) as srv:
        (reply,) = ask(srv, api)
    assert reply.text == "hi" and reply.finish_reason in ("stop", "end_turn")
    server = FakeLLMServer(lambda req: FakeReply(raw=cut))
    with server as srv, pytest.raises(LLMError, match="cut off: the stream ended without a"):
        ask(srv, api)


PAGE = b"<html><head><title>502 Bad Gateway</title></head><body>" + b"x" * 300 + b"TAIL</body>"


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_an_unusable_answer_names_status_content_type_and_the_body_start(
    api: str, stream: bool
) -> None:
    def answer(req: FakeRequest) -> FakeReply:
        return FakeReply(raw=PAGE)

    with FakeLLMServer(answer, stream=False, json_type="text/html") as srv:
        llm = make_llm(f"{api}:m", base_url=url(srv, api), max_retries=0, stream=stream)
        with notices() as said, pytest.raises(LLMError) as err:
            llm.complete(PROMPT, max_tokens=200, temperature=0)
    message = str(err.value)
    assert (
        "HTTP 200, content-type 'text/html', body b'<html><head><title>502 Bad Gateway" in message
    )
    assert PAGE[:200].decode() in message and "TAIL" not in message, message
    assert not said  # an unusable answer switches nothing


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("reply", "status", "start"),
    [
        (FakeReply(status=500, message="upstream exploded"), 500, b'{"error": {"type"'),
        (FakeReply(raw=b"{not json at all"), 200, b"{not json at all"),
        (FakeReply(raw=b'{"object": "list", "data": []}'), 200, b'{"object": "list"'),
    ],
    ids=["http 500", "invalid json", "wrong shape"],
)
def test_errors_of_a_non_streaming_server_name_what_came_back(
    api: str, reply: FakeReply, status: int, start: bytes
) -> None:
    server = FakeLLMServer(lambda req: reply, stream=False)
    with server as srv, notices(), pytest.raises(LLMError) as err:
        ask(srv, api)
    message = str(err.value)
    assert f"HTTP {status}, content-type 'application/json', body {start!r}"[:-1] in message, (
        message
    )


@pytest.mark.parametrize("api", APIS)
def test_a_connection_dropped_after_the_finish_reason_still_completes_the_answer(
    api: str,
) -> None:
    """The server promises more bytes than it sends, then closes: after the finish
    reason that is the end of the answer; before it, the answer is lost."""
    if api == "openai":
        done = openai_sse(
            {"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None},
            {"index": 0, "delta": {}, "finish_reason": "stop"},
            done=False,
        )
        cut = openai_sse(
            {"index": 0, "delta": {"content": "hi"}, "finish_reason": None}, done=False
        )
    else:
        done, cut = anthropic_sse("end_turn", False), anthropic_sse(None, False)
    short = {"content-length": "99999"}
    with FakeLLMServer(lambda req: FakeReply(raw=done, headers=short)) as srv:
        (reply,) = ask(srv, api)
    assert reply.text == "hi"
    server = FakeLLMServer(lambda req: FakeReply(raw=cut, headers=short))
    with server as srv, pytest.raises(LLMError, match="cut off: the connection closed before"):
        ask(srv, api)


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("status", [401, 500])
def test_an_error_body_echoing_the_key_is_shown_short_without_it_or_escapes(
    api: str, status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-test-0123456789abcdef"  # a proxy that echoes the request's headers back
    monkeypatch.setenv("OPENAI_API_KEY" if api == "openai" else "ANTHROPIC_API_KEY", key)
    said = f"you sent Authorization: Bearer {key} \x1b[2J\x1b]0;owned\x07" + "x" * 100_000
    server = FakeLLMServer(lambda req: FakeReply(status=status, message=said), stream=False)
    with server as srv, notices(), pytest.raises(Exception) as err:
        ask(srv, api)
    message = str(err.value)
    assert key not in message and "***" in message, message
    assert "\x1b" not in message and "\x07" not in message, message
    assert len(message) < 2_000, len(message)


def _error(message: str, req: FakeRequest) -> FakeReply:
    return FakeReply(status=500, message=message)


@pytest.mark.parametrize("api", APIS)
def test_a_key_cut_by_the_body_start_shown_is_hidden_too(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-test-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY" if api == "openai" else "ANTHROPIC_API_KEY", key)
    for pad in [*range(122, 142, 4), *range(262, 282, 4)]:  # a cut inside the echoed key
        said = "y" * pad + key + "z" * 400
        server = FakeLLMServer(functools.partial(_error, said), stream=False)
        with server as srv, notices(), pytest.raises(Exception) as err:
            ask(srv, api)
        assert key[:6] not in str(err.value), (pad, str(err.value))


def test_a_stream_read_as_json_takes_usage_tool_calls_and_null_deltas() -> None:
    """The chunks are read as the JSON they are, not as SDK objects: a tool call in
    pieces, a chunk with a null delta, the usage with cached tokens in a last chunk."""
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "served-m"}
    calls = [
        {"index": 0, "id": "t", "type": "function", "function": {"name": "edit", "arguments": ""}},
        {"index": 0, "function": {"arguments": '{"path": "a.py"'}},
        {"index": 0, "function": {"arguments": ', "text": "x"}'}},
    ]
    chunks = [{"index": 0, "delta": {"tool_calls": [c]}, "finish_reason": None} for c in calls]
    chunks.append({"index": 0, "delta": None, "finish_reason": "tool_calls"})
    usage = {
        "prompt_tokens": 11,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 5},
    }
    events = [f"data: {json.dumps({**base, 'choices': [c]})}\n\n" for c in chunks]
    events.append(
        f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n"
    )
    with FakeLLMServer(lambda req: FakeReply(raw="".join(events).encode())) as srv:
        (reply,) = ask(srv, "openai")
    assert [(c.name, c.arguments) for c in reply.calls] == [("edit", {"path": "a.py", "text": "x"})]
    assert reply.model == "served-m" and reply.finish_reason == "tool_calls"
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (11, 7)
    assert reply.usage.cached_tokens == 5


@pytest.mark.parametrize(
    ("events", "said"),
    [
        (b'data: {"error": {"message": "the model is overloaded"}}\n\n', "the model is overloaded"),
        (b"data: [1, 2, 3]\n\n", "not valid JSON of the expected shape"),
        (b'data: {"choices": "nope"}\n\n', "not valid JSON of the expected shape"),
    ],
    ids=["error event", "a list", "choices not a list"],
)
def test_an_odd_event_in_an_openai_stream_is_an_error_that_says_so(
    events: bytes, said: str
) -> None:
    with (
        FakeLLMServer(lambda req: FakeReply(raw=events)) as srv,
        pytest.raises(LLMError, match=said),
    ):
        ask(srv, "openai")


@pytest.mark.parametrize("api", APIS)
def test_clients_share_one_http_client_and_each_keeps_its_own_options(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every SDK client a process makes for a URL after its first is the first's
    ``with_options`` (``base.shared_client``): one HTTP client, so one TLS context
    loaded, yet each sends its own key with its own retries; another URL has its own."""
    monkeypatch.setattr(base, "_SHARED", {})  # no client an earlier test made
    monkeypatch.setenv("KEY_A", "key-a")
    monkeypatch.setenv("KEY_B", "key-b")
    srv = FakeLLMServer(lambda req: "one" if req.key == "key-a" else FakeReply("", status=500))
    with srv, FakeLLMServer(lambda req: "other") as elsewhere:
        a = make_llm(f"{api}:m", url(srv, api), "KEY_A", max_retries=0)
        b = make_llm(f"{api}:m", url(srv, api), "KEY_B", max_retries=1)
        c = make_llm(f"{api}:m", url(elsewhere, api), "KEY_A", max_retries=0)
        assert a.client._client is b.client._client  # type: ignore[attr-defined]
        assert c.client._client is not a.client._client  # type: ignore[attr-defined]
        assert a.complete(PROMPT, max_tokens=20, temperature=0).text == "one"
        with pytest.raises(LLMError):
            b.complete(PROMPT, max_tokens=20, temperature=0)
        assert c.complete(PROMPT, max_tokens=20, temperature=0).text == "other"
    assert [r.key for r in srv.requests] == ["key-a", "key-b", "key-b"]  # b's one retry
    assert (a.client.max_retries, b.client.max_retries) == (0, 1)  # type: ignore[attr-defined]


@pytest.mark.parametrize("api", APIS)
def test_a_client_given_no_url_reads_the_sdks_default_not_an_earlier_clients(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy keeps its original's URL where given none: a client with no base URL must
    go where a new one would (the SDK's variable here, set after a client was made
    without it), never to an earlier client's server with its key."""
    monkeypatch.setattr(base, "_SHARED", {})  # no client an earlier test made
    monkeypatch.setenv("KEY_A", "key-local")
    monkeypatch.setenv("KEY_B", "key-real")
    local, default = FakeLLMServer(lambda req: "local"), FakeLLMServer(lambda req: "default")
    with local, default, FakeLLMServer(lambda req: "stale") as stale:
        monkeypatch.setenv(f"{api.upper()}_BASE_URL", url(stale, api))
        make_llm(f"{api}:m", None, "KEY_B", max_retries=0)  # made before the variable moved
        monkeypatch.setenv(f"{api.upper()}_BASE_URL", url(default, api))
        first = make_llm(f"{api}:m", url(local, api), "KEY_A", max_retries=0)
        later = make_llm(f"{api}:m", None, "KEY_B", max_retries=0)
        assert later.complete(PROMPT, max_tokens=20, temperature=0).text == "default"
        assert first.complete(PROMPT, max_tokens=20, temperature=0).text == "local"
    assert [r.key for r in default.requests] == ["key-real"]
    assert [r.key for r in local.requests] == ["key-local"]


def _client_in_fork(api: str, base_url: str, out: Any) -> None:
    llm = make_llm(f"{api}:m", base_url=base_url, max_retries=0)
    out.put(id(llm.client._client))  # type: ignore[attr-defined]


@pytest.mark.parametrize("api", APIS)
def test_a_forked_child_makes_an_http_client_of_its_own(api: str) -> None:
    with FakeLLMServer(lambda req: "x") as srv:
        mine = make_llm(f"{api}:m", base_url=url(srv, api), max_retries=0)
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_client_in_fork, args=(api, url(srv, api), out))
        child.start()
        theirs = out.get(timeout=60)
        child.join(30)
    assert child.exitcode == 0
    assert theirs != id(mine.client._client)  # type: ignore[attr-defined]
