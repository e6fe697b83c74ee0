"""Loaders for task folders of other systems: OpenEvolve and ShinkaEvolve, unchanged.

Each maps a folder onto a :class:`~revtree.tasks.spec.TaskSpec` whose evaluation runs a
small generated runner (in ``support_files``) that calls the folder's own evaluator and
reports revtree metrics. Each returns a :class:`Loaded`: the spec, warnings naming what
it did not carry over, and what it mapped. :func:`load_compat` picks the loader by the
files present.
"""

from __future__ import annotations

from pathlib import Path

from revtree.tasks.compat._common import CompatNote, Loaded
from revtree.tasks.compat.openevolve import is_openevolve, load_openevolve
from revtree.tasks.compat.shinka import is_shinka, load_shinka

__all__ = ["CompatNote", "Loaded", "load_compat", "load_openevolve", "load_shinka"]


def load_compat(folder: Path) -> Loaded | None:
    """The task and warnings of an OpenEvolve or ShinkaEvolve folder; None for neither."""
    if is_openevolve(folder):
        return load_openevolve(folder)
    if is_shinka(folder):
        return load_shinka(folder)
    return None
