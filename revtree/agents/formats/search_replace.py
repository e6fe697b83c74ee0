"""SEARCH/REPLACE blocks (Aider's ``diff`` format): exact lines copied from the file, then
the lines to put instead; typed as ``edit_file(path, search, replace)`` calls."""

from __future__ import annotations

from revtree.agents.formats.base import EditFormat
from revtree.agents.structured import EDIT_FILE


class SearchReplace(EditFormat):
    name = "search_replace"
    help = (
        "Write each change as a SEARCH/REPLACE block: the file path alone on a line, then\n"
        "<<<<<<< SEARCH\nexact, contiguous lines copied from the current file\n=======\n"
        "the lines to put instead\n>>>>>>> REPLACE\n"
        "Use several blocks for several places or files. Keep SEARCH parts short but unique."
    )
    tools = (EDIT_FILE,)
    files = False
