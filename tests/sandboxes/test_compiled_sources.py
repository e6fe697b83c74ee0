"""The fork server compiles the task's own module files once (``ExecRequest.sources``:
the evaluator's, with the digests of their bytes), and each later evaluation imports
that code instead of compiling the file again; a file whose bytes differ (a candidate
rewrote it), a file the request does not name, and a file that compiles with a warning
are each compiled in the evaluation as a fresh Python would, and tracebacks, file names
and annotations are what a fresh compile gives."""

from __future__ import annotations

import itertools
import json

from revtree.sandboxes import ExecRequest, ExecResult, Limits
from revtree.sandboxes.base import archive_of
from revtree.sandboxes.local import LocalSandbox
from revtree.sandboxes.zygote_compile import SCRIPTS, sources

# counts the compiles of the files it imports (importlib's loader calls ``compile``)
PROBE = """\
import builtins, json, traceback
calls = []
real = builtins.compile
def counting(source, filename, *args, **kwargs):
    calls.append(str(filename).rsplit("/", 1)[-1])
    return real(source, filename, *args, **kwargs)
builtins.compile = counting
import evaluator
try:
    evaluator.fail()
except ValueError:
    where = traceback.format_exc()
print(json.dumps({"compiled": calls, "value": evaluator.evaluate(2), "where": where,
                  "file": evaluator.evaluate.__code__.co_filename == evaluator.__file__,
                  "annotations": evaluator.evaluate.__annotations__ == {"x": int},
                  "forked": b"zygote.py" in open("/proc/self/cmdline", "rb").read()}))
"""
EVALUATOR = """\
import helper
from pkg import mod

def evaluate(x: int):
    return helper.twice(x) + mod.ONE * {extra}

def fail():
    raise ValueError("from the evaluator")  # the line a traceback shows
"""
PACKAGE = {"pkg/__init__.py": "", "pkg/mod.py": "ONE = 1\n"}
HELPER = "def twice(x):\n    return 2 * x\n"
NODES = itertools.count()


def run(
    box: LocalSandbox,
    evaluator: str,
    named: dict[str, str] | None = None,
    extra: dict[str, str] | None = None,
) -> dict:
    """One evaluation of ``probe.py`` with ``evaluator`` as ``evaluator.py``, and what it
    saw. ``named``: the files the request names as the task's own, as the orchestrator
    holds them (default: ``evaluator.py`` and the package, as they are here)."""
    files = {"probe.py": PROBE, "evaluator.py": evaluator, "helper.py": HELPER, **PACKAGE}
    files |= extra or {}
    if named is None:
        named = {"evaluator.py": evaluator, **PACKAGE}
    request = ExecRequest(
        archive_of({k: v.encode() for k, v in files.items()}),
        "python probe.py",
        Limits(timeout=60),
        {"REVTREE_NODE": str(next(NODES))},
        sources=sources({k: v.encode() for k, v in named.items()}),
    )
    result: ExecResult = box.execute(request)
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["forked"]  # (else the fork server was not what ran it)
    return {**seen, "stderr": result.stderr}


def test_an_evaluators_module_is_compiled_once_and_imported_from_then_on(forked):
    evaluator = EVALUATOR.format(extra=1)
    runs = [run(forked, evaluator) for _ in range(3)]
    # the first evaluation compiles it itself (its process was forked before the request)
    assert "evaluator.py" in runs[0]["compiled"] and "mod.py" in runs[0]["compiled"]
    for seen in runs[1:]:
        assert "evaluator.py" not in seen["compiled"], seen
        assert "mod.py" not in seen["compiled"], seen  # in a package folder too
        assert "helper.py" in seen["compiled"]  # not named: compiled in each, as ever
    for seen in runs:
        assert seen["value"] == 5
        assert seen["file"]  # its code names its own file, not the server's copy
        assert seen["annotations"]  # objects: not the server's own __future__ flags
        assert 'evaluator.py", line 8, in fail' in seen["where"]
        assert 'raise ValueError("from the evaluator")' in seen["where"]


def test_a_module_whose_bytes_differ_is_compiled_as_it_now_reads(forked):
    run(forked, EVALUATOR.format(extra=1))
    run(forked, EVALUATOR.format(extra=1))  # compiled by the server now
    rewritten = run(forked, EVALUATOR.format(extra=100))
    assert "evaluator.py" in rewritten["compiled"]
    assert rewritten["value"] == 104


def test_the_server_compiles_no_bytes_but_those_the_orchestrator_named(forked):
    """A candidate that rewrote the evaluator in its workspace (the request names the
    digest of the orchestrator's bytes): the server never compiles what it wrote."""
    ours = {"evaluator.py": EVALUATOR.format(extra=1), **PACKAGE}
    runs = [run(forked, EVALUATOR.format(extra=7), ours) for _ in range(3)]
    assert all("evaluator.py" in seen["compiled"] for seen in runs), runs
    assert all(seen["value"] == 11 for seen in runs)  # its own bytes, compiled in the fork


def test_a_file_the_request_does_not_name_is_never_compiled_ahead(forked):
    runs = [run(forked, EVALUATOR.format(extra=1), {}) for _ in range(3)]
    assert all("evaluator.py" in seen["compiled"] for seen in runs), runs


def test_more_module_files_than_scripts_kept_stay_compiled_together(forked):
    """More named files than the scripts' cache keeps: each is compiled once all the
    same."""
    many = {f"m{i}.py": f"V = {i}\n" for i in range(SCRIPTS + 4)}
    evaluator = "import " + ", ".join(m[:-3] for m in many) + "\n" + EVALUATOR.format(extra=1)
    named = {"evaluator.py": evaluator, **PACKAGE, **many}
    runs = [run(forked, evaluator, named, many) for _ in range(3)]
    assert "m0.py" in runs[0]["compiled"]
    for seen in runs[1:]:
        assert not {p.rsplit("/", 1)[-1] for p in named} & set(seen["compiled"]), seen


def test_a_module_that_compiles_with_a_warning_warns_in_every_evaluation(forked):
    warned = EVALUATOR.format(extra=1) + 'assert (1, "always true")\n'
    runs = [run(forked, warned) for _ in range(3)]
    for seen in runs:
        assert "evaluator.py" in seen["compiled"]
        assert "SyntaxWarning: assertion is always true" in seen["stderr"], seen["stderr"]
