"""Task specifications: the ``task.toml`` format, its validation and loading."""

from revtree.tasks.load import code_files, holdout_files, knob_regex, load_task, matches
from revtree.tasks.spec import Knob, TaskSpec, parse_duration, parse_size

__all__ = [
    "Knob",
    "TaskSpec",
    "code_files",
    "holdout_files",
    "knob_regex",
    "load_task",
    "matches",
    "parse_duration",
    "parse_size",
]
