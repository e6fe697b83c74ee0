"""Parse an LLM's edits and apply them safely.

Answers are read by ``revtree.agents.parsing.scan_edits``: SEARCH/REPLACE blocks (with
or without a file name), unified diffs, whole files, and mixtures, after any reasoning
draft is dropped. The documented forms are::

    path/to/file.py
    <<<<<<< SEARCH
    exact lines to find
    =======
    lines to put instead
    >>>>>>> REPLACE

    === FILE: path/to/file.py ===
    ```python
    the complete new content
    ```

An edit that names no file goes to the only editable file, or to the one editable file
its SEARCH text matches (the file of the block before it first); otherwise it is refused.
A SEARCH text is found by a ladder: exact, then ignoring trailing white space, then with
a consistent leading-indentation offset (the replacement is shifted alike), then a unique
fuzzy match (difflib ratio at least ``FUZZY``). Two equally good places are refused as
ambiguous; a diff hunk's line number breaks the tie.

Guarantees: an edit to a path outside the editable globs is refused; where a file
has ``EVOLVE-BLOCK-START`` / ``EVOLVE-BLOCK-END`` markers, only text between them may
change. This is checked on the whole file before and after each edit, not on the edit's
text: a SEARCH text or diff hunk may quote marker lines (as context) and keep them, but
the file's marker lines, in order, and everything outside the regions must stay
byte-identical, so a marker added, removed or moved, or a change outside the regions, is
refused. A file with CRLF line endings keeps them. Every refusal is an ``EditError``
whose message names the edit and the file, written to be shown back to the model.
Not guaranteed: that a fuzzy match is the place the model meant (it is unique and close).
"""

from __future__ import annotations

import difflib
import io
import posixpath
import re
import tokenize
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from revtree.agents.parsing import Edit, scan_edits
from revtree.errors import EditError
from revtree.tasks.names import matches

__all__ = ["END", "FUZZY", "START", "Edit", "apply_edits", "evolve_regions", "parse_edits"]

START, END = "EVOLVE-BLOCK-START", "EVOLVE-BLOCK-END"
FUZZY = 0.9
_ELIDED = re.compile(
    r"^[ \t]*(?:#|//|--|/\*)[ \t]*(?:\.\.\.|…|\(?(?:the )?rest of|(?:unchanged|existing) code)",
    re.M | re.I,
)


def parse_edits(answer: str, allow_blocks: bool = True, allow_files: bool = True) -> list[Edit]:
    """The edits in an answer, in order. Raises EditError if there are none."""
    return scan_edits(answer, allow_blocks, allow_files)


def evolve_regions(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans strictly between START and END marker lines."""
    regions, start = [], None
    pos = 0
    for line in text.splitlines(keepends=True):
        if START in line and start is None:
            start = pos + len(line)
        elif END in line and start is not None:
            regions.append((start, pos))
            start = None
        pos += len(line)
    return regions


def _outside(text: str, regions: list[tuple[int, int]]) -> list[str]:
    out, last = [], 0
    for a, b in regions:
        out.append(text[last:a])
        last = b
    out.append(text[last:])
    return out


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    line: int  # 1-based first line
    indent: tuple[str, str] | None = None  # (SEARCH's, file's) common indentation
    score: float = 1.0


class _Ambiguous(Exception):
    def __init__(self, spans: list[_Span], how: str) -> None:
        self.spans, self.how = spans, how


def _indent(lines: list[str]) -> str:
    ws = [ln[: len(ln) - len(ln.lstrip())] for ln in lines if ln.strip()]
    return posixpath.commonprefix(ws) if ws else ""


def _trim(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


class _Text:
    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.offsets = [0]
        for ln in self.lines:
            self.offsets.append(self.offsets[-1] + len(ln))

    def line_of(self, pos: int) -> int:
        return next(i for i, off in enumerate(self.offsets) if off > pos) if pos else 1

    def span(self, i: int, n: int, **kw: object) -> _Span:
        return _Span(self.offsets[i], self.offsets[i + n], i + 1, **kw)  # type: ignore[arg-type]


def locate(text: str, search: str, line: int | None = None) -> tuple[_Span, str] | None:
    """Where ``search`` stands in ``text`` and by which rung of the ladder, or None.

    Raises _Ambiguous when the best rung finds several places equally good."""
    t = _Text(text)
    want = _trim(search.splitlines(keepends=True))
    rungs = (
        ("exactly", lambda: _exact(t, search)),
        ("ignoring trailing white space", lambda: _lines(t, want, False)),
        ("with its indentation shifted", lambda: _lines(t, want, True)),
        ("approximately", lambda: _fuzzy(t, want)),
    )
    exact = rungs[0][1]()
    aligned = [s for s in exact if s.start in t.offsets]
    if aligned or (exact and not search.endswith("\n")):
        return _pick(aligned or exact, line, "exactly"), "exactly"
    for how, rung in rungs[1:]:
        spans = rung() if want else []
        if spans:
            return _pick(spans, line, how), how
    return (_pick(exact, line, "exactly"), "exactly") if exact else None


def _pick(spans: list[_Span], line: int | None, how: str) -> _Span:
    best = max(s.score for s in spans)
    top = [s for s in spans if s.score >= best - 1e-9]
    if len(top) > 1 and line is not None:
        dist = sorted(abs(s.line - line) for s in top)
        if dist[0] < dist[1]:
            return min(top, key=lambda s: abs(s.line - line))
    if len(top) > 1:
        raise _Ambiguous(top, how)
    return top[0]


def _exact(t: _Text, search: str) -> list[_Span]:
    spans, at = [], t.text.find(search)
    while at >= 0 and search:
        spans.append(_Span(at, at + len(search), t.line_of(at)))
        at = t.text.find(search, at + 1)
    return spans


def _lines(t: _Text, want: list[str], shift: bool) -> list[_Span]:
    def key(lines: list[str]) -> list[str]:
        cut = len(_indent(lines)) if shift else 0
        return [ln[cut:].rstrip() if ln.strip() else "" for ln in lines]

    target, n, spans = key(want), len(want), []
    for i in range(len(t.lines) - n + 1):
        window = t.lines[i : i + n]
        if key(window) == target:
            spans.append(t.span(i, n, indent=(_indent(want), _indent(window)) if shift else None))
    return spans


def _fuzzy(t: _Text, want: list[str]) -> list[_Span]:
    target = "\n".join(ln.strip() for ln in want)
    n, found = len(want), []
    for size in sorted({max(n - 1, 1), n, n + 1}):
        for i in range(len(t.lines) - size + 1):
            window = t.lines[i : i + size]
            m = difflib.SequenceMatcher(None, target, "\n".join(ln.strip() for ln in window))
            if m.real_quick_ratio() < FUZZY or m.quick_ratio() < FUZZY:
                continue
            score = m.ratio()
            if score >= FUZZY:
                found.append(t.span(i, size, indent=(_indent(want), _indent(window)), score=score))
    if not found:
        return []
    best = max(found, key=lambda s: s.score)
    rivals = [s for s in found if s.end <= best.start or s.start >= best.end]
    return [best] + [s for s in rivals if s.score >= best.score - 1e-9]


def _reindent(replace: str, indent: tuple[str, str] | None) -> str:
    if indent is None or indent[0] == indent[1]:
        return replace
    old, new = indent
    out = []
    for ln in replace.splitlines(keepends=True):
        if not ln.strip():
            out.append(ln.lstrip(" \t"))
        elif ln.startswith(old):
            out.append(new + ln[len(old) :])
        else:
            out.append(new + ln.lstrip(" \t"))
    return "".join(out)


def apply_edits(
    edits: Iterable[Edit], files: Mapping[str, bytes], editable: Iterable[str]
) -> dict[str, bytes]:
    """The changed files after applying ``edits`` to ``files`` (path -> new content).

    A file whose every line ends in CRLF is edited with LF endings and written back with
    CRLF, so edits (read with LF endings) match it and keep its endings."""
    editable = tuple(editable)
    texts: dict[str, str] = {}
    crlf: set[str] = set()
    for e in edits:
        path = e.path if e.path is not None else _infer(e, files, texts, editable)
        where = f"edit {e.index} ({path})"
        if ".." in path.split("/") or path.startswith("/"):
            raise EditError(f"{where}: the path must be relative, inside the project")
        if posixpath.normpath(path) != path or "\\" in path:
            raise EditError(f"{where}: write the path plainly, as {posixpath.normpath(path)!r}")
        if not matches(path, editable):
            raise EditError(f"{where}: {path!r} is not editable; editable files: {list(editable)}")
        old = texts[path] if path in texts else _decode(files, path, where)
        if path not in texts and old is not None and _all_crlf(old):
            crlf.add(path)
            old = old.replace("\r\n", "\n")
        texts[path] = _apply_one(e, path, old, where)
    out = {p: (t.replace("\n", "\r\n") if p in crlf else t).encode() for p, t in texts.items()}
    return {p: b for p, b in out.items() if files.get(p) != b}


def _all_crlf(text: str) -> bool:
    return "\r\n" in text and text.count("\n") == text.count("\r\n")


def _decode(files: Mapping[str, bytes], path: str, where: str) -> str | None:
    if path not in files:
        return None
    try:
        return files[path].decode("utf-8")
    except UnicodeDecodeError as err:
        raise EditError(f"{where}: {path!r} is not a text file") from err


def _infer(
    e: Edit, files: Mapping[str, bytes], texts: dict[str, str], editable: tuple[str, ...]
) -> str:
    """The file an edit that names none is for (see the module docstring)."""
    current: dict[str, str] = {}
    for p in sorted(set(files) | set(texts)):
        if matches(p, editable):
            text = texts[p] if p in texts else _decode_or_none(files[p])
            if text is not None:
                current[p] = text
    what = "a whole-file code block" if e.search is None else f"edit {e.index}"
    if e.search is None or not e.search.strip():
        if len(current) == 1:
            return next(iter(current))
        raise EditError(
            f"{what} names no file, and {len(current)} files are editable "
            f"({', '.join(current) or 'none exist'}); put the file path on the line before it"
        )
    ranks = {p: r for p, t in current.items() if (r := _rank(t, e.search)) is not None}
    if e.hint in ranks and ranks[e.hint] <= min(ranks.values()):
        return e.hint
    best = [p for p, r in ranks.items() if r == min(ranks.values(), default=None)]
    if len(best) == 1:
        return best[0]
    if len(current) == 1:
        return next(iter(current))
    if best:
        raise EditError(
            f"{what} names no file, and its SEARCH text matches several editable files "
            f"({', '.join(best)}); put the file path on the line before '<<<<<<< SEARCH'"
        )
    elsewhere = [p for p in sorted(files) if p not in current and _rank_bytes(files[p], e.search)]
    if elsewhere:
        raise EditError(
            f"{what} names no file, and its SEARCH text is found only in "
            f"{', '.join(map(repr, elsewhere))}, which is not editable; "
            f"editable files: {list(editable)}"
        )
    raise EditError(
        f"{what} names no file, and its SEARCH text matches none of the editable files "
        f"({', '.join(current)}); name the file and copy the lines verbatim"
    )


def _decode_or_none(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _rank(text: str, search: str) -> int | None:
    """0-3: the rung of the ladder at which ``search`` is found in ``text`` (None: nowhere)."""
    try:
        found = locate(text, search)
    except _Ambiguous as a:
        return _RUNGS.index(a.how)
    return None if found is None else _RUNGS.index(found[1])


def _rank_bytes(data: bytes, search: str) -> bool:
    text = _decode_or_none(data)
    return text is not None and _rank(text, search) in (0, 1, 2)


_RUNGS = (
    "exactly",
    "ignoring trailing white space",
    "with its indentation shifted",
    "approximately",
)


def _apply_one(e: Edit, path: str, old: str | None, where: str) -> str:
    regions = evolve_regions(old) if old else []
    if e.search is None:
        return _rewrite(e, old, regions, where)
    if old is None or not e.search.strip():
        if old:
            raise EditError(
                f"{where}: an empty SEARCH only creates a new file, and "
                f"{path!r} exists; quote the lines to replace"
            )
        return e.replace
    try:
        found = locate(old, e.search, e.line)
    except _Ambiguous as a:
        lines = ", ".join(str(s.line) for s in a.spans[:5])
        raise EditError(
            f"{where}: the SEARCH text is ambiguous: it matches {len(a.spans)} places in "
            f"{path!r} equally well ({a.how}; at lines {lines}); quote more lines so that "
            "it matches one place only"
        ) from None
    if found is None:
        first = e.search.strip().splitlines()[0][:80]
        raise EditError(
            f"{where}: the SEARCH text does not match {path!r} exactly "
            f"(it starts {first!r}); copy the lines verbatim from the file"
        )
    span = found[0]
    replace = _reindent(e.replace, span.indent)
    if span.indent is not None and not replace.endswith("\n") and replace:
        replace += "\n"
    if found[1] == "approximately":
        replace = _merge(e.search, old[span.start : span.end], replace)
    new = old[: span.start] + replace + old[span.end :]
    return _in_regions(old, new, regions, f"{where}: the edit")


def _merge(search: str, window: str, replace: str) -> str:
    """``replace`` applied to ``window`` by context: lines the edit keeps from its (stale)
    SEARCH text are taken from the file, only the lines it changes are replaced."""
    want, have = _trim(search.splitlines(keepends=True)), window.splitlines(keepends=True)
    new = replace.splitlines(keepends=True)

    def norm(lines: list[str]) -> list[str]:
        return [" ".join(ln.split()) for ln in lines]

    blocks = difflib.SequenceMatcher(None, norm(want), norm(have), autojunk=False)

    def pos(i: int) -> int:
        prev_a = prev_b = 0
        for a, b, size in blocks.get_matching_blocks():
            if i < a:
                return min(prev_b + (i - prev_a), b)
            if i <= a + size:
                return b + (i - a)
            prev_a, prev_b = a + size, b + size
        return len(have)

    out: list[str] = []
    ops = difflib.SequenceMatcher(None, norm(want), norm(new), autojunk=False).get_opcodes()
    for tag, i1, i2, j1, j2 in ops:
        out += have[pos(i1) : pos(i2)] if tag == "equal" else new[j1:j2]
    return "".join(out)


def _rewrite(e: Edit, old: str | None, regions: list[tuple[int, int]], where: str) -> str:
    new = e.replace
    if e.path is None and old is not None and _ELIDED.search(new) and not _ELIDED.search(old):
        raise EditError(
            f"{where}: the code block leaves code out ('...', 'rest unchanged'); write the "
            "whole file, or change it with SEARCH/REPLACE blocks"
        )
    return _in_regions(old or "", new, regions, f"{where}: the rewrite")


def _markers(text: str) -> list[tuple[int, str]]:
    """(line index, line) of each line holding an EVOLVE-BLOCK marker."""
    lines = text.splitlines(keepends=True)
    return [(i, ln) for i, ln in enumerate(lines) if START in ln or END in ln]


def _in_regions(old: str, new: str, regions: list[tuple[int, int]], what: str) -> str:
    """``new``, if it differs from ``old`` only between the EVOLVE-BLOCK markers: the
    marker lines of the whole file, in order, and all text around the regions are kept.
    A marker line the edit copies with other white space is put back as the file has it.
    """
    if not regions:
        return new
    before, after = _markers(old), _markers(new)
    if [ln.strip() for _, ln in before] != [ln.strip() for _, ln in after]:
        raise EditError(
            f"{what} adds, removes or changes an EVOLVE-BLOCK marker line; keep every "
            "marker line as it is: only code between the markers may change"
        )
    lines = new.splitlines(keepends=True)
    for (_, kept), (i, line) in zip(before, after, strict=True):
        ending = line[len(line.rstrip("\r\n")) :]
        lines[i] = kept if kept.endswith("\n") and ending else kept.rstrip("\r\n") + ending
    new = "".join(lines)
    was, now = _comment_rows(old), _comment_rows(new)
    pairs = zip(before, after, strict=True)  # same markers, in order (checked above)
    if any(a + 1 in was and b + 1 not in now for (a, _), (b, _) in pairs):
        raise EditError(  # e.g. a string opened in the region swallows the code after it
            f"{what} turns an EVOLVE-BLOCK marker line into string text (a string left "
            "open in the region swallows the code after it); close it inside the region"
        )
    if _outside(new, evolve_regions(new)) == _outside(old, regions):
        return new
    raise EditError(
        f"{what} moves an EVOLVE-BLOCK marker; keep every marker line where it is"
        if _crossed(old, new)
        else f"{what} changes text outside the EVOLVE-BLOCK regions; only code between "
        "the markers may change"
    )


def _comment_rows(text: str) -> set[int]:
    """The rows (1-based) where Python's tokenizer reads a comment, up to where it stops."""
    rows: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                rows.add(tok.start[0])
    except (tokenize.TokenError, SyntaxError):
        pass
    return rows


def _crossed(old: str, new: str) -> bool:
    """Whether the text around the regions changed only by lines that are inside a region
    in the other version: a marker moved over them."""

    def lines(parts: Iterable[str]) -> Counter[str]:
        return Counter(
            ln.rstrip("\r\n")
            for ln in "".join(parts).splitlines()
            if START not in ln and END not in ln
        )

    def inside(text: str) -> Counter[str]:
        return lines(text[a:b] for a, b in evolve_regions(text))

    def around(text: str) -> Counter[str]:
        return lines(_outside(text, evolve_regions(text)))

    changed = (around(old) - around(new)) + (around(new) - around(old))
    return bool(changed) and not changed - (inside(old) | inside(new))
