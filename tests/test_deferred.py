"""``revtree.deferred``: a package's ``__init__`` put off until a name of it is asked for.

Each case runs in a fresh interpreter (pytest's own has imported the real packages
long ago) against packages written to ``tmp_path``, whose ``__init__`` notes each run in
a file and, like ``langsmith.types``, gathers its submodules' names:

- importing a submodule runs no ``__init__``; asking the package for a name runs it once,
  then answers as an ordinary import would (``from pkg import name``, ``pkg.name``,
  ``from pkg import *``, a missing name an ``AttributeError``);
- eight threads asking at once see one run, and each gets the name;
- a package imported before ``install`` and a namespace package are imported as always;
- the real packages of :data:`revtree.deferred.PACKAGES` answer every name they export
  after a ``revtree run``'s imports put them off.

A whole ``revtree run`` with them put off: tests/orchestrator/test_light_imports.py.

``deferred.numpy``: numpy loaded with its BLAS pool one thread wide (no thread spinning
beside the orchestrator's), the variables gone again once it is loaded, and a width the
environment names kept; eight threads asking at once each get numpy whole, never the
module another thread is still loading.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from revtree.deferred import PACKAGES

INIT = """\
import time
from pathlib import Path
with open(Path(__file__).parent.parent / "ran.log", "a") as f:
    f.write(__name__ + "\\n")
time.sleep(float(Path(__file__).with_name("sleep").read_text() or 0))
from .shapes import Square, Circle
from . import extra
__all__ = ["Square", "Circle", "extra"]
"""


def make_package(root: Path, name: str = "pkg", sleep: float = 0.0) -> None:
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(INIT)
    (package / "sleep").write_text(str(sleep))
    (package / "shapes.py").write_text("class Square: sides = 4\nclass Circle: sides = 0\n")
    (package / "extra.py").write_text("VALUE = 7\n")


def run_python(root: Path, body: str) -> dict:
    """``body`` in a fresh interpreter with ``root`` on its path, ``out`` its answer."""
    code = "import json, sys\nsys.path.insert(0, sys.argv[1])\nout = {}\n"
    code += textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def ran(root: Path) -> list[str]:
    log = root / "ran.log"
    return log.read_text().split() if log.exists() else []


def test_a_submodule_import_runs_no_init_and_a_name_runs_it_once(tmp_path: Path) -> None:
    make_package(tmp_path)
    out = run_python(
        tmp_path,
        """
        from pathlib import Path
        from revtree import deferred
        deferred.install(("pkg",))
        import pkg.extra
        from pkg.shapes import Square
        out["after_submodules"] = Path(sys.argv[1], "ran.log").exists()
        out["sides"] = pkg.Circle.sides  # a name of the __init__: it runs now
        from pkg import Square as again
        out["same_class"] = again is Square
        namespace = {}
        exec("from pkg import *", namespace)
        out["star"] = sorted(k for k in namespace if not k.startswith("__"))
        try:
            pkg.nothing_here
        except AttributeError as e:
            out["missing"] = str(e)
        out["value"] = pkg.extra.VALUE
        """,
    )
    assert out["after_submodules"] is False
    assert out["sides"] == 0 and out["same_class"] is True and out["value"] == 7
    assert out["star"] == ["Circle", "Square", "extra"]
    assert "has no attribute 'nothing_here'" in out["missing"]
    assert ran(tmp_path) == ["pkg"]


def test_threads_asking_at_once_see_one_run_and_each_gets_its_name(tmp_path: Path) -> None:
    make_package(tmp_path, sleep=0.3)  # the __init__ runs long enough for all to ask
    out = run_python(
        tmp_path,
        """
        import threading
        from revtree import deferred
        deferred.install(("pkg",))
        import pkg.shapes
        got, start = [], threading.Barrier(8)
        def ask():
            start.wait()
            got.append(pkg.Square.sides)
        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        out["got"] = got
        """,
    )
    assert out["got"] == [4] * 8
    assert ran(tmp_path) == ["pkg"]


def test_a_package_imported_before_and_a_namespace_package_are_left_alone(
    tmp_path: Path,
) -> None:
    make_package(tmp_path, "early")
    (tmp_path / "spaced").mkdir()  # no __init__.py: a namespace package
    (tmp_path / "spaced" / "inside.py").write_text("X = 1\n")
    out = run_python(
        tmp_path,
        """
        import early
        from revtree import deferred
        deferred.install(("early", "spaced"))
        import spaced.inside
        out["x"] = spaced.inside.X
        out["ns_path"] = len(list(spaced.__path__))
        out["early"] = early.Square.sides
        out["put_off"] = "__getattr__" in vars(early)
        """,
    )
    assert out == {"x": 1, "ns_path": 1, "early": 4, "put_off": False}
    assert ran(tmp_path) == ["early"]  # imported as always, once


def test_an_init_that_fails_raises_as_an_import_error_and_runs_again(tmp_path: Path) -> None:
    """Its own ``AttributeError`` is not taken for a missing name (``hasattr`` and
    ``from pkg import name`` would hide it); fixed, the next lookup runs it again."""
    package = tmp_path / "broken"
    package.mkdir()
    (package / "part.py").write_text("X = 1\n")
    (package / "__init__.py").write_text(
        "from pathlib import Path\n"
        "if Path(__file__).with_name('fail').exists():\n"
        "    None.nothing  # an AttributeError of the __init__'s own\n"
        "from .part import X\n"
    )
    (package / "fail").write_text("")
    out = run_python(
        tmp_path,
        """
        from pathlib import Path
        from revtree import deferred
        deferred.install(("broken",))
        import broken.part
        try:
            from broken import X
        except ImportError as e:
            out["first"] = str(e)
        Path(sys.argv[1], "broken", "fail").unlink()
        out["again"] = broken.X
        """,
    )
    assert "the __init__ of broken failed" in out["first"] and "nothing" in out["first"]
    assert out["again"] == 1


def test_a_packages_own_module_getattr_answers_after_its_init(tmp_path: Path) -> None:
    package = tmp_path / "lazy"
    package.mkdir()
    (package / "__init__.py").write_text(
        "def __getattr__(name):\n"
        "    if name == 'made':\n"
        "        return 'on demand'\n"
        "    raise AttributeError(name)\n"
    )
    out = run_python(
        tmp_path,
        """
        from revtree import deferred
        deferred.install(("lazy",))
        import lazy
        out["made"] = lazy.made
        out["missing"] = hasattr(lazy, "other")
        """,
    )
    assert out == {"made": "on demand", "missing": False}


NAMES = """
import importlib
def public(name):  # every name the package's module has once imported, and what it is
    module = importlib.import_module(name)
    getattr(module, "__all__", None)  # put off: its __init__ runs here
    return {k: type(v).__name__ for k, v in vars(module).items() if not k.startswith("_")}
"""


def test_the_real_packages_answer_every_name_they_export(tmp_path: Path) -> None:
    as_always = run_python(
        tmp_path, NAMES + f"for name in {list(PACKAGES)!r}: out[name] = public(name)\n"
    )
    out = run_python(
        tmp_path,
        NAMES
        + f"""
import revtree.orchestrator.core, openai  # as a model-driven run imports them
names = {list(PACKAGES)!r}
out["put_off"] = [n for n in names if "__getattr__" in vars(sys.modules[n])]
out["names"] = {{name: public(name) for name in names}}
from langgraph.graph import MessagesState, StateGraph
from langgraph.graph.state import StateGraph as Same
out["same"] = StateGraph is Same
from openai.types.chat import ChatCompletion
out["model"] = openai.types.chat.ChatCompletion is ChatCompletion
""",
    )
    assert sorted(out["put_off"]) == sorted(PACKAGES)  # put off until asked
    assert out["names"] == as_always
    assert sum(map(len, as_always.values())) > 500
    assert out["same"] is True and out["model"] is True


NUMPY_THREADS = """\
import ctypes, json, os, sys
if sys.argv[1] == "plain":
    import numpy
else:
    from revtree import deferred
    deferred.numpy()
    deferred.numpy()  # (loaded: returned as it is)
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
left = [k for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
        if libc.getenv(k.encode()) is not None and k not in os.environ]
print(json.dumps([len(os.listdir("/proc/self/task")), left]))
"""


def _numpy_threads(how: str, **env: str) -> tuple[int, list[str]]:
    """The threads of a fresh interpreter once it has loaded numpy, ``plain``ly or by
    ``deferred.numpy``, and the variables left in its C environment that its own did
    not have."""
    out = subprocess.run(
        [sys.executable, "-c", NUMPY_THREADS, how],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", **env},
    )
    tasks, left = json.loads(out.stdout)
    return tasks, left


def test_numpy_for_the_orchestrator_starts_no_blas_threads_and_leaves_no_variable() -> None:
    plain, _ = _numpy_threads("plain")
    if plain == 1:
        pytest.skip("numpy's BLAS starts no thread of its own here (one core, or no OpenBLAS)")
    assert _numpy_threads("deferred") == (1, [])
    # a width the environment names is kept, as a plain import keeps it; OpenBLAS reads
    # OMP_NUM_THREADS where OPENBLAS_NUM_THREADS is not set: none is added then
    for named in ({"OPENBLAS_NUM_THREADS": "2"}, {"OMP_NUM_THREADS": "2"}):
        assert _numpy_threads("deferred", **named) == (_numpy_threads("plain", **named)[0], [])
        assert _numpy_threads("plain", **named)[0] == 2


NUMPY_MEANWHILE = """\
import sys, threading
from revtree import deferred
threading.Thread(target=lambda: __import__("numpy"), daemon=True).start()
while "numpy" not in sys.modules:
    pass
np = deferred.numpy()  # another thread loads it: this one waits for the whole module
print(int(np.bincount(np.frombuffer(b"abca", np.uint8))[97]))
"""


def test_numpy_asked_while_another_thread_imports_it_is_whole() -> None:
    """Asked the moment numpy enters ``sys.modules`` (half made, another thread loading
    it by a plain import): the first version returned that module
    (``AttributeError``)."""
    out = subprocess.run(
        [sys.executable, "-c", NUMPY_MEANWHILE],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert (out.returncode, out.stdout.strip()) == (0, "2"), out.stderr[-2000:]


NUMPY_AT_ONCE = """\
import json, threading
from revtree import deferred
start, out = threading.Barrier(8), []
def ask():
    start.wait()
    try:
        np = deferred.numpy()
        out.append(int(np.bincount(np.frombuffer(b"abca", np.uint8))[97]))
    except Exception as e:
        out.append(repr(e))
threads = [threading.Thread(target=ask) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(out))
"""


def test_threads_asking_for_numpy_at_once_each_get_it_whole() -> None:
    """The candidates' threads ask at once (each K > 1 run's first comparisons): a thread
    that found numpy in ``sys.modules`` while another loaded it got a module half made
    (``AttributeError``: its candidate failed in review, no model call)."""
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", NUMPY_AT_ONCE],
            capture_output=True,
            text=True,
            check=True,
            env={"PATH": "/usr/bin:/bin"},
        )
        assert json.loads(out.stdout) == [2] * 8
