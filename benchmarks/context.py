"""Prompt context on a synthetic 300-file repository (more than 1 MB, the editable
``zz_model.py`` sorting last): prompt tokens per candidate, whole-repository prompting
(the alphabetical cut of revtree before prioritised context) against prioritised
context and against a tool-using coder (search_code, read_file, then the edit: four
metered steps, each carrying the prefix and the steps so far), in real runs through
the openai SDK and the fake server; and retrieval recall over 24 scripted goals, each
naming what one helper module does.

    python benchmarks/context.py [--nodes 6]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from revtree.agents.context import ContextBuilder, Related
from revtree.agents.llm.base import estimate_tokens
from revtree.agents.llm.fake_embeddings import EmbeddingsFakeLLMServer
from revtree.agents.llm.fake_server import (
    FakeLLMServer,
    FakeReply,
    FakeRequest,
    tool_results,
)
from revtree.agents.outline import symbols_text
from revtree.agents.retrieval import Index, OpenAIEmbedder
from revtree.agents.roles import render_files
from revtree.memory import Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task
from revtree.tasks.spec import TaskSpec
from tests.agents.test_context import Modeller, write_task
from tests.agents.test_retrieval import HELPERS, MODEL, as_bytes, spec_for, synthetic_repo


class WholeRepository:
    """The context of revtree before this work: every file in the prefix, sorted by
    path, cut at the budget; nothing retrieved, nothing remembered."""

    def __init__(self, spec: TaskSpec, baseline: Mapping[str, bytes], **_: object) -> None:
        head = [
            f"# Task: {spec.name}",
            spec.goal or "(no goal text given)",
            f"Score: {spec.evaluate.metric}, to {spec.evaluate.direction}.",
            f"Editable files (globs): {', '.join(spec.editable)}",
            f"Evaluator and its data (protected, never change): {', '.join(spec.protected)}",
            "",
            "# Baseline code",
        ]
        budget = spec.agents.context_tokens
        self.prefix = "\n".join(head) + "\n" + render_files(baseline, budget)
        self.builder = mock.Mock(prefix_tokens=budget)  # leaves no room to retrieve

    def related(self, *_: object) -> Related:
        return Related("", [])

    def memory(self, _: str) -> str:
        return ""

    def learn(self, *_: object) -> list[object]:
        return []


class ToolModeller:
    """The ``Modeller``'s change made by a tool-using coder: search_code for the helper,
    read_file it, then write zz_model.py using it, and done."""

    def __init__(self) -> None:
        self.k = 1

    def __call__(self, req: FakeRequest) -> FakeReply:
        if "propose" in req.tools:
            hyp = "smooth the predictions with the exponential moving average and scale them"
            return FakeReply(tool_calls=[("propose", {"hypothesis": hyp, "plan": "1. edit"})])
        seen = tool_results(req)
        if not seen:
            query = {"query": "exponential moving average", "mode": "keyword"}
            return FakeReply(tool_calls=[("search_code", query)])
        path = next(ln for ln in seen[0][2].splitlines() if ln.startswith("1. ")).split()[1]
        if len(seen) == 1:
            return FakeReply(tool_calls=[("read_file", {"path": path, "start": 1, "end": 10})])
        self.k += 1
        new = MODEL.replace(
            "    return x * 1.0",
            "    from lib.signal.smoothing import exponential_moving_average\n\n"
            f"    return x * {self.k}.0 + 0 * len(exponential_moving_average(x))",
        )
        write = {"path": "zz_model.py", "content": new}
        return FakeReply(tool_calls=[("write_file", write), ("done", {"summary": "scaled"})])


def run(nodes: int, old: bool, tools: bool = False) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        task = write_task(root / "t", nodes=nodes)
        store = Store(f"sqlite:///{root / 'revtree.db'}")
        patch = mock.patch("revtree.orchestrator.contexts.RepoContext", WholeRepository)
        model = ToolModeller() if tools else Modeller()
        with FakeLLMServer(model) as srv, patch if old else mock.MagicMock():
            agents = {"base_url": srv.openai_url}
            if tools:  # an openai: model: structured replies, so tools by default
                agents["model"] = "openai:gpt-fake"
            spec = load_task(task).with_overrides(agents=agents)
            run = create_run(store, spec, root / "home")
            t0 = time.monotonic()
            Orchestrator(store, run.id, home=root / "home").drive()
            wall = time.monotonic() - t0
        metered = store.llm_calls(run.id)
        store.close()
    prompts = [r.system + "\n" + r.user for r in srv.requests]
    proposer = sum("research lead" in r.system for r in srv.requests)
    coder = proposer if tools else len(prompts) - proposer  # candidates
    tokens = sum(estimate_tokens(p) for p in prompts)
    seen = sum("def predict(x):" in p for p in prompts)
    return {
        "calls": len(prompts),
        "candidates": coder,
        "tokens": tokens / max(coder, 1),
        "editable": seen / max(len(prompts), 1),
        "uncached": sum(c.input_tokens - c.cached_tokens for c in metered) / max(coder, 1),
        "wall": wall,
    }


def recall(semantic: bool) -> tuple[int, int, float]:
    files = as_bytes(synthetic_repo())
    budget = spec_for().agents.context_tokens
    with EmbeddingsFakeLLMServer(lambda req: "unused") as srv:
        embedder = OpenAIEmbedder("fake-embed", srv.openai_url, None) if semantic else None
        t0 = time.monotonic()
        index = Index(files, embedder, symbols_text)
        build = time.monotonic() - t0
        builder = ContextBuilder(spec_for(), files, budget, index=index)
        left = budget - builder.prefix_tokens
        hits = sum(p in builder.related(files, goal, left).shown for p, _, _, goal in HELPERS)
    return hits, len(HELPERS), build


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=6)
    nodes = ap.parse_args().nodes
    files = synthetic_repo()
    size = sum(len(t.encode()) for t in files.values())
    print(f"repository: {len(files)} files, {size / 1e6:.2f} MB; context_tokens = 24000")
    head = f"{'context':<26} {'calls':>6} {'tokens/candidate':>17} {'uncached':>9}"
    print(f"{head} {'editable shown':>15}")
    rows = {
        "whole repository (old)": run(nodes, True),
        "prioritised (new)": run(nodes, False),
        "tool-using coder": run(nodes, False, tools=True),
    }
    for name, r in rows.items():
        row = f"{name:<26} {r['calls']:>6.0f} {r['tokens']:>17,.0f} {r['uncached']:>9,.0f}"
        print(f"{row} {r['editable']:>15.0%}")
    ratio = rows["prioritised (new)"]["tokens"] / rows["whole repository (old)"]["tokens"]
    tools = rows["tool-using coder"]["tokens"] / rows["whole repository (old)"]["tokens"]
    print(f"prioritised / whole: {ratio:.2f}; tool-using / whole: {tools:.2f}")
    print(f"\n{'retrieval':<26} {'recall':>10} {'index build':>12}")
    for name, semantic in (("keyword (BM25)", False), ("keyword + semantic", True)):
        hits, n, build = recall(semantic)
        print(f"{name:<26} {f'{hits}/{n}':>10} {build:>11.2f}s")


if __name__ == "__main__":
    main()
