"""The fork server loads ahead what the task's own evaluator files import as they load
(``zygote_preload``): an evaluator's numpy is loaded once, not in each fresh process,
and each evaluation still sees what a fresh Python would (its own random draws, its own
modules where the workspace has some, a module's output as it loads, the environment it
was given); a candidate names nothing that later evaluations get."""

from __future__ import annotations

import itertools
import json
import py_compile
import time

import pytest

from revtree.sandboxes import ExecRequest, ExecResult, Limits
from revtree.sandboxes.base import archive_of
from revtree.sandboxes.local import LocalSandbox
from revtree.sandboxes.zygote_preload import module_imports, qualifies

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
FILES = {"probe.py": PROBE, "evaluator.py": EVALUATOR}
NODES = itertools.count()


def run(
    box: LocalSandbox,
    files: dict[str, str | bytes],
    env: dict[str, str] | None = None,
    imports: tuple[str, ...] | None = None,
) -> ExecResult:
    """Run ``probe.py`` as the evaluator runs an evaluation: with revtree's variables,
    which differ per evaluation (``REVTREE_NODE``, ...), and what ``evaluator.py`` (the
    task's file here) imports as it loads."""
    data = {k: v if isinstance(v, bytes) else v.encode() for k, v in files.items()}
    if imports is None:
        imports = module_imports({k: v for k, v in data.items() if k == "evaluator.py"})
    ours = {"REVTREE_NODE": str(next(NODES)), "REVTREE_STAGE": "full", "REVTREE_SEED": "42"}
    request = ExecRequest(
        archive_of(data), "python probe.py", Limits(timeout=60), ours | (env or {}),
        imports=imports,
    )  # fmt: skip
    result = box.execute(request)
    assert result.exit_code == 0, result.stderr
    return result


def seen(result: ExecResult) -> dict:
    return json.loads(result.stdout.splitlines()[-1])


def test_an_evaluators_numpy_is_loaded_once_and_each_fork_draws_its_own_numbers(forked):
    runs = [seen(run(forked, FILES)) for _ in range(4)]
    assert all(r["forked"] for r in runs), runs  # (else nothing here was tested)
    assert not runs[0]["ahead"]  # the first evaluation loads it itself, as ever
    assert all(r["ahead"] for r in runs[1:]), runs
    draws = [r["draw"] for r in runs]
    assert len(set(draws)) == len(draws), draws  # numpy's global generator reseeded


def test_what_a_candidates_own_file_imports_is_not_loaded_for_the_next(forked):
    """The names come from the task's files as the orchestrator read them, never from
    the workspace: a candidate's program that imports numpy names nothing ahead."""
    runs = [seen(run(forked, FILES, imports=())) for _ in range(3)]
    assert all(r["forked"] and not r["ahead"] for r in runs), runs


@pytest.mark.parametrize("shadow", ["csv.py", "csv.pyc", "csv"])
def test_a_workspace_module_named_like_a_loaded_one_is_the_one_imported(forked, tmp_path, shadow):
    """A source, bytecode or a package of the workspace wins over the standard
    library's, first evaluation or later, as in a fresh Python."""
    src = tmp_path / "csv_src.py"
    src.write_text("WHO = 'workspace'\n")
    if shadow == "csv.pyc":
        py_compile.compile(str(src), cfile=str(tmp_path / "csv.pyc"), doraise=True)
        mine: dict[str, str | bytes] = {"csv.pyc": (tmp_path / "csv.pyc").read_bytes()}
    elif shadow == "csv":
        mine = {"csv/__init__.py": "WHO = 'workspace'\n"}
    else:
        mine = {"csv.py": "WHO = 'workspace'\n"}
    files = {"probe.py": "import csv\nprint(csv.WHO)\n", **mine}
    outs = [run(forked, files, imports=("csv",)).stdout for _ in range(3)]
    assert outs == ["workspace\n"] * 3, outs


def test_a_module_that_warns_or_prints_as_it_loads_does_so_in_each_evaluation(forked):
    """``this`` prints as it loads and is never loaded ahead; ``cgi`` is deprecated (it
    warns as it loads, where warnings show): each evaluation says what a fresh Python
    says."""
    zen = {"probe.py": "import this\n"}
    assert all(
        run(forked, zen, imports=("this",)).stdout.startswith("The Zen of Python") for _ in range(3)
    )
    cgi = {"probe.py": "import warnings\nwarnings.simplefilter('default')\nimport cgi\n"}
    errs = [run(forked, cgi, imports=("cgi",)).stderr for _ in range(3)]
    assert all("DeprecationWarning" in e for e in errs), errs


def test_nothing_that_loads_multiprocessing_is_loaded_ahead(forked):
    """``concurrent.futures.process`` loads ``multiprocessing``, whose authentication
    key and start folder are per process: the trial import refuses it, so each
    evaluation loads its own."""
    probe = {"probe.py": "import sys\nprint('multiprocessing' in sys.modules)\n"}
    outs = [run(forked, probe, imports=("concurrent.futures.process",)).stdout for _ in range(3)]
    assert outs == ["False\n"] * 3, outs


def test_a_data_file_named_like_a_module_costs_the_fork_nothing(forked):
    """``json.log`` beside the script shadows no module: the script still runs in the
    server's fork (a ``json.py`` would not: ``test_..._is_the_one_imported``)."""
    files = {**FILES, "json.log": "not a module\n"}
    assert all(seen(run(forked, files))["forked"] for _ in range(2))


def test_a_package_the_task_names_in_preload_is_loaded_ahead_too(tmp_path, monkeypatch):
    """``[sandbox] preload`` adds packages beside numpy and scipy (its author's word
    that they fork safely): the evaluator's yaml then loads once; unnamed, it loads in
    each evaluation."""
    from revtree.tasks.sandbox import LocalConfig

    monkeypatch.setenv("REVTREE_FORK_SERVER", "1")
    probe = {
        "probe.py": "import sys\nprint('yaml' in sys.modules)\nimport evaluator\n",
        "evaluator.py": "import yaml\n",
    }
    seen_ahead = {}
    for named in (True, False):
        config = LocalConfig(preload=["yaml"] if named else [])
        box = LocalSandbox(tmp_path / f"box{named}", config.preload)
        try:
            seen_ahead[named] = [run(box, probe).stdout for _ in range(3)]
        finally:
            box.close()
    assert seen_ahead == {True: ["False\n", "True\n", "True\n"], False: ["False\n"] * 3}
    with pytest.raises(ValueError, match="top-level packages"):
        LocalConfig(preload=["sklearn.linear_model"])


def test_a_task_files_preload_reaches_the_local_backends_fork_server(tmp_path):
    from revtree.sandboxes import make_sandbox
    from revtree.tasks import load_task
    from tests.orchestrator.conftest import make_task

    task = make_task(tmp_path / "t")
    toml = (task / "task.toml").read_text()
    mine = toml.replace("[sandbox]\n", '[sandbox]\nbackend = "local"\npreload = ["yaml"]\n')
    (task / "task.toml").write_text(mine)
    spec = load_task(task)
    box = make_sandbox("local", config=spec.sandbox, base_dir=tmp_path / "b")
    try:
        assert box.forks is not None and box.forks.packages == ("yaml",)
    finally:
        box.close()


def test_an_evaluation_with_another_environment_loads_its_own(forked):
    """Once numpy is loaded ahead for one environment, an evaluation given another one
    starts cold and loads numpy itself (it may read that environment as it loads)."""
    for _ in range(2):
        run(forked, FILES, {"OPENBLAS_NUM_THREADS": "1"})
    assert seen(run(forked, FILES, {"OPENBLAS_NUM_THREADS": "1"}))["ahead"]
    other = seen(run(forked, FILES, {"OPENBLAS_NUM_THREADS": "2"}))
    assert not other["ahead"] and not other["forked"], other


INTERRUPT = """\
import os, signal, time
def stat(pid):
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
server = os.getpid()
while b"zygote.py" in open(f"/proc/{stat(server)[1]}/cmdline", "rb").read():
    server = int(stat(server)[1])
time.sleep(0.01)  # the server is loading numpy now (a load takes 50-100 ms here)
os.kill(server, signal.SIGINT)
print("sent")
"""


def test_a_candidate_that_interrupts_the_server_as_it_loads_costs_no_later_evaluation(
    forked,
):
    """The server loads numpy right after it hands this request on: a SIGINT then must
    not leave numpy half loaded for every later fork."""
    hit = run(forked, {"probe.py": INTERRUPT, "evaluator.py": EVALUATOR})
    assert hit.stdout == "sent\n"
    time.sleep(0.5)
    runs = [seen(run(forked, FILES)) for _ in range(3)]
    assert all(isinstance(r["draw"], float) for r in runs), runs


def test_what_the_task_imports_as_it_loads(tmp_path):
    source = b"""\
import numpy as np
from scipy.optimize import minimize
from . import near
try:
    import json
except ImportError:
    json = None
if True:
    import csv
class K:
    import heapq
if TYPE_CHECKING:
    import decimal
if typing.TYPE_CHECKING:
    import fractions
if __name__ == "__main__":
    import argparse
try:
    import tomllib
except ImportError:
    import tomli

def f():
    import sqlite3

async def g():
    import asyncio
"""
    assert module_imports({"evaluator.py": source, "data.txt": b"import os"}) == (
        "csv",
        "heapq",
        "json",
        "numpy",
        "scipy.optimize",
        "tomllib",
    )
    assert module_imports({"broken.py": b"def (:\n"}) == ()
    assert qualifies("json", ()) and qualifies("numpy", ())
    assert not qualifies("this", ()) and not qualifies("multiprocessing", ())
    assert not qualifies("revtree", ())  # neither the standard library nor a listed package
    (tmp_path / "json.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    assert not qualifies("json", (str(tmp_path),))  # the folder's would be imported


def test_an_import_that_hangs_is_refused_within_its_bound(tmp_path, monkeypatch):
    """The trial import of a module that never finishes loading is killed at its
    deadline and refused (the server's requests wait no longer than that); one that
    exits as it loads is refused too."""
    from revtree.sandboxes import zygote_preload

    (tmp_path / "hangs_as_it_loads.py").write_text("import time\ntime.sleep(60)\n")
    (tmp_path / "loads_cleanly.py").write_text("X = 1\n")
    (tmp_path / "exits_as_it_loads.py").write_text("import os\nos._exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    t0 = time.monotonic()
    assert not zygote_preload._trial("hangs_as_it_loads", t0 + 0.5)
    assert time.monotonic() - t0 < 5
    assert not zygote_preload._trial("exits_as_it_loads", time.monotonic() + 5)
    assert zygote_preload._trial("loads_cleanly", time.monotonic() + 5)
