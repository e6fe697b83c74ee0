"""Package ``__init__`` files that revtree's imports never use, run only when something asks
for them (issue 24).

Importing LangGraph and the openai SDK runs a few package ``__init__`` files whose only job
is to gather every name of every submodule: ``langsmith.types`` (about 160 modules of
pydantic models, imported by ``langchain_core``'s tracers for one ``Literal``),
``openai.types`` and ``openai.types.responses`` (the whole API's models, where a chat
completion needs a few), ``langgraph_sdk`` (LangGraph's HTTP client, for one
``TypedDict`` module of ``langgraph_sdk.auth``) and ``langgraph.graph`` (which imports
the message graph, and with it ``langchain_core.messages``, beside ``StateGraph``). On 2
cores they were about a third of a ``revtree run``'s imports (``docs/architecture.md``
has the figures).

:func:`install` puts a finder first on ``sys.meta_path`` that, for each of :data:`PACKAGES`
not imported yet, lets the import system find the package as always and makes its module
(``__path__``, ``__file__``, ``__spec__`` as always), but runs its ``__init__`` only on the
first lookup of a name the module does not have yet (a module ``__getattr__``, PEP 562).
Importing a submodule (``import langsmith.types.run_select_field``) needs only
``__path__``, so it runs nothing more; ``from langsmith.types import Run``, or
``langsmith.types.Run``, runs the ``__init__`` in full first, then answers as it always
did. Nothing is skipped, only put off until asked for. A namespace package (no
``__init__``) is imported as always.

:func:`numpy` imports numpy for the orchestrator's own counting with its BLAS pool one
thread wide (below).

A lookup from another thread while the ``__init__`` runs waits for it to finish; within
that ``__init__`` the module is partly made, as any module is while it is being imported.
An ``__init__`` that fails raises from the lookup that ran it (an ``AttributeError`` of
its own as ``ImportError``, so that ``hasattr`` and ``from pkg import name`` do not take
it for a missing name) and runs again on the next lookup; one that defines its own
module ``__getattr__`` has it answer the names it does not hold.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

PACKAGES = (
    "langsmith.types",
    "openai.types",
    "openai.types.responses",
    "langgraph_sdk",
    "langgraph.graph",
)


# numpy's BLAS and OpenMP pools: a thread per core, each spinning as it starts (OpenBLAS:
# about 0.1 s of a core in all on 2 cores), for the orchestrator's counting, which uses none
THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
WIDTHS = (*THREADS, "GOTO_NUM_THREADS")  # any of them set: the environment names a width
_numpy_lock = threading.Lock()


def numpy() -> ModuleType:
    """numpy, imported on first use by the orchestrator's own counting (``novelty``'s
    histograms, ``lessons``' shared words): element-wise work that no BLAS call does,
    so its thread pools are made one thread wide, where the environment names no width
    (OpenBLAS falls back to ``OMP_NUM_THREADS`` and ``GOTO_NUM_THREADS``: one set, none
    is added). The variables are put in the process's C environment only while numpy
    loads (its libraries read them then with ``getenv``), never in ``os.environ``, which
    other threads read meanwhile (``sandboxes.env`` walks it for every execution). In a
    process that uses revtree as a library, a numpy loaded first here keeps one BLAS
    thread (``threadpoolctl`` widens it). A thread that asks while another loads numpy
    waits for the whole module, as an ``import`` does (``sys.modules`` holds it half
    made)."""
    np = sys.modules.get("numpy")
    if np is not None and not getattr(np.__spec__, "_initializing", False):
        return np
    with _numpy_lock:
        if "numpy" in sys.modules or any(k in os.environ for k in WIDTHS):
            return importlib.import_module("numpy")  # (waits for another's load to end)
        try:
            for key in THREADS:
                os.putenv(key, "1")
            return importlib.import_module("numpy")
        finally:
            for key in THREADS:
                os.unsetenv(key)


class _Finder:
    """First on ``sys.meta_path``: the spec the other finders give, with :class:`_Loader`."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.lock = threading.Lock()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        with self.lock:  # (it stays on the list once done: a finder that removed itself
            if fullname not in self.names:  # could make another thread's walk skip one)
                return None
            self.names.discard(fullname)
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            loader = spec.loader
            if spec.submodule_search_locations is not None and hasattr(loader, "exec_module"):
                spec.loader = _Loader(loader)  # type: ignore[assignment]  # a Loader by duck type
            return spec
        return None


class _Loader:
    """The real loader's module, with the real ``exec_module`` put off until a lookup."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.lock = threading.RLock()
        self.ran = False

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ...
        return getattr(self.real, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        made: ModuleType | None = self.real.create_module(spec)
        return made

    def exec_module(self, module: ModuleType) -> None:
        def __getattr__(name: str) -> Any:
            with self.lock:  # another thread's lookup waits here while the __init__ runs
                if not self.ran:
                    self.ran = True
                    try:
                        self.real.exec_module(module)
                    except AttributeError as e:  # not "no such name": hasattr() would hide it
                        self.ran = False  # asked again, it runs again, as a new import would
                        raise ImportError(f"the __init__ of {module.__name__} failed: {e}") from e
                    except BaseException:
                        self.ran = False
                        raise
                    if module.__dict__.get("__getattr__") is __getattr__:
                        del module.__dict__["__getattr__"]
            try:
                return module.__dict__[name]
            except KeyError:
                pass
            own = module.__dict__.get("__getattr__")
            if own is not None and own is not __getattr__:  # the package's own (PEP 562)
                return own(name)
            # within the __init__ (same thread): not made yet, as in any import
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

        module.__getattr__ = __getattr__  # type: ignore[method-assign]


_asked: set[str] = set()


def install(packages: tuple[str, ...] = PACKAGES) -> None:
    """Put off the ``__init__`` of each of ``packages`` not imported yet and not asked for
    before (the first call for a name decides it)."""
    names = {name for name in packages if name not in _asked and name not in sys.modules}
    _asked.update(packages)
    if names:
        sys.meta_path.insert(0, _Finder(names))
