"""Score forgery, tried as a hostile candidate: with a grade step, nothing a candidate
does gets a forged score recorded, and an honest candidate gets its true score.

Each test drives the real CLI (``revtree run`` then ``revtree holdout`` and ``revtree
show --json``) in a subprocess, with ``REVTREE_HOME`` in ``tmp_path``, on the local
backend always and on Docker where an engine answers and the evaluation image exists.
The candidate is the root itself (``max_nodes = 1``): its code is what the task holds.

The true score is what the trusted grader measures: the number of distinct cities in
the answer's tour (at most 7). 999 can only come from a forged channel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.orchestrator.conftest import revtree_here

FORGED = 999.0
TRUE = 7.0

TASK = """\
name = "forge"
goal = "answer a tour of all 7 cities"
editable = ["solver.py"]
protected = ["run.py", "grade.py"]

[evaluate]
command = "python run.py"
outputs = ["answer.json", "*.py"]  # *.py: extra files reach the grader (under outputs/)
metric = "score"
direction = "maximize"
timeout = "30s"

[evaluate.grade]
command = "python grade.py"

[holdout]
command = "python run.py"

[holdout.grade]
command = "python grade.py"

[search]
parallel = 1

[budget]
max_nodes = 1
"""

RUN = """\
import json, os
import solver

tour = solver.answer()
with open("answer.json", "w") as f:
    json.dump({"tour": tour}, f)
print("run step: wrote", len(tour), "cities")
"""

GRADE = """\
import json, os
from pathlib import Path

answer = json.loads(Path(os.environ["REVTREE_OUTPUTS"], "answer.json").read_text())
tour = answer["tour"]
assert isinstance(tour, list) and all(type(c) is int and 0 <= c < 7 for c in tour), tour
assert len(set(tour)) == len(tour), "a city visited twice"
os.write(3, json.dumps({"score": len(tour)}).encode())
"""

HONEST = """\
def answer():
    return list(range(7))
"""

FAKE = "{'score': 999}"
FORGERIES = {
    "atexit-fake-last-line": f"""\
        import atexit, json
        atexit.register(lambda: print(json.dumps({FAKE}), flush=True))

        def answer():
            return []
        """,
    "metrics-channels": f"""\
        import json, os
        fake = json.dumps({FAKE})
        try:
            os.write(3, fake.encode())  # the sandbox's metrics descriptor
        except OSError:
            pass
        names = ["REVTREE_METRICS", "REVTREE_OUTPUTS", "METRICS", "OUTPUT"]
        paths = [os.environ[n] for n in names if n in os.environ]
        paths += [".revtree_metrics.json", "metrics.json", "outputs/metrics.json", "score.json"]
        for path in paths:
            try:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                with open(path, "w") as f:
                    f.write(fake)
            except OSError:
                pass

        def answer():
            return []
        """,
    "rewrite-the-grader": f"""\
        import json
        from pathlib import Path
        forged = "import json, os\\nos.write(3, json.dumps({FAKE}).encode())\\n"
        Path("grade.py").write_text(forged)
        Path("run.py").write_text(forged)

        def answer():
            return []
        """,
    "early-exit-after-fake-line": f"""\
        import json, os, sys
        print(json.dumps({FAKE}), flush=True)
        try:
            os.write(3, json.dumps({FAKE}).encode())
        except OSError:
            pass
        os._exit(0)
        """,
    "symlinked-output": """\
        import atexit, os

        def swap():
            os.remove("answer.json")
            os.symlink("/etc/passwd", "answer.json")

        atexit.register(swap)

        def answer():
            return []
        """,
    "shadow-a-module-the-grader-imports": """\
        from pathlib import Path
        forged = "import os\\nos.write(3, b'{\\"score\\": 999}')\\nos._exit(0)\\n"
        for name in ("json.py", "sitecustomize.py", "os.py", "pathlib.py"):
            Path(name).write_text(forged)

        def answer():
            return []
        """,
}
# what the run records for each forgery: (error kind of the evaluation, or None with
# the true score 0)
EXPECTED: dict[str, str | None] = {
    "atexit-fake-last-line": None,
    "metrics-channels": None,
    "rewrite-the-grader": None,
    "early-exit-after-fake-line": "outputs",
    "symlinked-output": "outputs",
    "shadow-a-module-the-grader-imports": None,
}

BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The sandbox backend, or a skip saying why Docker cannot run here."""
    if request.param == "docker":
        try:
            from revtree.sandboxes.docker import engine_answers
            from revtree.sandboxes.images import default_image, image_exists
        except ImportError as e:  # pragma: no cover
            pytest.skip(f"docker SDK missing: {e}")
        client = engine_answers()
        if client is None:
            pytest.skip("no Docker engine answers")
        try:
            image = default_image(client)
            if not image_exists(client, image):
                pytest.skip(f"image {image} missing (scripts/bootstrap-base-image.sh makes one)")
        finally:
            client.close()
    return str(request.param)


SINGLE = """\
name = "forge"
editable = ["solver.py"]
protected = ["run.py", "grade.py"]

[evaluate]
command = "python run.py"
metric = "score"
direction = "maximize"
timeout = "30s"

[holdout]
command = "python run.py"

[budget]
max_nodes = 1
"""


def write_task(root: Path, solver: str, toml: str = TASK) -> Path:
    root.mkdir(parents=True)
    (root / "task.toml").write_text(toml)
    (root / "run.py").write_text(RUN)
    (root / "grade.py").write_text(GRADE)
    (root / "solver.py").write_text(textwrap.dedent(solver))
    return root


def revtree(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REVTREE_DB", "REVTREE_SANDBOX")}
    env.update(REVTREE_HOME=str(home), PYTHONUNBUFFERED="1", COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "revtree", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def run_and_show(home: Path, task: Path, backend: str) -> dict[str, Any]:
    """Run the task's baseline, and its holdout unless the run did (a failed baseline is
    no best to hold out), and return node 0 with its evaluations."""
    ran = revtree(home, "run", str(task), "--sandbox", backend)
    assert "Traceback" not in ran.stderr, ran.stderr
    if " holdout of node 0:" not in ran.stdout:  # the live log
        held = revtree(home, "holdout", "last", "--node", "0")
        assert "Traceback" not in held.stderr, held.stderr
    return show(home)


def show(home: Path) -> dict[str, Any]:
    shown = revtree_here(home, "show", "last", "--node", "0", "--json", check=False)
    assert shown.returncode == 0, shown.stderr
    node: dict[str, Any] = json.loads(shown.stdout)
    return node


def scores(node: dict[str, Any]) -> list[float | None]:
    return [node["score"], *(e["score"] for e in node["evaluations"])]


@pytest.mark.slow  # a whole run in a subprocess per backend, 5-8 s (issue 24)
def test_an_honest_candidate_gets_its_true_score(tmp_path: Path, backend: str) -> None:
    node = run_and_show(tmp_path / "home", write_task(tmp_path / "task", HONEST), backend)
    assert node["status"] == "succeeded" and node["score"] == TRUE
    by_stage = {e["stage"]: e for e in node["evaluations"]}
    assert {"full", "holdout"} <= set(by_stage)  # and the guard holdout, where it ran
    assert all(e["ok"] and e["score"] == TRUE for e in by_stage.values())
    assert "[grade step: python grade.py]" in by_stage["full"]["stdout_tail"]


@pytest.mark.slow  # a whole run per forgery and backend: 20 runs, 124 s serial
@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_forged_score_is_never_recorded(tmp_path: Path, backend: str, forgery: str) -> None:
    task = write_task(tmp_path / "task", FORGERIES[forgery])
    node = run_and_show(tmp_path / "home", task, backend)
    assert FORGED not in scores(node), node
    evals = node["evaluations"]
    assert {"full", "holdout"} <= {e["stage"] for e in evals}  # holdouts not forged either
    kind = EXPECTED[forgery]
    for e in evals:
        if kind is None:  # graded for what it is: no city at all
            assert e["ok"] and e["score"] == 0.0, e
        else:
            assert not e["ok"] and e["error_kind"] == kind and e["score"] is None, e
    if forgery == "symlinked-output":
        assert "answer.json" in evals[0]["error"] and "refused" in evals[0]["error"]
    if forgery == "early-exit-after-fake-line":
        assert "answer.json" in evals[0]["error"]


@pytest.mark.slow  # a whole run, 14 s
def test_single_step_never_reads_stdout_without_opt_in(tmp_path: Path) -> None:
    """No grade step: the fake last line is not read; the error says how to report."""
    task = write_task(tmp_path / "task", FORGERIES["atexit-fake-last-line"], SINGLE)
    node = run_and_show(tmp_path / "home", task, "local")
    assert FORGED not in scores(node)
    for e in node["evaluations"]:
        assert not e["ok"] and e["error_kind"] == "metrics" and e["score"] is None
        assert "nothing was written to file descriptor 3" in e["error"]
        assert "os.write(3, json.dumps(metrics).encode())" in e["error"]
        assert "stdout_metrics = true" in e["error"]
