"""The edit formats, found by name: one module each, holding an ``EditFormat`` class.

A name is a built-in (:data:`BUILTIN`), an import path (``package.module:Class``) or an
entry point of the group ``revtree.edit_formats``: resolved by
``revtree.tasks.plugins.resolve_edit_format``, the code that validates
``[agents] edit_format`` when a task loads.
"""

from __future__ import annotations

import importlib

from revtree.agents.formats.base import EditFormat

BUILTIN = {
    "auto": "revtree.agents.formats.auto:Auto",
    "search_replace": "revtree.agents.formats.search_replace:SearchReplace",
    "whole_file": "revtree.agents.formats.whole_file:WholeFile",
}
"""Built-in edit format name -> its class."""

__all__ = ["BUILTIN", "EditFormat", "make_format"]


def make_format(name: str) -> EditFormat:
    """The edit format ``name`` names, built. Raises ValueError (one line) where the name
    does not resolve."""
    if name in BUILTIN:
        module, _, attr = BUILTIN[name].partition(":")
        klass = getattr(importlib.import_module(module), attr)
    else:
        from revtree.tasks.plugins import resolve_edit_format

        klass = resolve_edit_format(name)
    built: EditFormat = klass()
    return built
