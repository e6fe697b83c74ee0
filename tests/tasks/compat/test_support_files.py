"""TaskSpec.support_files: workspace paths only; kept through dumps and overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from revtree.errors import TaskSpecError
from revtree.tasks import load_task
from revtree.tasks.spec import TaskSpec

BASE = {
    "name": "demo",
    "editable": ["solver.py"],
    "evaluate": {"command": "python evaluate.py", "metric": "s", "direction": "minimize"},
}


def test_support_files_default_to_none_and_round_trip() -> None:
    assert TaskSpec.model_validate(BASE).support_files == {}
    files = {"runner.py": "print(1)\n", "_shims/pkg/__init__.py": ""}
    spec = TaskSpec.model_validate({**BASE, "support_files": files})
    assert spec.support_files == files
    assert TaskSpec.model_validate(spec.model_dump(mode="json")) == spec
    assert spec.with_overrides(budget={"max_nodes": 3}).support_files == files


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../up.py", "a/../../b.py", "a/./b.py", "a//b.py", "", "a\\b.py", "."]
)
def test_support_file_paths_must_stay_in_the_workspace(path: str) -> None:
    with pytest.raises(ValidationError, match="support files need relative paths"):
        TaskSpec.model_validate({**BASE, "support_files": {path: "x"}})


def test_a_folder_of_neither_format_names_all_three(tmp_path: Path) -> None:
    (tmp_path / "initial_program.py").write_text("X = 1\n")  # no evaluator.py
    with pytest.raises(TaskSpecError) as info:
        load_task(tmp_path)
    message = str(info.value)
    assert message.startswith(str(tmp_path.resolve() / "task.toml"))
    assert "OpenEvolve" in message and "ShinkaEvolve" in message
