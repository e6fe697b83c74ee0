"""A real run on an OpenEvolve-format folder whose evaluator imports numpy at its top,
as OpenEvolve's own examples do: the local sandbox's fork server loads numpy once
(``sandboxes/zygote_preload.py``), for every evaluation after the first, though each
evaluation carries variables of its own (``REVTREE_NODE``, ``REVTREE_SEED``, ...), and
compiles the evaluator's files once (``sandboxes/zygote_compile.py``: the run names
them with the digests of the bytes it overlays)."""

from __future__ import annotations

from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer
from revtree.memory import NodeStatus, Store
from revtree.orchestrator import Orchestrator, create_run
from tests.orchestrator.test_llm_run import (
    OneCallModel,
    make_openevolve_folder,
    openevolve_spec,
)

pytest.importorskip("numpy")

EVALUATOR = """\
import importlib.machinery
import importlib.util
import sys

AHEAD = "numpy" in sys.modules  # loaded before this file asked for it
# whether the fork server had compiled this very file's bytes for this fork's import
_load = importlib.machinery.SourceFileLoader.source_to_code
with open(__file__, "rb") as _f:
    COMPILED = _f.read() in getattr(_load, "__globals__", {}).get("_SOURCES", {})
import numpy as np


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("p", program_path)
    p = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(p)
    return {"combined_score": float(-np.square(p.value() - 3.0)), "ahead": AHEAD,
            "compiled": COMPILED}
"""


def test_an_openevolve_evaluators_numpy_is_loaded_once_for_the_whole_run(
    tmp_path: Path, home: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REVTREE_FORK_SERVER", "1")
    folder = make_openevolve_folder(tmp_path / "oe")
    (folder / "evaluator.py").write_text(EVALUATOR)
    with FakeLLMServer(OneCallModel()) as srv:
        run = create_run(store, openevolve_spec(folder, srv.openai_url, 5), home)
        orch = Orchestrator(store, run.id, home=home)
        try:
            orch.drive()
        finally:
            orch.close()
    nodes = store.nodes(run.id)
    assert len(nodes) == 5 and all(n.status is NodeStatus.SUCCEEDED for n in nodes), [
        (n.status, n.error) for n in nodes
    ]
    evals = sorted(store.evaluations(run.id), key=lambda e: (e.node_id, e.repeat))
    ahead = {(e.node_id, e.repeat): e.metrics.get("ahead") for e in evals}
    assert ahead[(0, 0)] is False, ahead  # the first evaluation loads it itself
    later = [v for k, v in ahead.items() if k != (0, 0)]
    assert len(later) >= 4 and all(v is True for v in later), ahead
    compiled = {(e.node_id, e.repeat): e.metrics.get("compiled") for e in evals}
    assert compiled[(0, 0)] is False, compiled  # its fork was made before any request
    assert all(v is True for k, v in compiled.items() if k != (0, 0)), compiled
