"""Whole files: each changed file written out complete; typed as ``write_file(path,
content)`` calls."""

from __future__ import annotations

from revtree.agents.formats.base import EditFormat
from revtree.agents.structured import WRITE_FILE


class WholeFile(EditFormat):
    name = "whole_file"
    help = (
        "Write each changed file whole: a line '=== FILE: path/to/file ===' then the complete\n"
        "new content in one fenced code block (```)."
    )
    tools = (WRITE_FILE,)
    blocks = False
