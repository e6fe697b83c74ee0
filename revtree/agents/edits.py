"""Parse an LLM's edits and apply them safely.

Two formats are understood:

SEARCH/REPLACE blocks, any number, across any editable files::

    path/to/file.py
    <<<<<<< SEARCH
    exact lines to find
    =======
    lines to put instead
    >>>>>>> REPLACE

Whole files::

    === FILE: path/to/file.py ===
    ```python
    the complete new content
    ```

Guarantees: an edit to a path outside the editable globs is refused; where a file
has ``EVOLVE-BLOCK-START`` / ``EVOLVE-BLOCK-END`` markers, only text between them may
change (a SEARCH span must lie inside one block, and a whole-file rewrite must keep
everything outside the blocks byte-identical). Every refusal is an ``EditError``
whose message names the block and the file, written to be shown back to the model.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from revtree.errors import EditError
from revtree.tasks.load import matches

START, END = "EVOLVE-BLOCK-START", "EVOLVE-BLOCK-END"
_BLOCK = re.compile(
    r"^(?P<path>[^\n]*)\n(?:```[^\n]*\n)?<{5,9} SEARCH[^\n]*\n(?P<search>.*?)^={5,9}[ \t]*\n"
    r"(?P<replace>.*?)^>{5,9} REPLACE[^\n]*$",
    re.M | re.S,
)
_FILE = re.compile(
    r"^=== FILE: (?P<path>.+?) ===[ \t]*\n```[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S
)


@dataclass(frozen=True)
class Edit:
    path: str
    search: str | None  # None: whole-file rewrite
    replace: str
    index: int


def _clean_path(raw: str) -> str:
    path = raw.strip().strip("`*").strip()
    for prefix in ("File:", "file:", "Path:", "path:", "#"):
        path = path.removeprefix(prefix).strip()
    return path.removeprefix("./")


def parse_edits(answer: str, allow_blocks: bool = True, allow_files: bool = True) -> list[Edit]:
    """The edits in an answer, in order. Raises EditError if there are none."""
    edits: list[tuple[int, Edit]] = []
    if allow_blocks:
        for m in _BLOCK.finditer(answer):
            path = _clean_path(m.group("path"))
            if not path:
                raise EditError(
                    f"SEARCH block at character {m.start()} names no file on the "
                    "line before '<<<<<<< SEARCH'"
                )
            edits.append((m.start(), Edit(path, m.group("search"), m.group("replace"), 0)))
    if allow_files:
        for m in _FILE.finditer(answer):
            edits.append((m.start(), Edit(_clean_path(m.group("path")), None, m.group("body"), 0)))
    if not edits:
        if not answer.strip():
            raise EditError("the answer is empty")
        formats = " or ".join(
            f
            for f, ok in (
                ("SEARCH/REPLACE blocks", allow_blocks),
                ("'=== FILE: path ===' blocks", allow_files),
            )
            if ok
        )
        if "<<<<<<< SEARCH" in answer or "=== FILE:" in answer:
            raise EditError(f"malformed edit blocks: expected {formats} exactly as specified")
        raise EditError(f"no edits found: expected {formats}")
    edits.sort(key=lambda e: e[0])
    return [Edit(e.path, e.search, e.replace, i + 1) for i, (_, e) in enumerate(edits)]


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


def _find(text: str, search: str) -> tuple[int, int] | None:
    at = text.find(search)
    if at >= 0:
        return at, at + len(search)
    # tolerate trailing white space differences, line by line
    want = [ln.rstrip() for ln in search.splitlines()]
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    for i in range(len(lines) - len(want) + 1):
        if want and [ln.rstrip() for ln in lines[i : i + len(want)]] == want:
            return offsets[i], offsets[i + len(want)]
    return None


def apply_edits(
    edits: Iterable[Edit], files: Mapping[str, bytes], editable: Iterable[str]
) -> dict[str, bytes]:
    """The changed files after applying ``edits`` to ``files`` (path -> new content)."""
    editable = tuple(editable)
    texts: dict[str, str] = {}
    for e in edits:
        where = f"edit {e.index} ({e.path})"
        if ".." in e.path.split("/") or e.path.startswith("/"):
            raise EditError(f"{where}: the path must be relative, inside the project")
        if posixpath.normpath(e.path) != e.path or "\\" in e.path:
            raise EditError(f"{where}: write the path plainly, as {posixpath.normpath(e.path)!r}")
        if not matches(e.path, editable):
            raise EditError(
                f"{where}: {e.path!r} is not editable; editable files: {list(editable)}"
            )
        if e.path in texts:
            old = texts[e.path]
        elif e.path in files:
            try:
                old = files[e.path].decode("utf-8")
            except UnicodeDecodeError as err:
                raise EditError(f"{where}: {e.path!r} is not a text file") from err
        else:
            old = None
        texts[e.path] = _apply_one(e, old, where)
    return {p: t.encode("utf-8") for p, t in texts.items() if files.get(p) != t.encode("utf-8")}


def _apply_one(e: Edit, old: str | None, where: str) -> str:
    regions = evolve_regions(old) if old else []
    if e.search is None:
        new = e.replace
        new_regions = evolve_regions(new)
        kept = len(new_regions) == len(regions) and _outside(new, new_regions) == _outside(
            old or "", regions
        )
        if regions and not kept:
            raise EditError(
                f"{where}: the rewrite changes text outside the EVOLVE-BLOCK "
                "regions; only code between the markers may change"
            )
        return new
    if old is None or not e.search.strip():
        if old:
            raise EditError(
                f"{where}: an empty SEARCH only creates a new file, and "
                f"{e.path!r} exists; quote the lines to replace"
            )
        return e.replace
    if regions and (START in e.replace or END in e.replace):
        raise EditError(f"{where}: the replacement may not add or move EVOLVE-BLOCK markers")
    span = _find(old, e.search)
    if span is None:
        first = e.search.strip().splitlines()[0][:80]
        raise EditError(
            f"{where}: the SEARCH text does not match {e.path!r} exactly "
            f"(it starts {first!r}); copy the lines verbatim from the file"
        )
    if regions and not any(a <= span[0] and span[1] <= b for a, b in regions):
        raise EditError(
            f"{where}: the SEARCH text lies outside the EVOLVE-BLOCK regions of "
            f"{e.path!r}; only code between the markers may change"
        )
    return old[: span[0]] + e.replace + old[span[1] :]
