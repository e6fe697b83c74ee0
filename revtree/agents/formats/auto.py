"""Either form (the default): SEARCH/REPLACE blocks, or a whole file for a file rewritten
entirely; both tools offered."""

from __future__ import annotations

from revtree.agents.formats.base import EditFormat
from revtree.agents.formats.search_replace import SearchReplace
from revtree.agents.formats.whole_file import WholeFile


class Auto(EditFormat):
    name = "auto"
    help = (
        SearchReplace.help + "\nFor a file you rewrite entirely you "
        "may instead use the whole-file form:\n" + WholeFile.help
    )
    tools = SearchReplace.tools + WholeFile.tools
