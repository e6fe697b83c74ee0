"""Loose parsing of model answers: edits in every common dialect, proposals, verdicts.

Edit dialects, alone or mixed in one answer (``scan_edits``):

- SEARCH/REPLACE blocks with the file named before them (a bare path, ``### path``,
  ``**path**``, ``path:``, ``File: path``, ``# path`` inside the fence, a fence info string
  such as ``python:path``), or naming no file at all (OpenEvolve's diff format);
- unified diffs (``--- a/x``, ``+++ b/x``, ``@@ -12,3 +12,4 @@``), fenced or not, with or
  without line numbers and file headers;
- whole files: ``=== FILE: path ===`` then a fence; a path header then a plain fence; and a
  single plain fence with no header at all (a rewrite of the only editable file).

Reasoning (``<think>``, ``<thinking>``, ``<reasoning>``) is dropped first. Prose is never
taken for a path: a line names a file only if it is a path, or a short header or label
(``### …``, ``**…**``, ``… :``) that names exactly one file with an extension.

What is not decided here: which file an unnamed edit is for, whether a path is editable,
and whether a SEARCH text matches; ``revtree.agents.edits.apply_edits`` does all three.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from revtree.errors import EditError


@dataclass(frozen=True)
class Edit:
    """One edit. ``search`` None: a whole-file rewrite; "" : create a new file."""

    path: str | None  # None: the answer named no file; inferred when applied
    search: str | None
    replace: str
    index: int = 0
    line: int | None = None  # a diff hunk's old start line: breaks ties between matches
    hint: str | None = None  # the file of the block before, for a block that names none


_REASONING = re.compile(r"<(think|thinking|reasoning)>.*?</\1\s*>", re.S | re.I)
_CLOSE = re.compile(r"</(?:think|thinking|reasoning)\s*>", re.I)
_OPEN = re.compile(r"<(?:think|thinking|reasoning)>", re.I)
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\s`]*)[ \t]*([^`]*?)[ \t]*$")
_SEARCH = re.compile(r"^[ \t]*<{5,9}[ \t]*SEARCH\b")
_DIVIDER = re.compile(r"^[ \t]*={5,9}[ \t]*$")
_REPLACE = re.compile(r"^[ \t]*>{5,9}[ \t]*REPLACE\b")
_FILE = re.compile(r"^[ \t]*={3}[ \t]*FILE:[ \t]*(.+?)[ \t]*(?:===)?[ \t]*$")
_HUNK = re.compile(r"^@@[ \t]*(?:-(\d+))?.*?@@")
_PATH = re.compile(r"[\w\-./\\~+@]*\w")
_EXT = re.compile(r"(?:^|[\w/])\.[A-Za-z]\w{0,7}$")
_LABEL = re.compile(
    r"^(?:file(?:name)?|path|in|edit|edits|changes? to|update|updated)\b[ \t]*:?", re.I
)
_NOT_CODE = {"diff", "patch", "bash", "sh", "shell", "console", "zsh", "text", "txt", "output"}
_NOT_CODE |= {"log", "markdown", "md", "plaintext", "stdout", "terminal"}


def strip_reasoning(text: str) -> str:
    """The answer without reasoning drafts (``<think>…</think>`` and the like).

    A closing tag with no opening one (servers that strip it) drops everything before it;
    an opening tag that is never closed drops everything after it.
    """
    text = _REASONING.sub("", text.replace("\r\n", "\n"))
    closes = list(_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    opened = _OPEN.search(text)
    return text[: opened.start()] if opened else text


def header_path(line: str) -> str | None:
    """The file a line names, if it is a path or a short header naming exactly one file."""
    s = line.strip()
    if not s or len(s) > 160 or s.startswith(("<<<<<", ">>>>>", "=====")):
        return None
    fenced = _FILE.match(s)
    if fenced:
        return _clean(fenced.group(1))
    is_header = s.startswith(("#", "**", "__")) or s.rstrip("*_` ").endswith(":")
    bare = _clean(s)
    if bare and _is_path(bare) and (" " not in bare):
        return bare
    if not is_header:
        return None
    words = {_clean(w) for w in s.split()}
    found = {w for w in words if w and _is_path(w) and _EXT.search(w)}
    return found.pop() if len(found) == 1 else None


def _clean(raw: str) -> str:
    s = raw.strip().lstrip("#>").strip().strip("*_`'\"").strip()
    s = _LABEL.sub("", s).strip().strip("*_`'\"").strip()
    s = s.rstrip(":,;").rstrip("*_`'\"").strip()
    return s.removeprefix("./")


def _is_path(s: str) -> bool:
    return (
        _PATH.fullmatch(s) is not None
        and any(c in s for c in "./\\")
        and re.search(r"[A-Za-z]", s) is not None
    )


class _Scanner:
    def __init__(self, text: str, allow_blocks: bool, allow_files: bool) -> None:
        self.lines = text.splitlines(keepends=True)
        self.allow_blocks, self.allow_files = allow_blocks, allow_files
        self.found: list[tuple[int, Edit, str]] = []  # (line, edit, kind)
        self.fences: list[tuple[int, str | None, str, bool]] = []  # line, path, body, explicit
        self.header: str | None = None
        self.explicit = False  # the header is a '=== FILE: path ===' line
        self.previous: str | None = None
        self.fence_path: str | None = None
        self.skip_close: int | None = None

    def run(self) -> list[Edit]:
        i = 0
        while i < len(self.lines):
            i = self.step(i)
        return self.finish()

    def step(self, i: int) -> int:
        line = self.lines[i]
        if i == self.skip_close:
            self.skip_close, self.fence_path = None, None
            return i + 1
        if _SEARCH.match(line):
            return self.search_block(i)
        fence = _FENCE.match(line)
        if fence and self.skip_close is None:
            return self.fence(i, fence)
        if self.is_diff_start(i):
            end = self.diff_end(i)
            self.diff(i, self.lines[i:end])
            return end
        named = header_path(line)
        if named is not None:
            self.header = named
            self.explicit = _FILE.match(line.strip()) is not None
        return i + 1

    def search_block(self, i: int) -> int:
        j = i + 1
        while j < len(self.lines) and not _DIVIDER.match(self.lines[j]):
            if _SEARCH.match(self.lines[j]) or _REPLACE.match(self.lines[j]):
                raise EditError(
                    f"malformed edit blocks: the SEARCH block at line {i + 1} has no "
                    "'=======' line; " + _expected(self.allow_blocks, self.allow_files)
                )
            j += 1
        k = j + 1
        while k < len(self.lines) and not _REPLACE.match(self.lines[k]):
            if _SEARCH.match(self.lines[k]) or _DIVIDER.match(self.lines[k]):
                break
            k += 1
        if j >= len(self.lines) or k >= len(self.lines) or not _REPLACE.match(self.lines[k]):
            raise EditError(
                f"malformed edit blocks: the SEARCH block at line {i + 1} does not end with "
                "'>>>>>>> REPLACE'; " + _expected(self.allow_blocks, self.allow_files)
            )
        path = self.header or self.fence_path
        edit = Edit(
            path,
            "".join(self.lines[i + 1 : j]),
            "".join(self.lines[j + 1 : k]),
            hint=None if path else self.previous,
        )
        self.add(i, edit, "search")
        self.previous = path or self.previous
        return k + 1

    def fence(self, i: int, m: re.Match[str]) -> int:
        close = self.closing(i, m.group(1))
        body = self.lines[i + 1 : close]
        lang, info = m.group(2).lower(), m.group(3)
        named = _fence_path(lang, info)
        if any(_SEARCH.match(b) for b in body):
            self.fence_path, self.skip_close = named, close
            return i + 1
        if lang in ("diff", "patch", "udiff") or _looks_like_diff(body):
            self.diff(i, body)
            return close + 1
        if lang not in _NOT_CODE:
            path = self.header or named
            explicit = self.header is not None and self.explicit
            self.fences.append((i, path, "".join(body), explicit))
            self.header = None
        return close + 1

    def closing(self, i: int, marker: str) -> int:
        for j in range(i + 1, len(self.lines)):
            s = self.lines[j].strip()
            if s.startswith(marker[0] * len(marker)) and not s.strip(marker[0]):
                return j
        return len(self.lines)

    def is_diff_start(self, i: int) -> bool:
        line = self.lines[i]
        if line.startswith("diff --git "):
            return True
        nxt = self.lines[i + 1] if i + 1 < len(self.lines) else ""
        return line.startswith("--- ") and nxt.startswith("+++ ")

    def diff_end(self, i: int) -> int:
        j = i
        while j < len(self.lines) and (
            self.lines[j][:1] in " +-@\\\n" or self.lines[j].startswith(("diff ", "index "))
        ):
            j += 1
        return j

    def diff(self, at: int, body: list[str]) -> None:
        for n, hunk in enumerate(parse_diff(body, self.header or self.fence_path)):
            self.add(at + n, hunk, "diff")
        self.header = None

    def add(self, at: int, edit: Edit, kind: str) -> None:
        if kind in ("search", "diff") and not self.allow_blocks:
            return
        self.found.append((at, edit, kind))
        self.header = None
        self.explicit = False

    def finish(self) -> list[Edit]:
        targeted = {e.path for _, e, _ in self.found}
        if self.allow_files:
            for at, path, body, explicit in self.fences:
                if explicit or (path is not None and path not in targeted):
                    self.found.append((at, Edit(path, None, body), "file"))
            if not self.found and self.fences:
                at, _, body = _main_fence([(a, b) for a, _, b, _ in self.fences])
                self.found.append((at, Edit(None, None, body), "file"))
        self.found.sort(key=lambda f: f[0])
        return [
            Edit(e.path, e.search, e.replace, n + 1, e.line, e.hint)
            for n, (_, e, _) in enumerate(self.found)
        ]


def _fence_path(lang: str, info: str) -> str | None:
    for word in (lang.partition(":")[2], info, *info.split()):
        cleaned = _clean(word.removeprefix("title=").strip("\"'"))
        if cleaned and _is_path(cleaned) and _EXT.search(cleaned):
            return cleaned
    return None


def _main_fence(fences: list[tuple[int, str]]) -> tuple[int, None, str]:
    """The code block that is the new file: the last of those near the longest in size."""
    longest = max(b.count("\n") for _, b in fences)
    at, body = [f for f in fences if f[1].count("\n") >= 0.6 * longest][-1]
    return at, None, body


def _looks_like_diff(body: list[str]) -> bool:
    first = next((b for b in body if b.strip()), "")
    if first.startswith(("--- ", "diff --git ", "@@")):
        return True
    changed = [b for b in body if b.strip()]
    return (
        bool(changed)
        and all(b[:1] in "+- " for b in changed)
        and any(b[:1] in "+-" for b in changed)
    )


def _diff_path(raw: str) -> str:
    path = raw[4:].split("\t")[0].strip()
    if path != "/dev/null" and path[:2] in ("a/", "b/"):
        path = path[2:]
    return path


def parse_diff(body: list[str], default: str | None) -> list[Edit]:
    """The hunks of a unified diff as edits (context and removed lines as SEARCH)."""
    edits: list[Edit] = []
    path, old_path = default, None
    hunk: list[str] | None = None
    start: int | None = None

    def flush() -> None:
        if hunk is None:
            return
        while hunk and not hunk[-1].strip():
            hunk.pop()
        old = [h[1:] if h[:1] in " -" else h for h in hunk if h[:1] != "+"]
        new = [h[1:] if h[:1] in " +" else h for h in hunk if h[:1] != "-"]
        if not any(h[:1] in "+-" for h in hunk):
            return
        if path == "/dev/null":
            raise EditError(f"a diff deletes {old_path!r}; deleting files is not supported")
        search = "" if old_path == "/dev/null" else "".join(_nl(x) for x in old)
        edits.append(Edit(path, search, "".join(_nl(x) for x in new), line=start))

    for i, line in enumerate(body):
        nxt = body[i + 1] if i + 1 < len(body) else ""
        if line.startswith("diff --git ") or line.startswith(
            ("index ", "new file", "deleted file")
        ):
            continue
        if line.startswith("--- ") and nxt.startswith("+++ "):
            flush()
            hunk, old_path = None, _diff_path(line)
            continue
        if line.startswith("+++ ") and hunk is None:
            path, hunk = _diff_path(line), []
            continue
        m = _HUNK.match(line)
        if m:
            flush()
            hunk, start = [], int(m.group(1)) if m.group(1) else None
            continue
        if line.startswith("\\"):
            continue
        if hunk is None:
            hunk = []
        hunk.append(line if line.strip() else " \n")
    flush()
    return edits


def _nl(line: str) -> str:
    return line if line.endswith("\n") else line + "\n"


def _expected(allow_blocks: bool, allow_files: bool) -> str:
    forms = (("SEARCH/REPLACE blocks", allow_blocks), ("'=== FILE: path ===' blocks", allow_files))
    return "expected " + " or ".join(f for f, ok in forms if ok) + " exactly as specified"


def scan_edits(answer: str, allow_blocks: bool = True, allow_files: bool = True) -> list[Edit]:
    """The edits of an answer in any dialect, in order. Raises EditError if there are none."""
    if not answer.strip():
        raise EditError("the answer is empty")
    text = strip_reasoning(answer)
    if not text.strip():
        raise EditError("the answer holds only reasoning (<think>…</think>) and no edits")
    edits = _Scanner(text, allow_blocks, allow_files).run()
    if edits:
        return edits
    expected = _expected(allow_blocks, allow_files)
    if "<<<<<<< SEARCH" in text or "=== FILE:" in text:
        raise EditError(f"malformed edit blocks: {expected}")
    raise EditError(f"no edits found: {expected.removesuffix(' exactly as specified')}")


# ---- proposals and verdicts -------------------------------------------------------------

_KEY = r"(?:^|\n)[ \t>#*_-]*{key}[ \t*_]*:[ \t*_]*"


def _json_object(text: str) -> dict[str, object] | None:
    for m in re.finditer(r"\{", text):
        depth = 0
        for j in range(m.start(), len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                try:
                    value = json.loads(text[m.start() : j + 1])
                except ValueError:
                    break
                if isinstance(value, dict):
                    return {str(k).lower(): v for k, v in value.items()}
                break
    return None


def _field(text: str, key: str, stop: tuple[str, ...]) -> str | None:
    m = re.search(_KEY.format(key=key), text, re.I)
    if m is None:
        return None
    rest = text[m.end() :]
    ends = [e.start() for s in stop if (e := re.search(_KEY.format(key=s), rest, re.I)) is not None]
    value = rest[: min(ends)] if ends else rest
    return value.strip().strip("*_").strip() or None


def parse_proposal(text: str) -> tuple[str, str]:
    """(hypothesis, plan) of a proposer's answer: ``HYPOTHESIS:``/``PLAN:`` lines in any
    case or markdown (``**Hypothesis:**``), a JSON object, or free prose (its first line)."""
    text = strip_reasoning(text).strip() or text.strip()
    data = _json_object(text)
    if data and isinstance(data.get("hypothesis"), str):
        plan = data.get("plan", "")
        if isinstance(plan, list):
            plan = "\n".join(f"{n}. {p}" for n, p in enumerate(plan, 1))
        return str(data["hypothesis"]).strip()[:500], str(plan).strip() or text
    hyp = _field(text, "hypothesis", ("plan",))
    plan = _field(text, "plan", ("hypothesis",))
    if hyp is None:
        first = next(ln for ln in text.splitlines() if ln.strip()) if text else ""
        return first.strip().strip("#*_ ")[:300], text
    return " ".join(hyp.split("\n\n")[0].split())[:500], plan or text


def parse_verdict(text: str) -> tuple[bool, str] | None:
    """(accepted, reasons) of a reviewer's answer, or None when it gives no verdict.

    Understands ``VERDICT: accept``, ``**Verdict:** Reject.``, any case, a JSON object
    (``{"verdict": "accept"}``, ``{"accept": true}``, ``{"accepted": false}``), and prose
    after or around the verdict line.
    """
    text = strip_reasoning(text).strip() or text.strip()
    data = _json_object(text)
    if data is not None:
        why = str(data.get("reasons") or data.get("reason") or data.get("rationale") or "")
        for key in ("accept", "accepted", "approve", "approved"):
            if isinstance(data.get(key), bool):
                return bool(data[key]), why.strip()
        word = _verdict_word(str(data.get("verdict") or data.get("decision") or ""))
        if word is not None:
            return word, why.strip()
    value = _field(text, "(?:verdict|decision)", ("reasons?", "rationale"))
    if value is None:
        return None
    word = _verdict_word(value.splitlines()[0])
    if word is None:
        return None
    reasons = _field(text, "(?:reasons?|rationale)", ("verdict", "decision"))
    return word, (reasons or text).strip()


def _verdict_word(value: str) -> bool | None:
    m = re.match(r"[\s*_`\"'\[(]*(accept|approve|reject|decline)", value, re.I)
    return None if m is None else m.group(1).lower() in ("accept", "approve")
