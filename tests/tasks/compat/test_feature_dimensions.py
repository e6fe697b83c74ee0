"""OpenEvolve's MAP-Elites over the evaluator's own metrics, through the real CLI.

An OpenEvolve folder whose config.yaml bins on ``["score", "complexity", "my_metric"]``
(a metric only its evaluator returns) with bins per dimension runs to its end offline
and through the real openai SDK against the fake server on 127.0.0.1, and ``revtree
show RUN --json`` lists, per island, the cells it filled: keys of three dimensions
within each dimension's bins, elites that are the island's programs, and the metric's
dimension spread over more than one bin (its bounds learnt from what was seen).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer, FakeRequest, current_file
from revtree.memory import Store
from tests.orchestrator.conftest import revtree, revtree_here

from .conftest import write_folder

PROGRAM = """\
# EVOLVE-BLOCK-START
A = 1.5
B = 0.25
C = 3
# EVOLVE-BLOCK-END


def value():
    return A * C + B
"""
EVALUATOR = """\
import importlib.util


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("p", program_path)
    p = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(p)
    return {"combined_score": -abs(p.value() - 7.0), "my_metric": p.A - p.B}
"""
CONFIG = """\
random_seed: 7
database:
  num_islands: 2
  migration_interval: 3
  feature_dimensions: ["score", "complexity", "my_metric"]
  feature_bins: {score: 4, complexity: 3, my_metric: 5}
evaluator:
  cascade_evaluation: false
"""
BINS = (4, 3, 5)
OFFLINE = {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "", "REVTREE_SANDBOX": "local"}


def folder(tmp_path: Path) -> Path:
    files = {"initial_program.py": PROGRAM, "evaluator.py": EVALUATOR, "config.yaml": CONFIG}
    return write_folder(tmp_path / "oe", files)


def run_id(output: str) -> str:
    found = re.search(r"^run (\S+) · task", output, re.M)
    assert found, output
    return found.group(1)


def check_cells(home: Path, run: str, n_nodes: int) -> list[dict[str, object]]:
    """The islands of ``show --json``, checked against the run's nodes."""
    summary = json.loads(revtree_here(home, "show", run, "--json").stdout)
    assert summary["status"] == "completed" and summary["n_nodes"] == n_nodes
    assert summary["n_succeeded"] == n_nodes, summary
    islands = summary["islands"]
    assert [i["island"] for i in islands] == [0, 1]
    programs = set(range(1, n_nodes))
    for island in islands:
        cells = island["cells"]
        assert island["cells_filled"] == len(cells) >= 1, island
        assert island["best"] in {c["node"] for c in cells}
        for cell in cells:
            assert cell["node"] in programs
            assert len(cell["key"]) == 3
            assert all(0 <= k < b for k, b in zip(cell["key"], BINS, strict=True)), cell
    keys = [c["key"] for i in islands for c in i["cells"]]
    assert len({k[2] for k in keys}) > 1, keys  # my_metric spreads over its bins
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    try:
        for n in store.nodes(run):
            assert n.features is not None, n.id
            assert n.features["code_size"] > 50 and "metric:my_metric" in n.features
            assert n.features["metric:combined_score"] == pytest.approx(n.score)
    finally:
        store.close()
    return islands


@pytest.mark.slow
def test_feature_dimensions_run_offline_and_show_the_cells_per_island(tmp_path: Path) -> None:
    home = tmp_path / "home"
    out = revtree(home, "run", str(folder(tmp_path)), "--budget-nodes", "9", **OFFLINE)
    text = " ".join((out.stdout + out.stderr).split())  # the console wraps long lines
    assert "score as score, complexity as code_size, my_metric as metric:my_metric" in text
    assert "without a revtree counterpart" not in text  # per-dimension bins are read
    check_cells(home, run_id(text), 9)


class BlockWriter:
    """Answers each coder call with a SEARCH/REPLACE of the EVOLVE-BLOCK's numbers, and
    the reviewer with an acceptance."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, req: FakeRequest) -> str:
        if "review a change" in req.system:
            return "VERDICT: accept\nREASONS: two constants of the block, in scope"
        if "Editable files:" not in req.user:
            return "ok"  # the start-up check of the model
        self.calls += 1
        text = current_file(req, "initial_program.py") or PROGRAM
        a = next(ln for ln in text.splitlines() if ln.startswith("A = "))
        b = next(ln for ln in text.splitlines() if ln.startswith("B = "))
        n = self.calls
        new = f"A = {1.5 + 0.2 * n}\nB = {0.25 + 0.1 * (n % 3)}"
        return (
            f"HYPOTHESIS: retune A and B ({n})\n\n"
            f"<<<<<<< SEARCH\n{a}\n{b}\n=======\n{new}\n>>>>>>> REPLACE\n"
        )


@pytest.mark.slow
def test_feature_dimensions_run_through_the_fake_server(tmp_path: Path) -> None:
    home = tmp_path / "home"
    model = BlockWriter()
    with FakeLLMServer(model) as srv:
        out = revtree(
            home,
            "run",
            str(folder(tmp_path)),
            "--budget-nodes",
            "7",
            "--model",
            "openai-compatible:fake",
            "--base-url",
            srv.openai_url,
            **{**OFFLINE, "OPENAI_API_KEY": "sk-fake"},
        )
    assert model.calls == 6, out.stdout  # one coder call per candidate
    check_cells(home, run_id(out.stdout + out.stderr), 7)
