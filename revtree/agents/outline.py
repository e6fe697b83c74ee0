"""Outlines of source files: their top-level symbols (Python by ``ast``, other
languages by regex), excerpts of a file cut to a token budget, and the repository map
(one line of symbols per file, the most used files first) that prompts show."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from revtree.agents.llm.base import estimate_tokens
from revtree.agents.retrieval import words

START, END = "EVOLVE-BLOCK-START", "EVOLVE-BLOCK-END"
MAP_LINE = 120
_REGEX_SYMBOLS = re.compile(
    r"^(?:export\s+)?(?:default\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:static\s+)?"
    r"(?:(?P<kind>function|class|struct|enum|trait|interface|impl|fn|func|def|module|type)\s+"
    r"(?:\([^)]*\)\s*)?(?P<name>[A-Za-z_]\w*)"
    r"|(?:const|let|var)\s+(?P<var>[A-Za-z_]\w*)\s*=)",
    re.M,
)
_C_FUNCTION = re.compile(r"^[A-Za-z_][\w\s\*&:<>,]*?\b(?P<name>[A-Za-z_]\w*)\s*\([^;]*$", re.M)
_C_SUFFIXES = (".c", ".h", ".cc", ".cpp", ".hpp", ".cu", ".cuh")


@dataclass(frozen=True)
class Symbol:
    """A top-level definition: ``kind`` (def, class, const ...), lines ``start``-``end``
    (1-based, inclusive), and for a class its method names in ``members``."""

    name: str
    kind: str
    start: int
    end: int
    members: tuple[str, ...] = ()


def outline(path: str, text: str) -> list[Symbol]:
    """The top-level symbols of a file: Python by ``ast`` (functions, classes with their
    methods, UPPER_CASE constants), other languages by regex (their ends estimated)."""
    if path.endswith(".py"):
        try:
            return _python_outline(ast.parse(text))
        except (SyntaxError, ValueError, RecursionError):
            pass
    lines = text.count("\n") + 1
    pattern = _C_FUNCTION if path.endswith(_C_SUFFIXES) else _REGEX_SYMBOLS
    found = []
    for m in pattern.finditer(text):
        name = m.groupdict().get("name") or m.groupdict().get("var")
        if not name or name in ("if", "for", "while", "switch", "return", "else"):
            continue
        kind = m.groupdict().get("kind") or ("const" if m.groupdict().get("var") else "fn")
        found.append((text.count("\n", 0, m.start()) + 1, name, kind))
    ends = [s for s, _, _ in found[1:]] + [lines + 1]
    return [Symbol(n, k, s, e - 1) for (s, n, k), e in zip(found, ends, strict=True)]


def _python_outline(tree: ast.Module) -> list[Symbol]:
    out = []
    for node in tree.body:
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        end = node.end_lineno or node.lineno
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.append(Symbol(node.name, "def", start, end))
        elif isinstance(node, ast.ClassDef):
            methods = tuple(
                b.name
                for b in node.body
                if isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef)
                and (not b.name.startswith("_") or b.name == "__init__")
            )
            out.append(Symbol(node.name, "class", start, end, methods))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id.isupper():
                    out.append(Symbol(t.id, "const", start, end))
    return out


def outline_line(symbols: Sequence[Symbol], limit: int = MAP_LINE) -> str:
    """``class Shape(area, scale); def distance, angle; CONST`` cut to ``limit``."""
    parts = []
    for s in symbols:
        if s.kind == "class":
            members = f"({', '.join(s.members[:8])}{', ...' if len(s.members) > 8 else ''})"
            parts.append(f"class {s.name}{members if s.members else ''}")
        elif s.kind == "const":
            parts.append(s.name)
        else:
            parts.append(f"{s.kind} {s.name}")
    line = "; ".join(parts)
    return line if len(line) <= limit else line[: limit - 4] + " ..."


def symbols_text(path: str, text: str) -> str:
    """The outline of a file as one line (what embeddings see besides the text)."""
    return outline_line(outline(path, text), 1000)


def evolve_regions(text: str) -> list[tuple[int, int]]:
    """Line ranges (1-based, inclusive, markers included) of EVOLVE-BLOCK regions."""
    out, start = [], None
    for i, line in enumerate(text.splitlines(), 1):
        if START in line and start is None:
            start = i
        elif END in line and start is not None:
            out.append((start, i))
            start = None
    return out


def excerpt(path: str, text: str, budget_tokens: int, query: str) -> str:
    """A file cut to ``budget_tokens``: its EVOLVE-BLOCK regions (always), then the
    top-level blocks that match ``query`` best (where nothing matches and there are no
    regions, the first ones), in file order, with an outline line for what is left out."""
    lines = text.splitlines()
    symbols = outline(path, text)
    regions = evolve_regions(text)
    q = set(words(query))

    def block(s: Symbol) -> str:
        return "\n".join(lines[s.start - 1 : s.end])

    score = {s: len(q & set(words(block(s)))) / (s.end - s.start + 10) for s in symbols}
    picks = sorted((s for s in symbols if score[s] > 0), key=lambda s: -score[s])
    if not picks and not regions:
        picks = list(symbols)
    keep: list[tuple[int, int]] = list(regions)
    left = budget_tokens - sum(estimate_tokens("\n".join(lines[a - 1 : b])) for a, b in keep)
    for s in picks:
        cost = estimate_tokens(block(s))
        if cost <= left and not any(a <= s.start and s.end <= b for a, b in keep):
            keep.append((s.start, s.end))
            left -= cost
    keep.sort()
    out, line = [], 1
    for a, b in [*keep, (len(lines) + 1, len(lines))]:
        if a > line:
            gap = lines[line - 1 : a - 1]
            out += gap if not any(g.strip() for g in gap) else [_gap(symbols, line, a - 1)]
        out.extend(lines[a - 1 : b])
        line = max(line, b + 1)
    return "\n".join(out)


def _gap(symbols: Sequence[Symbol], a: int, b: int) -> str:
    inside = [s for s in symbols if a <= s.start <= b]
    names = outline_line(inside, 400) if inside else "no top-level definitions"
    return f"# [... lines {a}-{b} not shown: {names}]"


def repo_map(
    files: Mapping[str, str], budget_tokens: int, first: Iterable[str] = ()
) -> tuple[str, int]:
    """One line per file (path: top-level symbols), the most used files first (those
    named in ``first`` before all), cut to ``budget_tokens``; and how many were cut."""
    symbols = {p: outline(p, t) for p, t in files.items()}
    users: dict[str, set[str]] = {}  # identifier -> files using it
    for p, t in files.items():
        for ident in set(re.findall(r"[A-Za-z_]\w+", t)):
            users.setdefault(ident, set()).add(p)
    first_words = {ident for t in first for ident in re.findall(r"[A-Za-z_]\w+", t)}

    def rank(p: str) -> tuple[int, int, str]:
        names = {s.name for s in symbols[p]} | {module_name(p)}
        used_by = set().union(*(users.get(n, set()) for n in names)) - {p}
        return (-bool(names & first_words), -len(used_by), p)

    out, left, cut = [], budget_tokens, 0
    for p in sorted(files, key=rank):
        line = f"{p}: {outline_line(symbols[p]) or '-'}"
        if estimate_tokens(line) > left:
            cut += 1
            continue
        out.append(line)
        left -= estimate_tokens(line)
    return "\n".join(out), cut


def module_name(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0]
