"""The README's task example is a real, valid task file."""

from __future__ import annotations

import re
from pathlib import Path

from revtree.tasks import load_task
from revtree.tasks.spec import GreedySearch

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_task_example_loads(tmp_path: Path) -> None:
    block = re.search(r"```toml\n(.*?)```", README.read_text(), re.S)
    assert block is not None, "the README lost its task.toml example"
    (tmp_path / "task.toml").write_text(block.group(1))
    (tmp_path / "solver.py").write_text("INITIAL_TEMP = 2.0\n")
    for name in ("evaluate.py", "holdout.py"):
        (tmp_path / name).write_text("print('{}')\n")
    spec = load_task(tmp_path)
    assert spec.name == "tsp-anneal" and spec.evaluate.stages[0].name == "quick"
    assert isinstance(spec.search, GreedySearch) and spec.search.parallel == 2
    assert spec.holdout is not None and spec.knobs[0].log


def test_the_readme_commands_match_ci() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    command = ci.strip().splitlines()[-1]
    assert command in README.read_text(), "README's test command and .ci/run differ"
