"""Knob values as text: reading them from a revision's files and writing new ones in.

No Optuna here (its import is a third of a second): a run that reads its baseline's
knobs, and an LLM run that derives seeds, load this module alone; ``knobs`` holds the
proposer and its study.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from revtree.agents.base import Job, Proposal, Refusal
from revtree.errors import EditError
from revtree.tasks.load import knob_regex
from revtree.tasks.spec import Knob


def derive_seed(seed: int, *parts: object) -> int:
    digest = hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:4], "little")


def read_knobs(knobs: Iterable[Knob], files: Mapping[str, bytes]) -> dict[str, Any]:
    """The knob values as they stand in ``files`` (unparsable ones are left out)."""
    values: dict[str, Any] = {}
    for knob in knobs:
        text = files.get(knob.file, b"").decode("utf-8", errors="replace")
        match = knob_regex(knob).search(text)
        if match is None:
            continue
        try:
            values[knob.name] = _parse(knob, match.group(1))
        except (ValueError, SyntaxError):
            continue
    return values


def _parse(knob: Knob, raw: str) -> Any:
    value = ast.literal_eval(raw) if knob.pattern is None or knob.type != "categorical" else raw
    if knob.type == "int":
        return int(value)
    if knob.type == "float":
        return float(value)
    return value


def _same(knob: Knob, raw: str, value: Any) -> bool:
    """Whether the text ``raw`` already holds ``value`` (parsed values compared, so that
    ``"a"`` and ``'a'``, or ``1e-3`` and ``0.001``, are the same value)."""
    try:
        current = _parse(knob, raw)
    except (ValueError, SyntaxError, TypeError):
        return False
    if knob.type == "categorical" and type(current) is not type(value):
        return False  # 1 is not True, nor 1.0
    return bool(current == value)


def _literal(knob: Knob, value: Any, old: str = "") -> str:
    """``value`` as the text of the knob's value; a string in ``old``'s quotes."""
    if knob.type == "int":
        return str(int(value))
    if knob.type == "float":
        return repr(float(value))
    if knob.pattern is not None:
        return str(value)
    if isinstance(value, str):
        return _quoted(value, '"' if old.lstrip("rRbBuUfF").startswith('"') else "'")
    return repr(value)


def _quoted(value: str, quote: str) -> str:
    """A Python string literal of ``value`` in ``quote`` (``'`` or ``"``)."""
    text = repr(value)
    if text[0] == quote:
        return text
    # repr chose the other quote, inside which ``quote`` is never escaped: escape it (an
    # escaped other quote, \' within "...", stays valid)
    return quote + text[1:-1].replace(quote, "\\" + quote) + quote


class KnobCoder:
    """Writes knob values into the files that hold them. A value that the file already
    holds leaves its text as it is; a new string keeps the quotes of the old one."""

    def __init__(self, knobs: Iterable[Knob]) -> None:
        self.knobs = {k.name: k for k in knobs}

    repairs = 0  # a refused knob edit cannot be repaired: the same values fail again

    def code(
        self, job: Job, proposal: Proposal, refusal: Refusal | None = None
    ) -> dict[str, bytes | None]:
        return self.write(proposal, job.files)

    def write(self, proposal: Proposal, files: Mapping[str, bytes]) -> dict[str, bytes | None]:
        """The knob values of ``proposal`` written into ``files``."""
        texts: dict[str, str] = {}
        for name, value in proposal.knobs.items():
            knob = self.knobs.get(name)
            if knob is None:
                raise EditError(f"unknown knob {name!r}")
            if knob.file not in files and knob.file not in texts:
                raise EditError(f"knob {name!r}: file {knob.file!r} is not in the parent revision")
            text = texts[knob.file] if knob.file in texts else _decode(name, knob, files)
            match = knob_regex(knob).search(text)
            if match is None:
                raise EditError(f"knob {name!r}: its location is gone from {knob.file}")
            old = match.group(1)
            if not _same(knob, old, value):
                new = _literal(knob, value, old)
                text = (
                    text[: match.start(1)]
                    + new
                    + _aligned(text[match.end(1) :], len(old) - len(new))
                )
            texts[knob.file] = text
        return {
            path: text.encode("utf-8")
            for path, text in texts.items()
            if text.encode("utf-8") != files.get(path)
        }


def _aligned(rest: str, shift: int) -> str:
    """The text after a replaced value, with the spaces before a comment on the same line
    widened or narrowed by ``shift`` (two at least, or the one there was), so that the
    comment stays in its column when the value's text changes length."""
    gap = re.match(r"([ \t]*)(#)", rest)
    if gap is None or shift == 0 or "\t" in gap.group(1) or not gap.group(1):
        return rest
    floor = min(len(gap.group(1)), 2)  # PEP 8's two spaces, where the user had them
    return " " * max(len(gap.group(1)) + shift, floor) + rest[len(gap.group(1)) :]


def _decode(name: str, knob: Knob, files: Mapping[str, bytes]) -> str:
    try:
        return files[knob.file].decode("utf-8")
    except UnicodeDecodeError as e:
        raise EditError(
            f"knob {name!r}: file {knob.file!r} is not UTF-8 text (byte {e.start}: "
            f"{e.reason}); save it as UTF-8"
        ) from None
