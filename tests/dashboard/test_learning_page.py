"""Issue 26/27: what the search learnt, on the run page: the model bandit's candidates
and mean reward per model, the operator bandit's per operator, and the near twins
refused before evaluation, read from a real run against the fake server over HTTP
(three models of known quality, one of them repeating earlier answers; greedy with
``operators = "bandit"``; embeddings at the fake server) and shown in headless Chromium."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from revtree.agents.llm.fake_embeddings import EmbeddingsFakeLLMServer
from revtree.agents.llm.fake_models import Climber
from revtree.memory import Store
from tests.dashboard.conftest import ARTIFACTS, Dashboard, Site
from tests.orchestrator.test_model_bandit import QUALITY, climb_task, drive
from tests.orchestrator.test_novelty import by_meaning


@pytest.mark.slow  # a 12-candidate run, then the page
def test_the_run_page_shows_the_bandit_and_the_evaluations_saved(
    page: Any, site: Site, dashboard: Dashboard, tmp_path: Path
) -> None:
    task = climb_task(tmp_path / "t", selection="bandit", budget=13, novelty=0.98)
    toml = task / "task.toml"  # the operators picked by a bandit too
    text = toml.read_text().replace("num_drafts = 1\n", 'num_drafts = 1\noperators = "bandit"\n')
    toml.write_text(text.replace('mode = "llm"', 'mode = "llm"\nembeddings_model = "emb"'))
    climber = Climber(QUALITY, seed=2, repeat=1 / 3)
    with EmbeddingsFakeLLMServer(climber, embed=by_meaning) as srv:
        run_id = drive(Store(site.db), site.home, task, srv.openai_url)
    shown = json.loads(site.cli("show", run_id, "--json").stdout)
    arms = shown["models"]["coder"]["models"]
    saved = shown["novelty"]["evaluations_saved"]
    assert saved > 0, "the fake model repeats itself: some candidate must be a twin"

    page.goto(f"{dashboard.url}/?token={dashboard.token}#/run/{run_id}")
    page.wait_for_selector("#learning table.bandit[data-role='coder']")
    rows = page.eval_on_selector_all(
        "#learning table.bandit[data-role='coder'] tr",
        "rs => rs.map(r => [r.dataset.model, ...[...r.cells].map(c => c.textContent)])",
    )
    assert {r[0] for r in rows} == set(arms)
    for model, name, pulls, _bar, mean in rows:
        assert name == model and int(pulls) == arms[model]["pulls"]
        want = arms[model]["mean_reward"]
        assert mean == ("\u2013" if want is None else f"{want:.2f}")
    ops = shown["operators"]["arms"]
    assert list(ops) == ["draft", "improve", "debug"]
    # every finished candidate, near twins too (refused: reward 0), the baseline aside
    assert sum(a["pulls"] for a in ops.values()) == shown["n_nodes"] - 1
    rows = page.eval_on_selector_all(
        "#learning table.bandit[data-role='operators'] tr",
        "rs => rs.map(r => [r.dataset.operator, ...[...r.cells].map(c => c.textContent)])",
    )
    assert [r[0] for r in rows] == list(ops)
    for op, name, pulls, _bar, mean in rows:
        assert name == op and int(pulls) == ops[op]["pulls"]
        want = ops[op]["mean_reward"]
        assert mean == ("\u2013" if want is None else f"{want:.2f}")
    card = page.inner_text("#learning")
    assert "operators chosen by a bandit (Thompson sampling): candidates and mean reward" in card
    gauge = page.inner_text("[data-gauge='nodes']")  # twins apart from max_nodes
    assert f"(+{saved} near twins)" in gauge and "13 / 13" in gauge.replace("\n", " "), gauge
    said = page.inner_text("#novelty")
    assert said.startswith(f"{saved} candidate") and "0.98" in said, said
    by = shown["novelty"]["by_embeddings"]
    assert f"; {by} of them by the embeddings of their changes (cosine ≥ 0.99)" in said, said
    page.screenshot(path=str(ARTIFACTS / "learning-run-page.png"), full_page=True)
    assert page.errors == []
