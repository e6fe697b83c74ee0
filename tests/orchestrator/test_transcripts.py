"""Transcripts of model calls (stored redacted, capped, compressed; shown by `show
--transcript`) and errors of the model endpoint that name the URL and the model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anthropic
import openai
import pytest

from revtree.agents.llm import Prompt, ScriptedLLM, make_llm
from revtree.agents.llm.fake_server import FakeLLMServer, FakeReply, FakeRequest
from revtree.agents.llm.meter import CAP, Meter, cap, pack, read_prompt, redact, unpack
from revtree.errors import InfrastructureError, LLMUnreachable
from revtree.memory import NodeStatus, Store
from revtree.orchestrator.commands.report import transcripts
from revtree.tasks import load_task

from .conftest import cli_env, revtree, revtree_here
from .conftest import make_task as make_knob_task
from .test_llm_run import Scientist, drive, make_task, role

DEAD = "http://127.0.0.1:9/v1"  # the discard port: nothing listens


def show(home: Path, args: str) -> str:
    """``revtree show ARGS`` in a shell at 80 columns (so a pipe can follow)."""
    env = {**cli_env(home), "COLUMNS": "80"}
    cmd = f"{sys.executable} -m revtree show {args}"
    proc = subprocess.run(cmd, shell=True, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_redaction_covers_keys_tokens_env_values_and_database_passwords(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = (
        "key sk-proj-abcdefghijklmnop1234 and Authorization: Bearer abc.def-ghi_123456\n"
        "MY_KEY=hunter2hunter2 postgresql://revtree:s3cret@db:5432/revtree api_key = 'zz9zz9zz'\n"
        "the configured key: custom-value-77 ends here; AKIAABCDEFGHIJKLMNOP\n"
    )
    out = redact(text, ("custom-value-77",))
    for secret in ("abcdefghijklmnop1234", "abc.def-ghi", "s3cret", "zz9zz9zz", "custom-value-77"):
        assert secret not in out, (secret, out)
    assert "AKIA" not in out and "postgresql://revtree:***@db:5432/revtree" in out
    assert "Bearer ***" in out and "sk-***" in out


def test_redaction_that_skips_a_pattern_whose_text_is_absent_redacts_as_every_pattern() -> None:
    """``redact`` runs a pattern only where the casefolded text holds what its match
    must; on random texts of secret-shaped pieces, case variants and the letters that
    IGNORECASE matches beyond ASCII (long s, Kelvin sign, dotted and dotless i), it
    gives what running every pattern gives."""
    import random

    from revtree.agents.llm.meter import SECRET_PATTERNS

    def every(text: str) -> str:
        for pattern, replacement, _ in SECRET_PATTERNS:
            text = pattern.sub(replacement, text)
        return text

    pieces = [
        "sk-",
        "SK-",
        "bearer ",
        "BEARER\t",
        "Bearer  ",
        "AKIA",
        "ASIA",
        "akia",
        "ghp_",
        "gho_",
        "github_pat_",
        "xoxb-",
        "xoxp-",
        "AIza",
        "aiza",
        "api_key",
        "API-KEY",
        "apikey",
        "access_token",
        "auth-token",
        "secret",
        "SECRET",
        "password",
        "passwd",
        "\u017fecret",
        "pa\u017f\u017fword",
        "api_\u212aey",
        "to\u212aen",
        "ap\u0131_key",
        "ap\u0130_key",
        "postgres://u:",
        "HTTPS://me:",
        "@",
        ":",
        "=",
        " = ",
        "'",
        '"',
        " ",
        "\n",
        ";",
        ",",
        "x",
        "Z",
        "0123456789abcdef",
        "ABCDEFGHIJKLMNOP",
        "-_.~+/=",
    ]
    rng = random.Random(20261206)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 14)))
        assert redact(text) == every(text), text


def test_cap_keeps_head_and_tail_and_pack_round_trips() -> None:
    text = "HEAD" + "x" * (CAP * 2) + "TAIL"
    capped = cap(text)
    assert capped.startswith("HEAD") and capped.endswith("TAIL") and len(capped) < CAP + 100
    assert "characters cut" in capped
    packed = pack(capped)
    assert packed.startswith("revtree-zlib:") and len(packed) < len(capped) / 20
    assert unpack(packed) == capped and unpack("short") == "short" and unpack(None) is None


def test_the_meter_stores_prompts_and_replies_failed_calls_included(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    spec = load_task(make_knob_task(tmp_path / "t"))
    store.create_run("r", "t", "greedy", "minimize", 0, {})
    meter = Meter(store, "r", spec)
    echo = ScriptedLLM(lambda p: f"reply to {p.user} with sk-test-0123456789abcdef")
    prefix = "the baseline " * 500
    meter.bind("coder", 3, echo, attempt=2).complete(
        Prompt("rules", prefix, "do it"), max_tokens=50, temperature=0
    )
    with pytest.raises(Exception, match="no outputs"):
        meter.bind("coder", 3, ScriptedLLM([])).complete(
            Prompt("rules", prefix, "again"), max_tokens=50, temperature=0
        )
    first, failed = store.llm_calls("r")
    asked = read_prompt(first.prompt)
    assert asked["attempt"] == 2 and asked["system"] == "rules" and asked["user"] == "do it"
    assert asked["prefix"] == prefix and first.prompt and first.prompt.startswith("revtree-zlib:")
    assert unpack(first.response) == "reply to do it with ***"  # the key's value
    again = read_prompt(failed.prompt)  # the prefix is stored once, then referenced
    assert again["prefix"] is None and again["prefix_sha"] == asked["prefix_sha"]
    assert again["user"] == "again" and failed.response is None and not failed.ok
    shown = transcripts(store, "r", 3)
    assert [c["call"] for c in shown["calls"]] == [1, 1]  # attempts 2 and 1: one call each
    assert shown["prefixes"] == {asked["prefix_sha"]: prefix}


@pytest.mark.slow  # 8 s of --quick under -n 2 (issue 24)
def test_show_transcript_prints_the_refused_coder_reply(
    tmp_path: Path, home: Path, store: Store
) -> None:
    bad = "I will change the [bold]harness[/bold].\nnot_a_file.py\n<<<<<<< SEARCH\nnothing"

    def answer(req: FakeRequest) -> FakeReply | str:
        return Scientist()(req) if role(req) == "proposer" else bad

    task = make_task(tmp_path / "t", budget=2)
    with FakeLLMServer(answer) as srv:
        run_id = drive(store, home, task, srv.openai_url)
    assert store.node(run_id, 1).status is NodeStatus.FAILED
    out = show(home, f"{run_id} --node 1 --transcript")
    assert "node 1 attempt 1 · coder call 1" in out and "coder call 2" in out  # the repair
    assert "I will change the [bold]harness[/bold]." in out  # raw, markup not read
    assert "proposer call 1" in out and "HYPOTHESIS: fit the slope" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    data = json.loads(
        revtree_here(home, "show", run_id, "--node", "1", "--json", "--transcript").stdout
    )
    calls = data["transcript"]["calls"]
    assert [c["role"] for c in calls] == ["proposer", "coder", "coder"]
    assert calls[1]["response"] == bad and "Write the edits now." in calls[1]["user"]
    assert set(data["transcript"]["prefixes"]) == {calls[0]["prefix"]}
    assert "# Task: fit" in data["transcript"]["prefixes"][calls[0]["prefix"]]
    piped = show(home, f"{run_id} --node 1 --transcript 2>&1 | head -3")
    assert len(piped.splitlines()) == 3 and "Traceback" not in piped  # pipe-safe


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_an_unreachable_endpoint_names_the_url_and_the_model(api: str) -> None:
    url = DEAD if api == "openai" else DEAD.removesuffix("/v1")
    llm = make_llm(f"{api}:gpt-x", base_url=url, max_retries=0, timeout=5)
    with pytest.raises(LLMUnreachable) as err:
        llm.complete(Prompt("s", "p", "u"), max_tokens=10, temperature=0)
    assert isinstance(err.value, InfrastructureError)
    assert f"cannot reach the model endpoint {url} (model gpt-x): APIConnectionError" in str(
        err.value
    )
    assert isinstance(err.value.__cause__, openai.APIError | anthropic.APIError)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_refused_key_and_an_unknown_model_are_named(
    api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_LLM_KEY", "wrong-key-123456")

    def answer(req: FakeRequest) -> FakeReply:
        return FakeReply(status=401 if req.model == "gpt-x" else 404)

    with FakeLLMServer(answer) as srv:
        url = srv.openai_url if api == "openai" else srv.anthropic_url
        for model, expected in (
            ("gpt-x", f"{url} (model gpt-x) refused the key in $MY_LLM_KEY"),
            ("nope", f"{url} (model nope) answered 404: no such model"),
        ):
            llm = make_llm(f"{api}:{model}", base_url=url, api_key_env="MY_LLM_KEY", max_retries=0)
            with pytest.raises(LLMUnreachable) as err:
                llm.complete(Prompt("s", "p", "u"), max_tokens=10, temperature=0)
            assert expected in str(err.value)


def test_unreachable_passes_through_the_meter_unwrapped(tmp_path: Path, store: Store) -> None:
    spec = load_task(make_knob_task(tmp_path / "t"))
    store.create_run("r", "t", "greedy", "minimize", 0, {})
    llm = make_llm("openai-compatible:gpt-x", base_url=DEAD, max_retries=0)
    metered = Meter(store, "r", spec).bind("proposer", 1, llm)
    with pytest.raises(LLMUnreachable, match=r"127\.0\.0\.1:9/v1"):
        metered.complete(Prompt("s", "p", "u"), max_tokens=10, temperature=0)
    (call,) = store.llm_calls("r")
    assert not call.ok and "127.0.0.1:9/v1 (model gpt-x)" in (call.error or "")
    assert read_prompt(call.prompt)["user"] == "u"


@pytest.mark.slow
def test_cli_run_against_an_unreachable_base_url_names_it(tmp_path: Path, home: Path) -> None:
    task = make_task(tmp_path / "t", budget=3)
    proc = revtree(
        home,
        "run",
        str(task),
        "--model",
        "openai-compatible:gpt-x",
        "--base-url",
        DEAD,
        check=False,
    )
    text = proc.stdout + proc.stderr
    assert "cannot reach the model endpoint http://127.0.0.1:9/v1 (model gpt-x)" in text, text


# -- streaming -------------------------------------------------------------------------
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_streamed_answer_arrives_whole_with_its_usage_and_progress(api: str) -> None:
    from revtree.agents.llm.base import PROGRESS
    from revtree.agents.llm.fake_server import StreamingFakeLLMServer

    text = "HYPOTHESIS: stream it\n" + "word " * 200
    seen: list[tuple[int, float]] = []
    with StreamingFakeLLMServer(lambda req: text, chunk_chars=50) as srv:
        url = srv.openai_url if api == "openai" else srv.anthropic_url
        llm = make_llm(f"{api}:m", base_url=url, max_retries=0, stream=True)
        token = PROGRESS.set(lambda tokens, elapsed: seen.append((tokens, elapsed)))
        try:
            reply = llm.complete(Prompt("s", "p", "u"), max_tokens=900, temperature=0)
        finally:
            PROGRESS.reset(token)
        assert srv.requests[0].body["stream"] is True
    assert reply.text == text and reply.finish_reason in ("stop", "end_turn")
    assert reply.usage.output_tokens == len(text) // 4 + 1 and reply.usage.input_tokens > 0
    assert len(seen) == len(text) // 50 + 1 and seen[-1][0] == len(text) // 4 + 1


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_stalled_stream_times_out_and_is_recorded_with_what_came(
    api: str, tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from revtree.agents.llm import StreamStalled
    from revtree.agents.llm import meter as meter_module
    from revtree.agents.llm.fake_server import StreamingFakeLLMServer

    monkeypatch.setattr(meter_module, "PROGRESS_EVERY", 0.05)
    spec = load_task(make_knob_task(tmp_path / "t"))
    store.create_run("r", "t", "greedy", "minimize", 0, {})
    text = "".join(f"line {i}\n" for i in range(40))
    fake = StreamingFakeLLMServer(
        lambda req: text, chunk_chars=7, chunk_delay=0.02, stall_after=30, stall=5.0
    )
    with fake as srv:
        url = srv.openai_url if api == "openai" else srv.anthropic_url
        llm = make_llm(f"{api}:m", base_url=url, max_retries=0, timeout=1.0, stream=True)
        metered = Meter(store, "r", spec).bind("coder", 4, llm)
        with pytest.raises(StreamStalled, match=r"stalled: no data for 1 s after \d+ tokens"):
            metered.complete(Prompt("s", "p", "u"), max_tokens=900, temperature=0)
    (call,) = store.llm_calls("r")
    assert not call.ok and "stalled" in (call.error or "") and url in (call.error or "")
    assert unpack(call.response) == text[: 30 * 7]  # what came before the stall is kept
    progress = [e for e in store.events_since("r") if e.kind == "llm"]
    assert 2 <= len(progress) < 30  # throttled: far fewer events than chunks
    assert progress[-1].node_id == 4 and "node 4: coder (m) answering:" in progress[-1].message
    assert "tokens so far" in progress[-1].message


def test_a_streamed_run_lands_its_candidates(tmp_path: Path, home: Path, store: Store) -> None:
    from revtree.agents.llm.fake_server import StreamingFakeLLMServer
    from revtree.orchestrator import Orchestrator, create_run

    task = make_task(tmp_path / "t", budget=3)
    with StreamingFakeLLMServer(Scientist()) as srv:
        spec = load_task(task).with_overrides(
            agents={"base_url": srv.openai_url, "stream": True, "reviewer": {"enabled": False}}
        )
        run = create_run(store, spec, home)
        Orchestrator(store, run.id, home=home).drive()
        assert all(r.body.get("stream") for r in srv.requests)
    nodes = [n for n in store.nodes(run.id) if n.parent_id is not None]
    assert nodes and all(n.status is NodeStatus.SUCCEEDED for n in nodes), [n.error for n in nodes]
    assert all(c.ok and c.output_tokens > 0 for c in store.llm_calls(run.id))
