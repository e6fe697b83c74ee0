"""Diffs that quote EVOLVE-BLOCK markers as context land at once in a real run.

An OpenEvolve folder, the real openai SDK against the fake server on 127.0.0.1, real
git, SQL and sandbox: the coder answers each candidate with a unified diff written the
way models write them (``a/``/``b/`` headers, hunk counts that need not add up, a marker
as the line above or below the change), in one call (OpenEvolve's one-call mode). Every
diff must land on the first try: one model call per candidate, no repair round.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from revtree.agents.llm.fake_server import FakeLLMServer, FakeRequest, current_file
from revtree.memory import GitStore, NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, RunPaths, create_run
from tests.orchestrator.test_llm_run import openevolve_spec

PROGRAM = (
    "# Find A and B with A + B = 3\n# EVOLVE-BLOCK-START\nA = 2.25\nB = -0.75\n"
    "# EVOLVE-BLOCK-END\n\n\ndef value():\n    return A + B\n"
)
EVALUATOR = (
    "import importlib.util\n\n\ndef evaluate(program_path):\n"
    "    spec = importlib.util.spec_from_file_location('p', program_path)\n"
    "    p = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(p)\n"
    "    return {'combined_score': -((p.value() - 3.0) ** 2)}\n"
)
HEAD = "--- a/initial_program.py\n+++ b/initial_program.py\n"


def hunk(kind: str, a: str, b: str, new_a: str, new_b: str) -> str:
    """One hunk replacing the lines ``a`` and ``b`` (as the prompt showed them)."""
    swap = f"-{a}\n-{b}\n+{new_a}\n+{new_b}\n"
    return {
        "first": f"@@ -2,3 +2,3 @@\n # EVOLVE-BLOCK-START\n{swap}",
        "last": f"@@ -3,3 +3,3 @@\n{swap} # EVOLVE-BLOCK-END\n",
        "both": f"@@ -2,4 +2,4 @@\n # EVOLVE-BLOCK-START\n{swap} # EVOLVE-BLOCK-END\n",
        "wide": "@@ -1,5 +1,5 @@\n # Find A and B with A + B = 3\n # EVOLVE-BLOCK-START\n"
        f"{swap} # EVOLVE-BLOCK-END\n \n \n def value():\n",
    }[kind]


class DiffWriter:
    """Answers every coder call with a diff of the next kind, from the file it was shown."""

    KINDS = ("first", "last", "both", "wide")

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.repairs = 0

    def __call__(self, req: FakeRequest) -> str:
        if "could not be applied" in req.user:
            self.repairs += 1
        text = (current_file(req, "initial_program.py") or "").replace("\r\n", "\n")
        a = next(ln for ln in text.splitlines() if ln.startswith("A = "))
        b = next(ln for ln in text.splitlines() if ln.startswith("B = "))
        kind = self.KINDS[len(self.kinds) % len(self.KINDS)]
        self.kinds.append(kind)
        n = len(self.kinds)
        new_a, new_b = f"A = {2.25 + 0.25 * n}", f"B = {0.74 - 0.24 * n}"
        diff = HEAD + hunk(kind, a, b, new_a, new_b)
        return f"HYPOTHESIS: retune A and B ({kind})\n\n```diff\n{diff}```\n"


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.slow  # 6 s of --quick under -n 2 (issue 24)
def test_diffs_quoting_markers_land_on_the_first_try_through_the_openai_sdk(
    tmp_path: Path, home: Path, store: Store, newline: str
) -> None:
    folder = tmp_path / "oe"
    folder.mkdir()
    (folder / "initial_program.py").write_bytes(PROGRAM.replace("\n", newline).encode())
    (folder / "evaluator.py").write_text(EVALUATOR)
    model = DiffWriter()
    with FakeLLMServer(model) as srv:
        spec = openevolve_spec(folder, srv.openai_url, 9, proposer={"enabled": False})
        run = create_run(store, spec, home)
        Orchestrator(store, run.id, home=home).drive()
        n_requests = len(srv.requests)
    candidates = [n for n in store.nodes(run.id) if n.parent_id is not None]
    assert len(candidates) == 8 and set(model.kinds) == set(DiffWriter.KINDS)
    assert all(n.status is NodeStatus.SUCCEEDED for n in candidates), [
        (n.status, n.error) for n in candidates
    ]
    per_candidate = n_requests / len(candidates)
    print(f"marker diffs ({newline!r}): {per_candidate:.2f} coder calls per candidate")
    assert per_candidate == 1.00 and model.repairs == 0
    assert {c.role for c in store.llm_calls(run.id)} == {"coder"}
    assert store.get_run(run.id).status is RunStatus.COMPLETED
    git = GitStore(RunPaths(home, run.id).repo)
    last = git.read_files(candidates[-1].commit or "")["initial_program.py"].decode()
    n = len(candidates)
    want = PROGRAM.replace("A = 2.25\nB = -0.75", f"A = {2.25 + 0.25 * n}\nB = {0.74 - 0.24 * n}")
    assert last == want.replace("\n", newline)  # the markers and the endings as they were
