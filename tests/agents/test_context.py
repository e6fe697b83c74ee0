"""Prompt context by priority on a synthetic 300-file repository (more than 1 MB), in
real runs: the openai SDK against the fake server, real git, SQL and sandboxes."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from revtree.agents.context import ContextBuilder, RepoContext
from revtree.agents.llm.base import estimate_tokens
from revtree.agents.llm.fake_server import FakeLLMServer, FakeReply, FakeRequest
from revtree.agents.outline import evolve_regions, excerpt, outline, repo_map
from revtree.agents.retrieval import Index
from revtree.agents.roles import render_files
from revtree.memory import Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task
from revtree.tasks.spec import TaskSpec
from tests.agents.test_retrieval import as_bytes, spec_for, synthetic_repo

TOML = """\
name = "synth"
goal = "Make predict(x) in zz_model.py match the hidden target."
editable = ["zz_model.py"]
protected = ["evaluate.py"]
[evaluate]
command = "python evaluate.py"
metric = "err"
direction = "minimize"
timeout = 30
[search]
policy = "greedy"
num_drafts = 1
[budget]
max_nodes = {nodes}
[agents]
mode = "llm"
model = "openai-compatible:fake-model"
max_retries = 0
timeout = 10
[agents.reviewer]
enabled = false
"""
SECRET = "secret evaluation data"


def old_prefix(spec: TaskSpec, baseline: Mapping[str, bytes], budget: int) -> str:
    """The prefix before prioritised context: every file, alphabetically, cut at the
    budget (``task_prefix`` as of HEAD~15)."""
    head = [f"# Task: {spec.name}", spec.goal, "", "# Baseline code"]
    return "\n".join(head) + "\n" + render_files(baseline, budget)


def write_task(root: Path, nodes: int = 4) -> Path:
    for rel, text in synthetic_repo().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "task.toml").write_text(TOML.format(nodes=nodes))
    return root


class Modeller:
    """A scripted model: each coder call changes predict(x), using the smoothing helper
    that search shows it (its name in the added code is what a later candidate reuses)."""

    def __init__(self) -> None:
        self.k = itertools.count(2)

    def __call__(self, req: FakeRequest) -> FakeReply | str:
        if "research lead" in req.system:
            return (
                "HYPOTHESIS: smooth the predictions with the exponential moving average "
                "and scale them\nPLAN:\n1. edit predict"
            )
        k = next(self.k)
        return (
            "zz_model.py\n<<<<<<< SEARCH\n    return x * 1.0\n=======\n"
            "    from lib.signal.smoothing import exponential_moving_average\n\n"
            f"    return x * {k}.0 + 0 * len(exponential_moving_average(x))\n>>>>>>> REPLACE\n"
        )


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setenv("REVTREE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("REVTREE_DB", raising=False)
    s = Store(f"sqlite:///{tmp_path / 'revtree.db'}")
    yield s
    s.close()


@pytest.mark.slow  # a whole run on a large repository, 5.5 s (issue 24)
def test_the_editable_file_is_in_every_prompt_of_a_real_run_on_a_large_repository(
    tmp_path: Path, store: Store
) -> None:
    task = write_task(tmp_path / "t")
    spec = load_task(task)
    baseline = {p.relative_to(task).as_posix(): p.read_bytes() for p in task.rglob("*.py")}
    assert len(baseline) == 300 and sum(map(len, baseline.values())) > 1_000_000
    # the old alphabetical cut never reached the editable file's content
    assert "def predict(x):" not in old_prefix(spec, baseline, spec.agents.context_tokens)
    with FakeLLMServer(Modeller()) as srv:
        spec = spec.with_overrides(agents={"base_url": srv.openai_url})
        run = create_run(store, spec, tmp_path / "home")
        Orchestrator(store, run.id, home=tmp_path / "home").drive()
    prompts = [r.system + "\n" + r.user for r in srv.requests]
    assert len(prompts) >= 6
    assert all("--- zz_model.py ---\n" in p and "def predict(x):" in p for p in prompts)
    assert all(SECRET not in p and "--- evaluate.py" not in p for p in prompts)
    assert all(estimate_tokens(p) < spec.agents.context_tokens for p in prompts)
    # the coder saw the helper it used (found by search), and later candidates were told
    assert any("--- lib/signal/smoothing.py ---" in p for p in prompts)
    events = [e for e in store.events_since(run.id) if e.kind == "context"]
    assert any("repository map" in e.message and "left out" in e.message for e in events)
    learnt = [e for e in events if e.data and "learnt" in e.data]
    assert learnt and learnt[0].data["learnt"]["path"] == "lib/signal/smoothing.py"
    assert "exponential_moving_average" in learnt[0].data["learnt"]["symbols"]
    assert any("Where things are" in p and "used by node" in p for p in prompts)
    nodes = store.nodes(run.id) if hasattr(store, "nodes") else []
    assert all(n.error is None or "context" not in n.error for n in nodes)


def test_a_huge_editable_file_shows_its_evolve_blocks_and_an_outline() -> None:
    body = "\n\n".join(f"def helper_{i}(x):\n    return x + {i}\n" for i in range(3000))
    text = f"{body}\n\n# EVOLVE-BLOCK-START\ndef solve(x):\n    return x\n# EVOLVE-BLOCK-END\n"
    spec = spec_for()
    files = {**as_bytes({"zz_model.py": text}), "evaluate.py": b"DATA = 1\n"}
    builder = ContextBuilder(spec, files, 4000)
    assert "def solve(x):" in builder.prefix and "EVOLVE-BLOCK-START" in builder.prefix
    assert "# [... lines 1-" in builder.prefix and "helper_" in builder.prefix
    assert builder.prefix_tokens < 4000
    assert any("excerpted" in n and "EVOLVE-BLOCK" in n for n in builder.notes)
    assert evolve_regions(text) == [(len(text.splitlines()) - 3, len(text.splitlines()))]


def test_protected_files_are_never_shown_not_even_in_the_map() -> None:
    files = as_bytes(synthetic_repo())
    builder = ContextBuilder(spec_for(), files, 24000, index=Index(files))
    rel = builder.related(files, "evaluate secret data DATA", 20000)
    assert "\nevaluate.py:" not in builder.prefix and "--- evaluate.py" not in builder.prefix
    assert "evaluate.py" not in rel.shown
    assert SECRET not in builder.prefix + rel.text


def test_a_small_repository_is_shown_whole_editable_first() -> None:
    files = {"a.py": b"def a():\n    return 1\n", "zz_model.py": b"X = 1\n", "evaluate.py": b"1"}
    prefix = ContextBuilder(spec_for(), files, 24000).prefix
    assert prefix.index("--- zz_model.py ---") < prefix.index("--- a.py ---")
    assert "evaluate.py ---" not in prefix


def test_outline_by_ast_and_by_regex_and_the_map_ranks_used_files_first() -> None:
    py = "import os\nLIMIT = 3\n\nclass Box:\n    def area(self):\n        pass\n\n"
    py += "def f():\n    pass\n"
    assert [(s.name, s.kind) for s in outline("m.py", py)] == [
        ("LIMIT", "const"),
        ("Box", "class"),
        ("f", "def"),
    ]
    js = "export function draw(ctx) {\n}\nclass Scene {\n}\nconst SPEED = 3;\n"
    assert [s.name for s in outline("a.js", js)] == ["draw", "Scene", "SPEED"]
    rs = "pub fn step(x: f64) -> f64 {\n    x\n}\nstruct State {}\n"
    assert [s.name for s in outline("a.rs", rs)] == ["step", "State"]
    files = {"lonely.py": "def unused():\n    pass\n", "core.py": "def used():\n    pass\n"}
    text, cut = repo_map(files, 1000, first=["from core import used"])
    assert text.splitlines()[0].startswith("core.py: def used") and cut == 0
    assert repo_map(files, 8)[1] == 1


def test_excerpt_keeps_the_blocks_that_match_the_query() -> None:
    text = "\n\n".join(f"def f{i}(x):\n    return x * {i}\n" for i in range(200))
    text += "\n\ndef kalman_gain(p, r):\n    return p / (p + r)\n"
    cut = excerpt("k.py", text, 60, "the kalman gain")
    assert "def kalman_gain" in cut and estimate_tokens(cut) < estimate_tokens(text) // 5


def test_memory_recalls_where_things_are_for_related_queries() -> None:
    files = as_bytes(synthetic_repo(60))
    notes: list[tuple[str, int | None, object]] = []
    repo = RepoContext(spec_for(), files, record=lambda m, n, d: notes.append((m, n, d)))
    rel = repo.related(1, files, "convex hull of the points", 20000)
    assert "lib/geometry/hull.py" in rel.shown
    change = {"zz_model.py": files["zz_model.py"] + b"from lib.geometry.hull import convex_hull\n"}
    learnt = repo.learn(1, "keep the convex hull points", files, change)
    assert [m.path for m in learnt] == ["lib/geometry/hull.py"]
    assert "convex_hull" in learnt[0].symbols and any(n == 1 for _, n, _ in notes)
    assert "lib/geometry/hull.py" in repo.memory("only the hull points of the cloud")
    assert repo.memory("learning rate decay") == ""
