"""The static reviewer: only editable files may change, and never a protected one."""

from __future__ import annotations

import pytest

from revtree.agents import StaticReviewer
from revtree.tasks import load_task
from revtree.tasks.spec import TaskSpec

TOML = """\
name = "review"
editable = ["solver.py", "pkg/*.py"]
protected = ["evaluate.py", "data/*"]

[evaluate]
command = "python evaluate.py"
metric = "score"
direction = "minimize"
"""


@pytest.fixture
def reviewer(write_task):
    folder = write_task(
        TOML, files={"pkg/a.py": "A = 1\n", "data/train.csv": "x\n", "README.md": "hi\n"}
    )
    return StaticReviewer(load_task(folder))


@pytest.mark.parametrize("paths", [["solver.py"], ["pkg/a.py", "pkg/new.py"], []])
def test_accepts_editable_paths(reviewer, paths):
    verdict = reviewer.check(paths)
    assert verdict.accepted and verdict.reasons == ()


@pytest.mark.parametrize("path", ["evaluate.py", "data/train.csv"])
def test_rejects_a_protected_path_naming_it(reviewer, path):
    verdict = reviewer.check(["solver.py", path])
    assert not verdict.accepted
    assert len(verdict.reasons) == 1
    assert "protected" in verdict.reasons[0] and repr(path) in verdict.reasons[0]
    assert "solver.py" not in verdict.reasons[0]


@pytest.mark.parametrize("path", ["README.md", "task.toml", "other/solver.py", "solver.pyc"])
def test_rejects_a_non_editable_path_naming_it(reviewer, path):
    verdict = reviewer.check([path, "pkg/a.py"])
    assert not verdict.accepted
    assert verdict.reasons == (f"touches non-editable file(s) [{path!r}]",)


def test_names_every_offender_once(reviewer):
    verdict = reviewer.check(["evaluate.py", "README.md", "solver.py", "data/x.bin"])
    assert not verdict.accepted
    protected, other = verdict.reasons
    assert "'evaluate.py'" in protected and "'data/x.bin'" in protected
    assert "README.md" in other and "evaluate.py" not in other


# -- the diff rules ----------------------------------------------------------------------
def diff_of(path: str, added: list[str], context: tuple[str, ...] = (), new: bool = False) -> str:
    head = f"diff --git a/{path} b/{path}\n"
    head += "new file mode 100644\n--- /dev/null\n" if new else f"--- a/{path}\n"
    body = [f" {c}" for c in context] + [f"+{a}" for a in added]
    hunk = f"@@ -{0 if new else 1},{len(context)} +1,{len(body)} @@\n"
    return head + f"+++ b/{path}\n" + hunk + "\n".join(body) + "\n"


def test_flags_name_the_file_line_and_rule(reviewer):
    diff = diff_of("solver.py", ["import atexit", "x = 1"], context=("import os",))
    verdict = reviewer.check(["solver.py"], diff)
    assert not verdict.accepted
    assert verdict.reasons == (
        "static check: solver.py:2: atexit (registers an exit hook): import atexit",
    )


def test_only_added_lines_count_and_comments_never_do(reviewer):
    diff = diff_of(
        "solver.py",
        ["# we never use atexit or os._exit here", "y = 2  # ctypes would be faster"],
        context=("import atexit", "os._exit(0)"),
    )
    assert reviewer.check(["solver.py"], diff).accepted


@pytest.mark.parametrize(
    ("line", "rule"),
    [
        ("import __main__", "main-module"),
        ("sys.modules['__main__'].score = 1", "main-module"),
        ('open("data/train.csv")', "protected-file"),
        ("json.load(open(Path('data') / 'x.csv'))", "protected-file"),
        ("time.perf_counter = lambda: 0.0", "monkeypatch"),
        ("os.environ['X'] = '1'", "environment"),
        ("p = os.environ['REVTREE_METRICS']", "environment"),
        ("open('metrics.json', 'w')", "scoring-file"),
        ("print(json.dumps({'score': 1.0}))", "metric-print"),
        ("import evaluate", "evaluator-import"),
        ("f = sys._getframe(1)", "frame-walk"),
    ],
)
def test_each_rule_fires_on_an_added_line(reviewer, line, rule):
    flags = reviewer.scan(diff_of("solver.py", [line]))
    assert rule in {f.rule for f in flags}


@pytest.mark.parametrize(
    "line",
    [
        'if __name__ == "__main__":',
        "t0 = time.perf_counter()",
        "threads = os.environ.get('OMP_NUM_THREADS')",
        "stack = [root]",
        "row['data'] = 1",
        "print(f'best so far {best}')",
        "gc.disable()",
        "import heuristics",
    ],
)
def test_near_misses_pass(reviewer, line):
    assert reviewer.scan(diff_of("solver.py", [line])) == []


def test_a_hunk_that_does_not_tokenize_falls_back_to_regexes(reviewer):
    diff = diff_of("solver.py", ['s = """unterminated', "import atexit", "open('data/x.bin')"])
    rules = {f.rule for f in reviewer.scan(diff)}
    assert {"atexit", "protected-file"} <= rules


def spec_with(editable: list[str]) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "name": "t",
            "editable": editable,
            "protected": ["evaluate.py", "data/*"],
            "evaluate": {
                "command": "python evaluate.py",
                "metric": "score",
                "direction": "maximize",
            },
        }
    )


def test_new_files_that_shadow_modules():
    reviewer = StaticReviewer(spec_with(["*.py"]))
    assert {f.rule for f in reviewer.scan(diff_of("json.py", ["x = 1"], new=True))} == {
        "shadow-module"
    }
    assert reviewer.scan(diff_of("tsp_utils.py", ["x = 1"], new=True)) == []


def test_scripts_get_the_string_rules_and_documents_are_not_read():
    reviewer = StaticReviewer(spec_with(["*.sh", "*.md"]))
    assert {f.rule for f in reviewer.scan(diff_of("run.sh", ["cat data/a.csv > /dev/fd/3"]))} == {
        "scoring-file"
    }
    assert reviewer.scan(diff_of("NOTES.md", ["we never read data/a.csv or use atexit"])) == []
