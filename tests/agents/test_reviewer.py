"""The static reviewer: only editable files may change, and never a protected one."""

from __future__ import annotations

import pytest

from revtree.agents import StaticReviewer
from revtree.tasks import load_task

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
    verdict = reviewer.review(paths)
    assert verdict.accepted and verdict.reasons == ()


@pytest.mark.parametrize("path", ["evaluate.py", "data/train.csv"])
def test_rejects_a_protected_path_naming_it(reviewer, path):
    verdict = reviewer.review(["solver.py", path])
    assert not verdict.accepted
    assert len(verdict.reasons) == 1
    assert "protected" in verdict.reasons[0] and repr(path) in verdict.reasons[0]
    assert "solver.py" not in verdict.reasons[0]


@pytest.mark.parametrize("path", ["README.md", "task.toml", "other/solver.py", "solver.pyc"])
def test_rejects_a_non_editable_path_naming_it(reviewer, path):
    verdict = reviewer.review([path, "pkg/a.py"])
    assert not verdict.accepted
    assert verdict.reasons == (f"touches non-editable file(s) [{path!r}]",)


def test_names_every_offender_once(reviewer):
    verdict = reviewer.review(["evaluate.py", "README.md", "solver.py", "data/x.bin"])
    assert not verdict.accepted
    protected, other = verdict.reasons
    assert "'evaluate.py'" in protected and "'data/x.bin'" in protected
    assert "README.md" in other and "evaluate.py" not in other
