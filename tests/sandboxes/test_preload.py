"""The fork server loads ahead what an evaluation's files import (``zygote_preload``):
an evaluator's numpy is loaded once, not in each fresh process, and each evaluation
still sees what a fresh Python would (its own random draws, its own modules where the
workspace has some, a module's output as it loads, the environment it was given)."""

from __future__ import annotations

import itertools
import json
import os

import pytest

from revtree.sandboxes import ExecRequest, ExecResult, Limits
from revtree.sandboxes.base import archive_of
from revtree.sandboxes.local import LocalSandbox
from revtree.sandboxes.zygote_preload import imports, qualifies

pytest.importorskip("numpy")

# an OpenEvolve-style evaluator: numpy at the top, a draw from the global generator
EVALUATOR = """\
import numpy as np

def evaluate(path):
    return float(np.random.rand())
"""
PROBE = """\
import json, sys
ahead = "numpy" in sys.modules
import evaluator
print(json.dumps({"ahead": ahead, "draw": evaluator.evaluate("x"),
                  "forked": b"zygote.py" in open("/proc/self/cmdline", "rb").read()}))
"""

NODES = itertools.count()


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    monkeypatch.setenv("REVTREE_FORK_SERVER", "1")
    box = LocalSandbox(tmp_path / "box")
    yield box
    box.close()


def run(box: LocalSandbox, files: dict[str, str], env: dict[str, str] | None = None) -> ExecResult:
    """Run ``probe.py`` as the evaluator runs an evaluation: with revtree's variables,
    which differ per evaluation (``REVTREE_NODE``, ...)."""
    archive = archive_of({k: v.encode() for k, v in files.items()})
    ours = {"REVTREE_NODE": str(next(NODES)), "REVTREE_STAGE": "full", "REVTREE_SEED": "42"}
    request = ExecRequest(archive, "python probe.py", Limits(timeout=60), env=ours | (env or {}))
    result = box.execute(request)
    assert result.exit_code == 0, result.stderr
    return result


def seen(result: ExecResult) -> dict:
    return json.loads(result.stdout.splitlines()[-1])


def test_an_evaluators_numpy_is_loaded_once_and_each_fork_draws_its_own_numbers(sandbox):
    files = {"probe.py": PROBE, "evaluator.py": EVALUATOR}
    runs = [seen(run(sandbox, files)) for _ in range(4)]
    assert all(r["forked"] for r in runs), runs  # (else nothing here was tested)
    assert not runs[0]["ahead"]  # the first evaluation loads it itself, as ever
    assert all(r["ahead"] for r in runs[1:]), runs
    draws = [r["draw"] for r in runs]
    assert len(set(draws)) == len(draws), draws  # numpy's global generator reseeded


def test_a_workspace_module_named_like_a_package_is_the_one_imported(sandbox):
    files = {
        "probe.py": "import numpy\nprint(numpy.WHO)\n",
        "numpy.py": "WHO = 'workspace'\n",
    }
    outs = [run(sandbox, files).stdout for _ in range(3)]
    assert outs == ["workspace\n"] * 3, outs


def test_a_module_that_acts_as_it_loads_is_never_loaded_ahead(sandbox):
    """``this`` prints as it loads: each evaluation prints it, as a fresh Python does."""
    files = {"probe.py": "import this\n"}
    outs = [run(sandbox, files).stdout for _ in range(3)]
    assert all(out.startswith("The Zen of Python") for out in outs), outs


def test_an_evaluation_with_another_environment_loads_its_own(sandbox):
    """Once numpy is loaded ahead for one environment, an evaluation given another one
    starts cold and loads numpy itself (it may read that environment as it loads)."""
    files = {"probe.py": PROBE, "evaluator.py": EVALUATOR}
    for _ in range(2):
        run(sandbox, files, {"OPENBLAS_NUM_THREADS": "1"})
    assert seen(run(sandbox, files, {"OPENBLAS_NUM_THREADS": "1"}))["ahead"]
    other = seen(run(sandbox, files, {"OPENBLAS_NUM_THREADS": "2"}))
    assert not other["ahead"] and not other["forked"], other


def test_hostile_files_beside_the_script_cost_the_server_nothing(sandbox):
    files = {
        "probe.py": PROBE,
        "evaluator.py": EVALUATOR,
        "deep.py": "x = " + "(" * 100_000 + ")" * 100_000 + "\n",
        "big.py": "import numpy\n" + "#" * 200_000 + "\n",
        "bytes.py": "\udcff",  # not UTF-8 once encoded with surrogates below
    }
    archive = archive_of({k: v.encode("utf-8", "surrogateescape") for k, v in files.items()})
    for i in range(3):
        env = {"REVTREE_NODE": str(i)}
        r = sandbox.execute(ExecRequest(archive, "python probe.py", Limits(timeout=60), env=env))
        assert r.exit_code == 0, r.stderr
    assert seen(r)["ahead"] and seen(r)["forked"], r.stdout


def test_what_qualifies():
    assert imports(b"import numpy as np\nfrom scipy.optimize import x\n") == {
        "numpy",
        "scipy.optimize",
    }
    assert imports(b"def f():\n    import json\nfrom . import near\n") == {"json"}
    assert imports(b"def (:\n") == frozenset()
    here = os.path.dirname(__file__)
    assert qualifies("json", ()) and qualifies("numpy", ())
    assert not qualifies("this", ()) and not qualifies("antigravity", ())
    assert not qualifies("revtree", ())  # neither the standard library nor a listed package
    assert not qualifies("conftest", (here,))
