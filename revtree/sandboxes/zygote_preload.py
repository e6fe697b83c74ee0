"""What the fork server (``zygote.py``) loads ahead for the evaluations it forks: the
modules that the task's own evaluator files import as they load, where one load in the
server gives each fork what its own import would.

An evaluator that imports numpy spends 70-120 ms of each fresh process loading it here
(2 cores); OpenEvolve's workers load it once each. The names come with each request
(``imports``): the module-level imports of the task's protected Python files, parsed
by the orchestrator (``module_imports``) from the bytes it overlays on every workspace,
never from a file in the workspace, which the candidate's code can rewrite as it runs.
So every evaluation of the run imports them anyway, and no candidate can name what
later ones get. After handing a request on, the server imports those that qualify:

- a module of the standard library, but for those that act, or keep per-process state,
  as they load (``NOT_AHEAD``), or of a package in ``PACKAGES`` (or in the task's
  ``[sandbox] preload``, the request's ``packages``: its author's word), whose load depends on
  neither the folder nor the time and whose forks are safe (numpy's global generator is
  reseeded in each fork, ``reseed``), with what such a package loads only as it is
  first touched (``LAZY``: ``numpy.random`` took 13 ms of each fork that drew a number,
  and OpenEvolve's example evaluators time each trial out with a ``ThreadPoolExecutor``);
- found by the server's own search path in its interpreter's standard library or
  site-packages (``ROOTS``), not in the evaluation's folder;
- not named like a module of the request's folder or its script's (a source, bytecode,
  an extension or a package: a fresh Python would import that one instead);
- only for a request whose environment is the server's own but for what differs per
  evaluation (``HOME``, ``TMPDIR``, revtree's ``REVTREE_NODE``, ``_STAGE``, ``_REPEAT``,
  ``_SEED``): a module may read it as it loads. Once anything is loaded, a request with
  another environment runs cold (``same_env``).

Each is imported first in a throwaway fork (``_trial``): one that fails, exits, prints,
shows a warning or loads a module of ``NOT_AHEAD`` is left to each evaluation to
import itself, as a fresh Python would, and not tried again. The import here then runs
with the stopping signals blocked (a candidate may signal the server: a package half
loaded would fail in every later fork). Standard library only, as the server: in the
server this file is a module beside it, which a fork forgets, as it forgets
``supervise``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import io
import os
import re
import signal
import sys
import sysconfig
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping

PACKAGES = frozenset({"numpy", "scipy"})
# what a package loads only as it is first touched, and evaluations touch often
LAZY = {
    "numpy": ("numpy.random", "numpy.fft"),
    "concurrent.futures": ("concurrent.futures.thread",),  # OpenEvolve's timeouts
}
NOT_AHEAD = frozenset(
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
        "multiprocessing",  # its authentication key and start folder, per process
    }
)
PER_EVALUATION = ("HOME", "TMPDIR")  # set per evaluation (a module that loads reads none)
OURS = "REVTREE_"  # the node, stage, repeat and seed of each evaluation
NAMES = 64  # names taken from one request, at most
TRIAL_WAIT = 5.0  # seconds the trial imports for one request may take in all
CLEAN = 57  # a trial's exit code where its import went cleanly
HERE = os.path.dirname(os.path.realpath(__file__))  # the server's folder: not searched
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,7}")
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
ROOTS = tuple(
    os.path.realpath(p)
    for p in {sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    if p
)
SUFFIXES = ("", ".py", *importlib.machinery.BYTECODE_SUFFIXES)
SUFFIXES += tuple(importlib.machinery.EXTENSION_SUFFIXES)  # what shadows a module


def _kept(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in PER_EVALUATION and not k.startswith(OURS)}


STARTED = _kept(os.environ)
LOADED: list[str] = []  # what this process loaded ahead, in order
_tried: set[str] = set()


def module_imports(files: Mapping[str, bytes]) -> tuple[str, ...]:
    """The absolute names that the Python files among ``files`` (path -> source) import
    as they load: their module-level imports, those in the branches and class bodies
    that run then included (``_at_load``); sorted. A file that does not parse names
    none."""
    names: set[str] = set()
    for path, source in files.items():
        if not path.endswith(".py"):
            continue
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in _at_load(tree.body):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
    return tuple(sorted(names))


def _at_load(body: Iterable[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of ``body`` that run as its module loads: not in a function, an
    ``except`` fallback, an ``if TYPE_CHECKING:`` or an ``if __name__ == "__main__":``
    (a file imported as a module, as an evaluator is)."""
    for node in body:
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and _skipped(node.test):
            yield from _at_load(node.orelse)
            continue
        for field in ("body", "orelse", "finalbody", "cases"):
            for child in getattr(node, field, ()):
                if isinstance(child, ast.stmt):
                    yield from _at_load([child])
                elif isinstance(child, ast.match_case):
                    yield from _at_load(child.body)


def _skipped(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` (``typing.TYPE_CHECKING``) or ``__name__ == "__main__"``."""
    if isinstance(test, ast.Name | ast.Attribute):
        return ast.unparse(test).endswith("TYPE_CHECKING")
    return (
        isinstance(test, ast.Compare)
        and ast.unparse(test).replace("'", '"') == '__name__ == "__main__"'
    )


def same_env(env: Mapping[str, str]) -> bool:
    """Whether ``env`` is this process's start environment, but for what is set per
    evaluation (``PER_EVALUATION``, and revtree's own ``REVTREE_*``)."""
    return _kept(env) == STARTED


def qualifies(name: str, folders: tuple[str, ...], packages: Iterable[str] = ()) -> bool:
    """Whether ``name`` may be loaded here for forks that run in ``folders``
    (``packages``: the task's own beside ``PACKAGES``, its ``[sandbox] preload``)."""
    top = name.partition(".")[0]
    listed = top in PACKAGES or top in packages or top in sys.stdlib_module_names
    if top in NOT_AHEAD or not listed:
        return False
    if any(os.path.lexists(os.path.join(f, top + s)) for f in folders for s in SUFFIXES):
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


def learn(header: dict) -> bool:
    """Load here what the request ``header`` (the server's: ``imports``, ``cwd``,
    ``env``, ``script``, ``packages``) names and qualifies; whether anything new loaded.
    A request that names nothing untried (every one after the first few) costs a set
    difference: the environment and the search path are looked at only for new names."""
    names, env, cwd = header.get("imports"), header.get("env"), header.get("cwd")
    if not isinstance(names, list) or not isinstance(env, dict) or not isinstance(cwd, str):
        return False
    wanted = {n for n in names[:NAMES] if isinstance(n, str) and NAME.fullmatch(n)}
    wanted.update(*(LAZY.get(name, ()) for name in list(wanted)))
    todo = sorted(n for n in wanted - _tried if n not in sys.modules)
    if not todo or not same_env(env):
        return False
    script, packages = header.get("script"), header.get("packages")
    folders: tuple[str, ...] = (cwd,)
    if script and isinstance(script[0], str):
        folders += (os.path.dirname(os.path.join(cwd, script[0])),)
    listed = {p for p in packages if isinstance(p, str)} if isinstance(packages, list) else set()
    new, until = False, time.monotonic() + TRIAL_WAIT
    path = sys.path[:]
    sys.path[:] = [p for p in path if os.path.realpath(p or ".") != HERE]  # (not ours)
    try:
        for name in todo:
            if name in sys.modules:  # (loaded by one before it)
                continue
            if time.monotonic() > until:
                break  # the rest at the next request: requests wait meanwhile
            _tried.add(name)
            if qualifies(name, folders, listed) and _load(name, until):
                LOADED.append(name)
                new = True
    finally:
        sys.path[:] = path
    return new


def _load(name: str, until: float) -> bool:
    """Import ``name`` here where a trial import in a throwaway fork (``_trial``) went
    cleanly, with the stopping signals held until it is done (a candidate may signal
    the server: a package half loaded would fail in every later fork)."""
    if not _trial(name, until):
        return False
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        importlib.import_module(name)
        return True
    except Exception:  # (the trial went cleanly: what fails now is left to the forks)
        return False
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _trial(name: str, until: float) -> bool:
    """Whether ``name`` imports, in a fork of this process, without an error, an exit,
    a word on stdout or stderr, a warning of any kind, or a module of ``NOT_AHEAD``
    loaded on the way (``concurrent.futures.process`` loads ``multiprocessing``): what
    a fresh import would say or do in each evaluation then stays there. The server's
    own state is untouched whatever the import does (a failed import's extension,
    numpy's among them, could not be loaded again here). It holds none of the server's
    descriptors and dies with it, and one still loading at ``until`` (a request's learning
    has ``TRIAL_WAIT`` seconds in all) is killed and refused: requests wait meanwhile
    (a client gives up on the server after 10 s)."""
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid == 0:  # never returns
        code = 1
        try:
            os.closerange(3, 1 << 16)  # (the control socket above all)
            import contextlib  # (in the throwaway fork only)
            import ctypes

            ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG

            out, before = io.StringIO(), set(sys.modules)
            with (
                warnings.catch_warnings(record=True) as said,
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(out),
            ):
                warnings.simplefilter("always")  # (any: the evaluation's filters are unknown)
                importlib.import_module(name)
            added = {m.partition(".")[0] for m in set(sys.modules) - before}
            quiet = not said and not out.getvalue()
            code = CLEAN if quiet and not added & NOT_AHEAD else 1
        finally:
            os._exit(code)
    try:
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > until:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return False
            time.sleep(0.002)
    except ChildProcessError:
        return False
    return os.waitstatus_to_exitcode(done[1]) == CLEAN  # (a module's own exit is not)


def reseed() -> None:
    """In a fork, before its script: what a fresh Python's imports would have set afresh
    (numpy's global generator, logging's start time, where loaded here; ``random``
    reseeds itself)."""
    legacy = sys.modules.get("numpy.random")
    if legacy is not None:
        legacy.seed()
    logging = sys.modules.get("logging")
    if logging is not None:  # (relativeCreated counts from it)
        start = vars(logging).get("_startTime")
        vars(logging)["_startTime"] = time.time_ns() if isinstance(start, int) else time.time()
