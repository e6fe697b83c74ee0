"""``git diff`` of text files changed in place, made in-process.

``GitStore.diff`` asks here first and starts ``git diff`` only where this says None: a
file added, deleted or of a changed mode, a symbolic link, a file git reads as binary
(a NUL byte in its first 8,000) or that is not UTF-8, or a path git would quote. What
comes out is git's format with git's defaults (three lines of context, hunks that are
at most six lines apart merged, the ``\\ No newline at end of file`` marker, the hunk
header's function line: the nearest line above the hunk that starts with a letter,
``_`` or ``$``, cut at 80 bytes), so ``git apply`` takes it. The hunks are difflib's
matching, not git's Myers diff: where a change could be aligned two ways the lines may
be grouped otherwise, never a different change. The common head and tail of a file are
set aside before difflib weighs the rest, and a changed middle that would cost it more
than ``MATCH_MAX`` line comparisons (about 70 lines against 70) goes to git: difflib's
worst case grows as the cube of that middle (a rewritten data file of a few hundred
lines would take it seconds), git's Myers diff does not. Object
ids in the ``index`` line are cut to 7 hex digits, git's shortest. Why: one ``git``
process per candidate (its review reads the diff) cost about 3 ms of each candidate's
path.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Sequence
from typing import AnyStr, cast

CONTEXT = 3  # lines of context around a change, as git's default
BINARY_PROBE = 8000  # bytes git looks at for a NUL to call a file binary
FUNC_BYTES = 80  # of the hunk header's function line, at most (git's buffer)
ABBREV = 7  # hex digits of an object id in the index line
# line pairs difflib may weigh in a file's changed middle; past it, git: difflib's worst
# case (repeated lines) grows as the cube, about 2 ms at this size, seconds at 250,000
MATCH_MAX = 5_000
PLAIN_PATH = re.compile(r"[A-Za-z0-9._+/-]+")  # a path git never quotes
NO_NEWLINE = "\\ No newline at end of file\n"


def binary(data: bytes) -> bool:
    """Whether git reads ``data`` as binary (a NUL in its first 8,000 bytes)."""
    return b"\0" in data[:BINARY_PROBE]


def git_lines(data: AnyStr) -> list[AnyStr]:
    """``data``'s lines as git splits them: at ``\n`` only, the last kept without one."""
    newline = cast(AnyStr, b"\n" if isinstance(data, bytes) else "\n")
    parts = data.split(newline)
    last = parts.pop()
    return [p + newline for p in parts] + ([last] if last else [])


def text_of(data: bytes) -> str | None:
    """``data`` as text where git reads it as text and it is UTF-8, else None."""
    if binary(data):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def file_diff(path: str, old: str, new: str, ids: tuple[str, str], mode: int) -> str | None:
    """The ``git diff`` of one file changed in place (``ids``: its old and new blob ids,
    in hex), or None where this cannot say it as git would."""
    if not PLAIN_PATH.fullmatch(path) or path.startswith("/") or "//" in path:
        return None
    a, b = git_lines(old), git_lines(new)
    out = [
        f"diff --git a/{path} b/{path}\n",
        f"index {ids[0][:ABBREV]}..{ids[1][:ABBREV]} {mode:o}\n",
        f"--- a/{path}\n",
        f"+++ b/{path}\n",
    ]
    codes = opcodes(a, b)
    if codes is None:
        return None
    for group in _grouped(codes, CONTEXT):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        func = _func_line(a, i1)
        if func is None:
            return None
        out.append(f"@@ -{_range(i1, i2)} +{_range(j1, j2)} @@{func}\n")
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                out.extend(_marked(" ", a[x1:x2]))
                continue
            out.extend(_marked("-", a[x1:x2]))
            out.extend(_marked("+", b[y1:y2]))
    return "".join(out)


Opcode = tuple[str, int, int, int, int]  # difflib's: (tag, i1, i2, j1, j2)


def opcodes(x: Sequence[object], y: Sequence[object]) -> list[Opcode] | None:
    """difflib's opcodes from ``x`` to ``y``, their common head and tail set aside
    first; None where the rest would cost difflib more than ``MATCH_MAX`` comparisons."""
    head = 0
    while head < min(len(x), len(y)) and x[head] == y[head]:
        head += 1
    tail = 0
    while tail < min(len(x), len(y)) - head and x[-1 - tail] == y[-1 - tail]:
        tail += 1
    mid_x, mid_y = x[head : len(x) - tail], y[head : len(y) - tail]
    if len(mid_x) * len(mid_y) > MATCH_MAX:
        return None
    codes: list[Opcode] = [("equal", 0, head, 0, head)] if head else []
    if mid_x or mid_y:
        matcher = difflib.SequenceMatcher(None, mid_x, mid_y, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            codes.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        codes.append(("equal", len(x) - tail, len(x), len(y) - tail, len(y)))
    return codes


def _grouped(codes: list[Opcode], n: int) -> Iterator[list[Opcode]]:
    """The opcodes in hunks, as unified diffs cut them: ``n`` lines of context around
    each change, and changes at most ``2 n`` lines apart in one hunk."""
    group: list[Opcode] = []
    for k, (tag, i1, i2, j1, j2) in enumerate(codes):
        if tag != "equal":
            group.append((tag, i1, i2, j1, j2))
            continue
        if k == 0:  # the context before the first change
            group.append((tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2))
        elif k == len(codes) - 1 or i2 - i1 > 2 * n:  # the hunk ends here
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = [(tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2)] if k < len(codes) - 1 else []
        else:
            group.append((tag, i1, i2, j1, j2))
    if any(code[0] != "equal" for code in group):
        yield group


def _marked(sign: str, lines: list[str]) -> Iterator[str]:
    for line in lines:
        yield sign + line if line.endswith("\n") else f"{sign}{line}\n{NO_NEWLINE}"


def _range(start: int, stop: int) -> str:
    """A hunk's range as unified diffs write it (``start`` 0-based)."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if length == 0 else start + 1},{length}"


def _func_line(lines: list[str], first: int) -> str | None:
    """Git's default function line for a hunk whose first line is ``first``: the
    nearest line above it that starts with a letter, ``_`` or ``$``, cut at 80 bytes
    and stripped of trailing white space; "" where none, None where the cut splits a
    character (git would print part of it)."""
    for line in reversed(lines[:first]):
        if line[:1].isascii() and (line[:1].isalpha() or line[:1] in "_$"):
            cut = line.rstrip("\n").encode("utf-8")[:FUNC_BYTES].rstrip(b" \t\n\r")
            try:
                return " " + cut.decode("utf-8")
            except UnicodeDecodeError:
                return None
    return ""
