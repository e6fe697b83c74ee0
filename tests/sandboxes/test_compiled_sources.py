"""The fork server compiles the task's own module files once (``ExecRequest.sources``:
the evaluator's), and each later evaluation imports that code instead of compiling the
file again; a file whose bytes differ (a candidate rewrote it), a file the request does
not name, and a file that compiles with a warning are each compiled in the evaluation
as a fresh Python would, and tracebacks name the file and its lines as ever."""

from __future__ import annotations

import itertools
import json

import pytest

from revtree.sandboxes import ExecRequest, ExecResult, Limits
from revtree.sandboxes.base import archive_of
from revtree.sandboxes.local import LocalSandbox

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
                  "forked": b"zygote.py" in open("/proc/self/cmdline", "rb").read()}))
"""
EVALUATOR = """\
import helper

def evaluate(x):
    return helper.twice(x) + {extra}

def fail():
    raise ValueError("from the evaluator")  # the line a traceback shows
"""
HELPER = "def twice(x):\n    return 2 * x\n"
NODES = itertools.count()


@pytest.fixture
def sandbox(forked):
    return forked  # (conftest's: the fork server on)


def run(box: LocalSandbox, evaluator: str, sources: tuple[str, ...]) -> dict:
    """One evaluation of ``probe.py`` with ``evaluator`` as ``evaluator.py``, and what it
    saw; ``sources``: the files the request names as the task's own."""
    files = {"probe.py": PROBE, "evaluator.py": evaluator, "helper.py": HELPER}
    request = ExecRequest(
        archive_of({k: v.encode() for k, v in files.items()}),
        "python probe.py",
        Limits(timeout=60),
        {"REVTREE_NODE": str(next(NODES))},
        sources=sources,
    )
    result: ExecResult = box.execute(request)
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["forked"]  # (else the fork server was not what ran it)
    return {**seen, "stderr": result.stderr}


def test_an_evaluators_module_is_compiled_once_and_imported_from_then_on(sandbox):
    evaluator = EVALUATOR.format(extra=1)
    runs = [run(sandbox, evaluator, ("evaluator.py",)) for _ in range(3)]
    # the first evaluation compiles it itself (its process was forked before the request)
    assert "evaluator.py" in runs[0]["compiled"]
    for seen in runs[1:]:
        assert "evaluator.py" not in seen["compiled"], seen
        assert "helper.py" in seen["compiled"]  # not named: compiled in each, as ever
    for seen in runs:
        assert seen["value"] == 5
        assert seen["file"]  # its code names its own file, not the server's copy
        assert 'evaluator.py", line 7, in fail' in seen["where"]
        assert 'raise ValueError("from the evaluator")' in seen["where"]


def test_a_module_whose_bytes_differ_is_compiled_as_it_now_reads(sandbox):
    run(sandbox, EVALUATOR.format(extra=1), ("evaluator.py",))
    run(sandbox, EVALUATOR.format(extra=1), ("evaluator.py",))  # compiled by the server now
    rewritten = run(sandbox, EVALUATOR.format(extra=100), ("evaluator.py",))
    assert "evaluator.py" in rewritten["compiled"]
    assert rewritten["value"] == 104


def test_a_file_the_request_does_not_name_is_never_compiled_ahead(sandbox):
    runs = [run(sandbox, EVALUATOR.format(extra=1), ()) for _ in range(3)]
    assert all("evaluator.py" in seen["compiled"] for seen in runs), runs


def test_a_module_that_compiles_with_a_warning_warns_in_every_evaluation(sandbox):
    warned = EVALUATOR.format(extra=1) + 'assert (1, "always true")\n'
    runs = [run(sandbox, warned, ("evaluator.py",)) for _ in range(3)]
    for seen in runs:
        assert "evaluator.py" in seen["compiled"]
        assert "SyntaxWarning: assertion is always true" in seen["stderr"], seen["stderr"]
