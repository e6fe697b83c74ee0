"""The code a prompt shows, by priority, within ``[agents] context_tokens``.

The stable prefix of a run (the same for every call, so providers cache it) holds,
in this order: the task; the editable files whole (a file too large for the budget
as its EVOLVE-BLOCK regions, or else its parts that match the goal, plus an outline
of its symbols); and a repository map, one line per file with its top-level symbols
(Python by ``ast``, other languages by regex), ranked by how much other code uses the
file (the editable files' imports first) and cut to ``repo_map_share`` of the budget.
A repository small enough (all of it within half the budget) is shown whole instead.

Per candidate, ``related`` adds the files most related to a query (the goal, the
hypothesis, the parent's failure) found by ``retrieval.Index``, at most
``related_files`` of them, in what is left of the budget.

Guaranteed: the editable files come first and are never crowded out by other code;
protected files (the evaluator and its data), holdout and support files are never
shown, not even in the map; what the budget left out is listed in ``notes``. Not
guaranteed: that retrieval finds the file a model needs (``search`` says how it
ranked), nor exact token counts (4 characters a token).

The outlines, excerpts and the repository map are made by :mod:`revtree.agents.outline`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from revtree.agents.llm.base import estimate_tokens
from revtree.agents.outline import (
    START,
    evolve_regions,
    excerpt,
    module_name,
    outline,
    repo_map,
    symbols_text,
)
from revtree.agents.retrieval import Embedder, Hit, Index, words
from revtree.tasks.names import matches
from revtree.tasks.spec import TaskSpec

SMALL_REPO_SHARE = 0.5  # a repository within this share of the budget is shown whole
RELATED_FLOOR = 0.2  # share of the budget kept from the editable files for related ones
EXCERPT_SHARE = 0.25  # most of the budget one excerpted editable file may take


def render(path: str, text: str, how: str = "") -> str:
    """A file as prompts lay it out (``--- path ---`` then the text)."""
    return f"--- {path}{f' ({how})' if how else ''} ---\n{text}"


def visible(spec: TaskSpec, files: Mapping[str, bytes]) -> dict[str, bytes]:
    """The files a prompt may show: never protected, holdout or support files."""
    hidden = (*spec.protected, *(spec.holdout.files if spec.holdout else ()))
    return {
        p: d for p, d in files.items() if not matches(p, hidden) and p not in spec.support_files
    }


def decode(data: bytes) -> str | None:
    if b"\0" in data[:4096]:
        return None
    return data.decode("utf-8", errors="replace")


@dataclass
class Related:
    """The per-candidate part: rendered files, which were shown, and what was cut."""

    text: str
    shown: list[str]
    hits: list[Hit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class ContextBuilder:
    """The context of one run: ``prefix`` (built here, once) and ``related(...)`` per
    candidate. ``notes`` says what the prefix left out and why."""

    def __init__(
        self,
        spec: TaskSpec,
        baseline: Mapping[str, bytes],
        budget_tokens: int,
        *,
        map_share: float = 0.1,
        related_files: int = 5,
        index: Index | None = None,
    ) -> None:
        self.spec, self.budget, self.index = spec, budget_tokens, index
        self.related_files = related_files
        self.texts = {p: t for p, d in visible(spec, baseline).items() if (t := decode(d))}
        self.editable = sorted(p for p in self.texts if matches(p, spec.editable))
        self.notes: list[str] = []
        self.in_prefix: set[str] = set()  # shown whole or excerpted in the prefix
        head = _head(spec)
        total = sum(estimate_tokens(t) for t in self.texts.values())
        if total <= budget_tokens * SMALL_REPO_SHARE:
            order = self.editable + sorted(set(self.texts) - set(self.editable))
            self.in_prefix = set(order)
            body = "# Code (the whole repository)\n" + "\n".join(
                render(p, self.texts[p]) for p in order
            )
        else:
            body = self._editable_part(int(budget_tokens * (1 - map_share - RELATED_FLOOR)))
            used = estimate_tokens(body)
            body += "\n\n" + self._map_part(
                min(int(budget_tokens * map_share), budget_tokens - used)
            )
        self.prefix = head + "\n" + body
        self.prefix_tokens = estimate_tokens(self.prefix)

    # -- the prefix ---------------------------------------------------------------------
    def _editable_part(self, allowance: int) -> str:
        """Editable files whole, smallest (and EVOLVE-BLOCK ones) first, while they fit;
        the rest excerpted, or left to the map and retrieval when not even that fits."""
        out, left = ["# Editable files"], allowance
        marked = [p for p in self.editable if START in self.texts[p]]
        order = marked + sorted(
            (p for p in self.editable if p not in marked), key=lambda p: len(self.texts[p])
        )
        for p in order:
            text = self.texts[p]
            cost = estimate_tokens(text)
            if cost <= left:
                out.append(render(p, text))
            else:
                size = min(left, int(self.budget * EXCERPT_SHARE))
                cut = excerpt(p, text, size, self.spec.goal)
                if size <= 0 or estimate_tokens(cut) > max(left, 0):
                    self.notes.append(
                        f"editable {p} ({cost} tokens) left out of the prefix: the editable "
                        f"files' share ({allowance} tokens) was spent; it is in the map and "
                        "retrieval may show it"
                    )
                    continue
                why = "EVOLVE-BLOCK regions" if evolve_regions(text) else "parts matching the goal"
                out.append(render(p, cut, f"excerpt: {why} and an outline"))
                self.notes.append(
                    f"editable {p} ({cost} tokens) excerpted to {estimate_tokens(cut)} tokens "
                    f"({why}, the rest as an outline): the whole file exceeds its share"
                )
                cost = estimate_tokens(cut)
            self.in_prefix.add(p)
            left -= cost
        return "\n".join(out)

    def _map_part(self, budget: int) -> str:
        rest = {p: t for p, t in self.texts.items() if p not in self.in_prefix}
        first = [self.texts[p] for p in self.editable]
        text, cut = repo_map(rest, max(budget, 0), first)
        if cut:
            self.notes.append(
                f"repository map: {cut} of {len(rest)} files left out, its share of the "
                f"budget ({max(budget, 0)} tokens) was spent (the least used files go first)"
            )
        head = f"# Repository map: {len(rest) - cut} of {len(rest)} other files, top-level symbols"
        return head + "\n" + (text or "(none)")

    # -- per candidate ----------------------------------------------------------------
    def use_index(self, index: Index) -> None:
        """Search ``index`` for related files from now on (built after the prefix)."""
        self.index = index

    def related(
        self,
        files: Mapping[str, bytes],
        query: str,
        budget_tokens: int,
        first: Sequence[str] = (),
    ) -> Related:
        """The files of ``files`` (a candidate's tree) most related to ``query``: those
        named in ``first`` (memory), then paths the query names, then search hits; whole
        while they fit ``budget_tokens``, else excerpted; never prefix or hidden files."""
        if self.index is None or self.related_files <= 0 or self.in_prefix >= set(self.texts):
            return Related("", [])
        shown_files = visible(self.spec, files)
        pool = {p: d for p, d in shown_files.items() if p not in self.in_prefix}
        hits = self.index.search(query, pool, k=self.related_files * 3)
        named = [p for p in pool if p in query]
        order = list(
            dict.fromkeys([*(p for p in first if p in pool), *named, *(h.path for h in hits)])
        )
        out, shown, notes, left = list[str](), list[str](), list[str](), budget_tokens
        for p in order:
            if len(shown) >= self.related_files:
                break
            text = decode(pool[p])
            if text is None:
                continue
            share = max(left // max(self.related_files - len(shown), 1), 200)
            cost = estimate_tokens(text)
            if cost <= left and (cost <= share or len(shown) == self.related_files - 1):
                out.append(render(p, text))
            else:
                cut = excerpt(p, text, min(share, left), query)
                if estimate_tokens(cut) > left:
                    notes.append(f"{p}: no room left ({left} tokens)")
                    continue
                out.append(render(p, cut, "excerpt: the parts matching this candidate"))
                notes.append(f"{p} excerpted ({cost} tokens over a share of {share})")
                cost = estimate_tokens(cut)
            shown.append(p)
            left -= cost
        return Related("\n".join(out), shown, hits, notes)


def _head(spec: TaskSpec) -> str:
    return "\n".join(
        [
            f"# Task: {spec.name}",
            spec.goal or "(no goal text given)",
            f"Score: {spec.evaluate.metric}, to {spec.evaluate.direction}.",
            f"Editable files (globs): {', '.join(spec.editable)}",
            "Evaluator and its data (protected, never change, not shown): "
            f"{', '.join(spec.protected) or '-'}",
            "",
        ]
    )


@dataclass(frozen=True)
class Learnt:
    """Where something is: a file search showed a candidate, which its edits then used
    (``symbols`` of it named in the added code) or changed; ``about`` is what the
    candidate was after (its hypothesis)."""

    node_id: int
    path: str
    symbols: tuple[str, ...]
    about: str

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "symbols": list(self.symbols), "about": self.about}

    @classmethod
    def from_json(cls, node_id: int, data: Mapping[str, object]) -> Learnt:
        symbols = data.get("symbols")
        return cls(
            node_id,
            str(data["path"]),
            tuple(str(s) for s in symbols) if isinstance(symbols, list) else (),
            str(data.get("about", "")),
        )


Record = Callable[[str, "int | None", "dict[str, object] | None"], None]


class RepoContext:
    """A run's code context: the stable ``prefix``, per-candidate related files from a
    lazily built search index, and memory of where things are (``Learnt``) that earlier
    candidates found. ``record(message, node_id, data)`` puts what the budget left out,
    and what was learnt, into the live log (the orchestrator wires it to its store)."""

    MEMORY_LINES = 5

    def __init__(
        self,
        spec: TaskSpec,
        baseline: Mapping[str, bytes],
        *,
        embedder: Embedder | None = None,
        learnt: Iterable[Learnt] = (),
        record: Record | None = None,
    ) -> None:
        a = spec.agents
        self.spec, self.baseline, self.embedder = spec, baseline, embedder
        self.budget = a.context_tokens
        self.builder = ContextBuilder(
            spec,
            baseline,
            a.context_tokens,
            map_share=a.repo_map_share,
            related_files=a.related_files,
        )
        self.prefix = self.builder.prefix
        self.learnt = list(learnt)
        self.record: Record = record or (lambda message, node_id, data: None)
        self.shown: dict[int, list[str]] = {}
        self._lock = threading.Lock()
        self._index: Index | None = None
        if self.builder.notes:
            self.record("prompt prefix: " + "; ".join(self.builder.notes), None, None)

    @property
    def index(self) -> Index:
        """The search index, built on first use (once per run) from the baseline."""
        with self._lock:
            if self._index is None:
                files = visible(self.spec, self.baseline)
                self._index = Index(files, self.embedder, symbols_text)
                self.builder.use_index(self._index)
                if self.embedder is not None and self._index.semantic_error:
                    self.record(
                        "semantic search off, keyword search only: the embeddings endpoint "
                        f"failed ({self._index.semantic_error})",
                        None,
                        None,
                    )
            return self._index

    def related(
        self, node_id: int, files: Mapping[str, bytes], query: str, budget_tokens: int
    ) -> Related:
        """The related files of a candidate (parent's ``files``), remembered ones first;
        what the budget cut goes to the live log."""
        self.index  # noqa: B018  (built on first use)
        remembered = [m.path for m in self.recall(query)]
        rel = self.builder.related(files, query, budget_tokens, remembered)
        with self._lock:
            self.shown[node_id] = rel.shown
        if rel.notes:
            self.record(
                f"node {node_id}: related files cut to the budget ({budget_tokens} tokens "
                f"left): " + "; ".join(rel.notes),
                node_id,
                {"shown": rel.shown},
            )
        return rel

    def saw(self, node_id: int, paths: list[str]) -> None:
        """The files a candidate read (a tool coder's), in place of its related files."""
        with self._lock:
            self.shown[node_id] = paths

    def recall(self, query: str) -> list[Learnt]:
        """What earlier candidates learnt that shares at least two words with ``query``."""
        q = set(words(query))
        scored = []
        for m in self.learnt:
            overlap = len(q & set(words(" ".join([m.about, m.path, *m.symbols]))))
            if overlap >= 2:
                scored.append((overlap, m.node_id, m))
        scored.sort(key=lambda s: (-s[0], -s[1]))
        return list({s[2].path: s[2] for s in reversed(scored)}.values())[::-1][: self.MEMORY_LINES]

    def memory(self, query: str) -> str:
        """The 'where things are' lines for a prompt's memory section."""
        lines = [
            f"- {m.path}"
            + (f" ({', '.join(m.symbols)})" if m.symbols else "")
            + f": used by node {m.node_id} for: {m.about[:120]}"
            for m in self.recall(query)
        ]
        return (
            "Where things are (found by earlier candidates):\n" + "\n".join(lines) if lines else ""
        )

    def learn(
        self,
        node_id: int,
        about: str,
        files: Mapping[str, bytes],
        changes: Mapping[str, bytes | None],
    ) -> list[Learnt]:
        """What the candidate's edits (``changes`` to the parent's ``files``) show it
        learnt: the shown related files it changed, or whose symbols its added code names."""
        added: set[str] = set()
        for p, new in changes.items():
            if new is not None:
                old = decode(files.get(p, b"")) or ""
                added |= _identifiers(decode(new) or "") - _identifiers(old)
        found = []
        for p in self.shown.get(node_id, []):
            text = decode(files.get(p, b"")) or ""
            names = {s.name for s in outline(p, text)} | {module_name(p)}
            used = tuple(sorted(names & added))[:6]
            if used or p in changes:
                found.append(Learnt(node_id, p, used, " ".join(about.split())[:200]))
        for m in found:
            self.record(
                f"node {node_id} used {m.path}"
                + (f" ({', '.join(m.symbols)})" if m.symbols else " (changed it)")
                + ", found by search: kept for later candidates",
                node_id,
                {"learnt": m.to_json()},
            )
        with self._lock:
            self.learnt += found
        return found


def _identifiers(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", text))
