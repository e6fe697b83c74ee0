"""A server that ignores ``stream: true`` and answers whole JSON: a whole run completes
through the real openai and anthropic SDKs, every candidate's edit lands, and the switch
to whole answers is said once in the run's warnings, not per call."""

from __future__ import annotations

from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer
from revtree.memory import NodeStatus, RunStatus, Store

from .test_llm_run import Scientist, drive, make_task


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_run_against_a_server_that_does_not_stream_completes_with_one_warning(
    tmp_path: Path, home: Path, store: Store, api: str
) -> None:
    task = make_task(tmp_path / "t", budget=5, reviewer=True)
    if api == "anthropic":
        text = (task / "task.toml").read_text()
        text = text.replace("openai-compatible:fake-model", "anthropic:claude-fake")
        (task / "task.toml").write_text(text.replace("fake-model = {", "claude-fake = {"))
    with FakeLLMServer(Scientist(), stream=False) as srv:
        run_id = drive(store, home, task, srv.openai_url if api == "openai" else srv.anthropic_url)
        asked = [bool(r.body.get("stream")) for r in srv.requests]
        apis = {r.api for r in srv.requests}
    run = store.get_run(run_id)
    candidates = [n for n in store.nodes(run_id) if n.parent_id is not None]
    assert run.status is RunStatus.COMPLETED and apis == {api}
    assert len(candidates) == 4 and all(n.status is NodeStatus.SUCCEEDED for n in candidates), [
        (n.status, n.error) for n in candidates
    ]
    assert all(n.commit for n in candidates)  # every candidate's edit landed
    calls = store.llm_calls(run_id)
    assert calls and all(c.ok for c in calls) and {c.role for c in calls} >= {"coder", "reviewer"}
    # each role's client asked for a stream once, got a whole answer, and stopped asking
    assert asked.count(True) == 3 and len(asked) > 3 and not any(asked[len(asked) // 2 :])
    warnings = [e.message for e in store.events_since(run_id) if e.kind == "warning"]
    said = [w for w in warnings if "not streamed for the rest of the run" in w]
    assert len(said) == 1, warnings


@pytest.mark.slow
def test_cli_the_fake_server_without_streams_and_a_run_that_says_so_once(
    tmp_path: Path, home: Path
) -> None:
    """``python -m revtree.agents.llm.fake_server --no-stream`` and ``revtree run``, both
    real processes: the live log says once that the model is not streamed."""
    import subprocess
    import sys

    from .conftest import cli_env, drive_here, revtree_here

    task = make_task(tmp_path / "t", budget=4)
    server = subprocess.Popen(
        [
            sys.executable,
            *("-m", "revtree.agents.llm.fake_server", "--no-stream"),
            *("--responder", "tests.orchestrator.test_llm_run:Scientist"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=cli_env(home),
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split(" at ")[-1].strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), url
        out = drive_here(home, "run", str(task), "--base-url", url).stdout
    finally:
        server.terminate()
        server.wait(timeout=30)
    said = [ln for ln in out.splitlines() if "not streamed for the rest of the run" in ln]
    assert len(said) == 1, out
    assert "fake-model at http://127.0.0.1:" in said[0] and "application/json" in said[0]
    shown = revtree_here(home, "show", "last", "--json", "--nodes").stdout
    import json

    data = json.loads(shown)
    assert data["status"] == "completed" and data["best_score"] < data["baseline_score"]
    assert all(n["status"] == "succeeded" for n in data["nodes"][1:]), data["nodes"]
