"""What the fork server (``zygote.py``) loads ahead for the evaluations it forks: the
modules that an evaluation's Python files import, where one load in the server gives
each fork what a fresh Python's own import would.

An evaluator that imports numpy spends 70-120 ms of each fresh process loading it here
(2 cores); OpenEvolve's workers load it once each. After the server has handed a
request on, it reads the ``*.py`` files at the top of the request's folder (at most
``FILES``, each a regular file of at most ``FILE_MAX`` bytes, parsed and never run) and
imports the modules they name that qualify:

- a module of the standard library, but for those that act as they load (``ANTICS``),
  or of a package in ``PACKAGES`` (numerical libraries whose load depends on neither
  the folder nor the time, and whose forks are safe: numpy's global generator is
  reseeded in each fork, ``reseed``), with what such a package loads only as it is
  first touched (``LAZY``: ``numpy.random`` took 13 ms of each fork that drew a number,
  and OpenEvolve's example evaluators time each trial out with a ``ThreadPoolExecutor``);
- found by the server's own search path in its interpreter's standard library or
  site-packages (``ROOTS``), never in a folder an evaluation can write;
- not named like a file or folder of the request's folder or its script's (a fresh
  Python would import that one instead);
- only for a request whose environment is the server's own but for what differs per
  evaluation (``HOME``, ``TMPDIR``, revtree's ``REVTREE_NODE``, ``_STAGE``, ``_REPEAT``,
  ``_SEED``): a module may read it as it loads. Once
  anything is loaded, a request with another environment runs cold (``same_env``).

An import that fails is not tried again, and one that succeeds stays for every later
fork. Standard library only, as the server: this file runs beside it, not as part of
the ``revtree`` package (a fork forgets it, as it forgets ``supervise``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import stat
import sys
import sysconfig

PACKAGES = frozenset({"numpy", "scipy", "pandas", "sympy", "networkx"})
# what a package loads only as it is first touched, and evaluations touch often
LAZY = {
    "numpy": ("numpy.random", "numpy.fft"),
    "concurrent.futures": ("concurrent.futures.thread",),  # OpenEvolve's timeouts
}
ANTICS = frozenset(
    {
        "__hello__",
        "__phello__",
        "antigravity",  # opens a browser
        "this",  # prints
        "idlelib",
        "tkinter",
        "turtle",
        "turtledemo",
        "readline",  # takes the terminal
        "rlcompleter",
        "site",
        "webbrowser",
        "pydoc",
        "pdb",
        "__main__",
    }
)
# set per evaluation (a module that loads reads none of them: revtree's own, the folders)
PER_EVALUATION = ("HOME", "TMPDIR")
OURS = "REVTREE_"  # the node, stage, repeat and seed of each evaluation
FILES = 16  # Python files read per request, at most (the first in name order)
FILE_MAX = 64 * 1024  # bytes of one file parsed, at most
SCAN_MAX = 4096  # entries of the request's folder looked at, at most
PARSED_MAX = 64  # sources whose imports are kept (evaluator and runner: few change)
ROOTS = tuple(
    os.path.realpath(p)
    for p in {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    if p
)


def _kept(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in PER_EVALUATION and not k.startswith(OURS)}


STARTED = _kept(dict(os.environ))
LOADED: list[str] = []  # what this process loaded ahead, in order
_tried: set[str] = set()
_parsed: dict[bytes, frozenset[str]] = {}


def imports(source: bytes) -> frozenset[str]:
    """The absolute module names a Python source imports, anywhere in it (a function's
    imports too); none where it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return frozenset(names)


def same_env(env: dict[str, str]) -> bool:
    """Whether ``env`` is this process's start environment, but for what is set per
    evaluation (``PER_EVALUATION``, and revtree's own ``REVTREE_*``)."""
    return _kept(env) == STARTED


def qualifies(name: str, folders: tuple[str, ...]) -> bool:
    """Whether ``name`` may be loaded here for forks that run in ``folders``."""
    top = name.partition(".")[0]
    if top in ANTICS or not (top in PACKAGES or top in sys.stdlib_module_names):
        return False
    if any(os.path.lexists(os.path.join(f, n)) for f in folders for n in (top, top + ".py")):
        return False  # the folder's own would be imported
    if top in sys.modules:
        return True
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None or spec.origin is None:
        return False
    if spec.origin in ("built-in", "frozen"):
        return True
    origin = os.path.realpath(spec.origin)
    return any(origin.startswith(root + os.sep) for root in ROOTS)


def _sources(folder: str) -> list[bytes]:
    """The small regular ``*.py`` files at the top of ``folder``, read (links not
    followed)."""
    found: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for i, entry in enumerate(entries):
                if i >= SCAN_MAX:
                    break
                if entry.name.endswith(".py"):
                    found.append(entry.name)
    except OSError:
        return []
    out = []
    for name in sorted(found)[:FILES]:
        try:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_size <= FILE_MAX:
                out.append(os.read(fd, FILE_MAX + 1))
        except OSError:
            pass
        finally:
            os.close(fd)
    return out


def learn(header: dict) -> bool:
    """Load here what the Python files of the request ``header`` (the server's: ``cwd``,
    ``env``, ``script``) import and qualifies; whether anything new loaded."""
    if not isinstance(header.get("env"), dict) or not same_env(header["env"]):
        return False
    cwd = header.get("cwd")
    if not isinstance(cwd, str):
        return False
    script = header.get("script")
    folders: tuple[str, ...] = (cwd,)
    if script and isinstance(script[0], str):
        folders += (os.path.dirname(os.path.join(cwd, script[0])),)
    wanted: set[str] = set()
    for source in _sources(cwd):
        names = _parsed.get(source)
        if names is None:
            names = imports(source)
            if len(_parsed) >= PARSED_MAX:
                _parsed.pop(next(iter(_parsed)))
            _parsed[source] = names
        wanted |= names
    wanted.update(*(LAZY.get(name, ()) for name in list(wanted)))
    new = False
    for name in sorted(wanted - _tried):
        if name in sys.modules:
            continue
        _tried.add(name)
        if not qualifies(name, folders):
            continue
        try:
            importlib.import_module(name)
        except BaseException:  # whatever a module does as it fails to load
            continue
        LOADED.append(name)
        new = True
    return new


def reseed() -> None:
    """In a fork, before its script: what a fresh Python's imports would have seeded
    afresh (numpy's global generator, where loaded here; ``random`` reseeds itself)."""
    legacy = sys.modules.get("numpy.random")
    if legacy is not None:
        legacy.seed()
