"""ShinkaEvolve task folders, unchanged: ``initial.py`` and ``evaluate.py``.

The mapping onto a :class:`TaskSpec`: ``initial.py`` is editable, ``evaluate.py``
protected, other files are read-only context. The score is ``combined_score`` from the
``metrics.json`` that ``evaluate.py --program_path initial.py --results_dir DIR`` writes,
maximized; ``python _revtree_shinka_runner.py`` runs it and reads ``correct.json`` too, so
a program that Shinka marks incorrect fails (with Shinka's error message). Evaluators that
import ``shinka.core.run_shinka_eval`` work without ShinkaEvolve installed: a small shim
stands in for it.

Not carried over: Shinka's run configuration (``shinka*.yaml``, ``run_evo*.py``: models,
generations, islands, job settings). Those files are named in a warning and kept out of the
repository; revtree's own options set the budget, parallelism and seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from revtree.errors import TaskSpecError
from revtree.tasks.compat._common import (
    SHIMS,
    default_goal,
    parse_python,
    support_files,
    task_name,
)
from revtree.tasks.load import spec_from_dict
from revtree.tasks.spec import TaskSpec

PROGRAM = "initial.py"
EVALUATOR = "evaluate.py"
RUNNER = "_revtree_shinka_runner.py"
SUPPORT = {
    RUNNER: "shinka_runner.py",
    f"{SHIMS}/shinka/__init__.py": "shinka/__init__.py",
    f"{SHIMS}/shinka/core/__init__.py": "shinka/core/__init__.py",
    f"{SHIMS}/shinka/core/wrap_eval.py": "shinka/core/wrap_eval.py",
}
RUN_CONFIGS = ("shinka*.yaml", "shinka*.yml", "run_evo*.py")


def is_shinka(folder: Path) -> bool:
    return (folder / PROGRAM).is_file() and (folder / EVALUATOR).is_file()


def load_shinka(path: str | Path) -> tuple[TaskSpec, list[str]]:
    """The task of a ShinkaEvolve folder, and warnings naming what is not carried over."""
    folder = Path(path).expanduser().resolve()
    for name in (PROGRAM, EVALUATOR):
        if not (folder / name).is_file():
            raise TaskSpecError(
                f"{folder / name}: no such file (a ShinkaEvolve task folder holds "
                f"{PROGRAM} and {EVALUATOR})"
            )
    evaluator = folder / EVALUATOR
    parse_python(evaluator)
    ignored = sorted({p.name for glob in RUN_CONFIGS for p in folder.glob(glob) if p.is_file()})
    data: dict[str, Any] = {
        "name": task_name(folder),
        "goal": default_goal(folder, PROGRAM, EVALUATOR, ", keeping it correct"),
        "editable": [PROGRAM],
        "protected": [EVALUATOR],
        "exclude": ignored,
        "evaluate": {
            "command": f"python {RUNNER}",
            "metric": "combined_score",
            "direction": "maximize",
        },
        "support_files": support_files(SUPPORT),
    }
    warnings = [
        f"{folder / name}: ShinkaEvolve run settings are not read (revtree's own options set "
        "the budget, parallelism, seed and models); the file stays out of the repository"
        for name in ignored
    ]
    return spec_from_dict(data, evaluator), warnings
