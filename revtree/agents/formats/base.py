"""What an edit format is: how the coder is told to write its changes, and how they are
read back, as text and as tool calls.

An edit format is a class built with no arguments (``Class()``), one module each:
``name``, the ``help`` put into the coder's prompt for ``${edit_format_help}`` (plain
text answers), the ``tools`` offered where the coder's model is asked for structured
answers (with ``tools_help`` in place of ``help``), ``parse`` (an answer's text to
edits) and ``edit_of`` (one call of one of its tools to an edit).

Guaranteed: whatever a format returns goes through ``revtree.agents.edits.apply_edits``
like every other edit (editable globs, EVOLVE-BLOCK regions, fuzzy matching); a format
cannot widen what the coder may change. Not guaranteed: that ``parse`` reads any dialect
but its own (the built-ins read every common one, see ``revtree.agents.parsing``).
"""

from __future__ import annotations

from typing import ClassVar

from revtree.agents.edits import Edit, parse_edits
from revtree.agents.llm.base import Tool, ToolCall
from revtree.agents.structured import TOOLS_HELP, read_edit_call


class EditFormat:
    """The built-in formats' common ground; a plugin may inherit it. ``parse`` reads
    every dialect ``parse_edits`` knows, SEARCH/REPLACE-like ones where ``blocks`` and
    whole files where ``files``; ``edit_of`` reads the built-in ``edit_file`` and
    ``write_file`` calls. Both raise ``EditError`` saying what was wrong."""

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""
    tools: ClassVar[tuple[Tool, ...]] = ()
    tools_help: ClassVar[str] = TOOLS_HELP
    blocks: ClassVar[bool] = True
    files: ClassVar[bool] = True

    def parse(self, answer: str) -> list[Edit]:
        """The edits written in an answer's text, in order (at least one)."""
        return parse_edits(answer, allow_blocks=self.blocks, allow_files=self.files)

    def edit_of(self, call: ToolCall, index: int) -> Edit:
        """The edit of ``call``, the ``index``-th call of the answer (one of ``tools``)."""
        return read_edit_call(call, index)
