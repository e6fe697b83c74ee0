"""Issue 23, items 1 and 2, through the real CLI (``revtree run`` in a subprocess).

(a) The labels attack: a candidate reads whichever data file its workspace holds and
picks the half of the holdout by any environment variable ending in ``_STAGE``. In the
old layout (the grader's labels among the protected and holdout files, the stage told
to the run step) it scores perfectly on dev, guard and final holdout, and ``check``
now warns of it; laid out with ``[evaluate.grade] files``, ``[holdout.grade] files``
and a prepare step, the run step sees neither labels nor stage and the attack scores
as the honest code does.

(b) The hash attack: a table of the dev points' answers keyed by sha256(repr(x)), the
honest formula elsewhere: a ``dev-only`` alarm with the guard on; with the guard off it
is recommended, and the summary says its final holdout is no better than the
baseline's and never calls it better.

The candidate is a knob (``MODE``) the offline proposer sets, so no model is needed.
Each test runs on the local backend and on Docker (marker ``docker``).
"""

from __future__ import annotations

import hashlib
import json
import math
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.orchestrator.conftest import revtree

pytestmark = pytest.mark.slow
BACKENDS = pytest.mark.parametrize(
    "backend", ["local", pytest.param("docker", marks=pytest.mark.docker)]
)


def truth(x: float) -> float:
    return 2.0 * x + 1.0 + 0.5 * math.sin(3.0 * x)


DEV = [round(-2.0 + 0.2 * i, 2) for i in range(20)]
GUARD = [round(-1.95 + 0.4 * i, 2) for i in range(10)]  # none of them a dev point
FINAL = [round(-1.85 + 0.4 * i, 2) for i in range(10)]

MODEL = """\
import hashlib, json, os

MODE = "honest"
TABLE = {table}


def _read_labels(x):
    # the labels attack: any JSON file with xs and ys; the half by any *_STAGE variable
    stage = next((v for k, v in sorted(os.environ.items()) if k.endswith("_STAGE")), "")
    for name in sorted(os.listdir(".")):
        if not name.endswith(".json"):
            continue
        try:
            data = json.load(open(name))
        except Exception:
            continue
        if isinstance(data, dict) and stage in data:
            data = data[stage]
        if isinstance(data, dict) and "xs" in data and "ys" in data:
            for xi, yi in zip(data["xs"], data["ys"]):
                if repr(xi) == repr(x):
                    return yi
    return None


def predict(x):
    if MODE == "labels":
        y = _read_labels(x)
        if y is not None:
            return y
    if MODE == "hash":
        y = TABLE.get(hashlib.sha256(repr(x).encode()).hexdigest())
        if y is not None:
            return y
    return 2.0 * x + 1.0
"""

RUN = """\
import json, os, sys
sys.path.insert(0, os.getcwd())
import model
if "--holdout" in sys.argv:  # the old layout: the half named by the stage
    xs = json.load(open("holdout.json"))[os.environ["REVTREE_STAGE"]]["xs"]
else:
    xs = json.load(open("inputs.json"))["xs"]
json.dump({"pred": [model.predict(x) for x in xs]}, open("answers.json", "w"))
"""

GRADE = """\
import json, os
stage = os.environ["REVTREE_STAGE"]
data = json.load(open("holdout.json"))[stage] if stage in ("guard", "holdout") else json.load(
    open("labels.json"))
pred = json.load(open(os.path.join(os.environ["REVTREE_OUTPUTS"], "answers.json")))["pred"]
assert len(pred) == len(data["ys"]), "wrong number of answers"
mse = sum((float(p) - y) ** 2 for p, y in zip(pred, data["ys"])) / len(pred)
os.write(3, json.dumps({"mse": mse}).encode())
"""

PREPARE = """\
import json, os
half = json.load(open("holdout.json"))[os.environ["REVTREE_STAGE"]]
json.dump({"xs": half["xs"]}, open("inputs.json", "w"))
"""


def task(root: Path, attack: str, layout: str, guard: bool = True) -> Path:
    root.mkdir(parents=True)
    table = {hashlib.sha256(repr(x).encode()).hexdigest(): truth(x) for x in DEV}
    (root / "model.py").write_text(MODEL.format(table=table))
    (root / "run.py").write_text(RUN)
    (root / "grade.py").write_text(GRADE)
    (root / "prepare.py").write_text(PREPARE)
    (root / "inputs.json").write_text(json.dumps({"xs": DEV}))
    (root / "labels.json").write_text(json.dumps({"xs": DEV, "ys": [truth(x) for x in DEV]}))
    halves = {"guard": GUARD, "holdout": FINAL}
    (root / "holdout.json").write_text(
        json.dumps({k: {"xs": xs, "ys": [truth(x) for x in xs]} for k, xs in halves.items()})
    )
    if layout == "old":  # the README's layout before issue 23
        grade = 'command = "python grade.py"'
        holdout = 'command = "python run.py --holdout"\nfiles = ["holdout.json"]'
        hgrade = 'command = "python grade.py"'
    else:
        grade = 'command = "python grade.py"\nfiles = ["labels.json"]'
        holdout = 'command = "python run.py"\nfiles = ["holdout.json"]'
        hgrade = (
            'command = "python grade.py"\nfiles = ["holdout.json"]\n'
            'prepare = "python prepare.py"\ninputs = ["inputs.json"]'
        )
    body = f"""\
name = "labels"
goal = "Predict y from x."
editable = ["model.py"]
protected = ["run.py", "grade.py", "prepare.py", "inputs.json", "labels.json"]

[evaluate]
command = "python run.py"
outputs = ["answers.json"]
metric = "mse"
direction = "minimize"
timeout = 30

[evaluate.grade]
{grade}

[holdout]
{holdout}

[holdout.grade]
{hgrade}

[sandbox]
backend = "local"

[search]
policy = "greedy"
num_drafts = 3
seed = 3

[trust]
verify_repeats = 1
guard = {str(guard).lower()}

[budget]
max_nodes = 4

[agents]
mode = "knobs"

[[knobs]]
name = "MODE"
type = "categorical"
choices = ["honest", "{attack}"]
file = "model.py"
"""
    (root / "task.toml").write_text(textwrap.dedent(body))
    return root


def run_and_show(home: Path, folder: Path, backend: str) -> tuple[dict[str, Any], str]:
    out = revtree(home, "run", str(folder), "--sandbox", backend)
    s = json.loads(revtree(home, "show", "last", "--json", "--nodes").stdout)
    return s, out.stdout


def attack_node(s: dict[str, Any], attack: str) -> dict[str, Any]:
    hit = [n for n in s["nodes"] if (n.get("knobs") or {}).get("MODE") == attack]
    assert hit, f"the proposer never tried MODE={attack}: {[n['knobs'] for n in s['nodes']]}"
    return hit[0]


def holdouts(s: dict[str, Any], node: int) -> list[float | None]:
    runs = s["guard"]["nodes"] + s["holdout"]
    return [h["score"] for h in runs if h["node"] == node]


@BACKENDS
def test_the_labels_attack_scores_perfectly_in_the_old_layout_and_check_warns(
    tmp_path: Path, home: Path, backend: str
) -> None:
    folder = task(tmp_path / "t", "labels", "old")
    check = revtree(home, "check", str(folder), "--sandbox", backend, check=False)
    assert "labels are visible to the run step" in check.stdout + check.stderr
    s, _ = run_and_show(home, folder, backend)
    node = attack_node(s, "labels")
    assert node["score"] == 0.0  # before: dev perfect...
    assert s["best_node"] == node["id"]
    assert holdouts(s, node["id"]) and all(h == 0.0 for h in holdouts(s, node["id"]))


@BACKENDS
def test_the_labels_attack_finds_no_labels_when_the_grader_owns_them(
    tmp_path: Path, home: Path, backend: str
) -> None:
    folder = task(tmp_path / "t", "labels", "new")
    check = revtree(home, "check", str(folder), "--sandbox", backend, check=False)
    assert "labels are visible" not in check.stdout + check.stderr
    s, out = run_and_show(home, folder, backend)
    node, base = attack_node(s, "labels"), s["baseline_score"]
    assert node["score"] == pytest.approx(base) and base > 0.01  # the honest code's score
    assert s["best_node"] != node["id"] or s["final_holdout"] is None
    hs = holdouts(s, node["id"])
    assert all(h is None or h > 0.01 for h in hs), hs
    assert "+" not in out.split("best", 1)[-1].split("\n", 1)[0]


@BACKENDS
def test_the_hash_attack_is_alarmed_dev_only(tmp_path: Path, home: Path, backend: str) -> None:
    s, out = run_and_show(home, task(tmp_path / "t", "hash", "new"), backend)
    node = attack_node(s, "hash")
    assert node["score"] == 0.0
    assert (node["alarm"] or {}).get("kind") == "dev-only", node["alarm"]
    assert s["best_node"] != node["id"]
    assert "dev-only" in out and "better:" not in out


@BACKENDS
def test_the_hash_attack_without_the_guard_is_not_called_an_improvement(
    tmp_path: Path, home: Path, backend: str
) -> None:
    s, out = run_and_show(home, task(tmp_path / "t", "hash", "new", guard=False), backend)
    node = attack_node(s, "hash")
    assert s["best_node"] == node["id"]  # recommended on dev...
    final = s["final_holdout"]
    assert final is not None and final["better"] is False, final
    assert final["score"] == pytest.approx(final["baseline"])
    assert "no better than the baseline" in out
    assert "% better" not in out and "better:" not in out
    # not an improvement: the summary does not offer to export it (issue 26)
    assert "export it" not in out and "nothing to export" in out
