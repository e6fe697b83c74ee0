"""Search over a run's code: keyword (BM25) always, semantic where embeddings are set.

A document is one file: its path (weighted), identifiers split at ``_`` and case
changes, and the words of its comments and strings. The index is built once per run
from the baseline and keyed by content digest, so a candidate's tree costs only its
changed files (``search(files=...)`` tokenises or embeds what it has not seen).
Corpus statistics (document frequencies, mean length) stay the baseline's: a handful
of changed files does not move them.

Semantic search asks an OpenAI-compatible ``/embeddings`` endpoint (the run's
``base_url``) for one vector per file (its path, symbols and head) and ranks by cosine;
the two rankings are fused by reciprocal rank. Guaranteed: keyword search needs no
network and never fails. Not guaranteed: semantic search; an endpoint that fails turns
it off for the rest of the run (``semantic_error`` says why) and keyword search goes on.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
STOP = frozenset(
    """a an and are as at be by for from if in into is it of on or the to with this that
    def return self import class none true false not else elif while try except pass
    raise lambda yield none int str float list dict bool len range print args kwargs
    const let var function new null void public private static""".split()  # noqa: SIM905
)
PATH_WEIGHT = 3
EMBED_CHARS = 6000
EMBED_BATCH = 64


def words(text: str) -> list[str]:
    """Lower-case, crudely stemmed search terms: each identifier whole and its parts
    (``gaussianKernel`` and ``gaussian_kernel`` both give ``gaussian``, ``kernel`` and
    the whole), stop words and numbers out."""
    out: list[str] = []
    for ident in _WORD.findall(text):
        low = ident.strip("_").lower()
        parts = [p.lower() for chunk in ident.split("_") for p in _CAMEL.findall(chunk)]
        for w in [low] if len(parts) <= 1 else [low, *parts]:
            if len(w) > 1 and w not in STOP and not w.isdigit():
                out.append(stem(w))
    return out


def stem(word: str) -> str:
    """``distances``, ``distance`` -> ``distanc``; ``encoding``, ``encoded`` -> ``encod``."""
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("s", "")):
        if word.endswith(suffix) and len(word) > len(suffix) + 3 and not word.endswith("ss"):
            word = word[: -len(suffix)] + keep
            break
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


def digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def _text(data: bytes) -> str | None:
    if b"\0" in data[:4096]:
        return None
    return data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Hit:
    path: str
    score: float
    how: str  # "keyword", "semantic" or "keyword+semantic"


class Embedder(Protocol):
    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class OpenAIEmbedder:
    """``/embeddings`` of an OpenAI-compatible server through the openai SDK."""

    def __init__(
        self, model: str, base_url: str | None, api_key: str | None, timeout: float = 60.0
    ) -> None:
        import openai

        self.model = model
        self.client = openai.OpenAI(
            api_key=api_key or "not-needed", base_url=base_url, timeout=timeout, max_retries=2
        )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for i in range(0, len(texts), EMBED_BATCH):
            batch = list(texts[i : i + EMBED_BATCH])
            reply = self.client.embeddings.create(
                model=self.model, input=batch, encoding_format="float"
            )
            rows = sorted(reply.data, key=lambda d: d.index)
            if len(rows) != len(batch):
                raise ValueError(f"{len(rows)} embeddings for {len(batch)} inputs")
            out += [list(r.embedding) for r in rows]
        return out


class Index:
    """BM25 over files, plus embeddings where an ``embedder`` is given; thread-safe."""

    K1, B = 1.5, 0.75

    def __init__(
        self,
        files: Mapping[str, bytes],
        embedder: Embedder | None = None,
        outline: Callable[[str, str], str] | None = None,
    ) -> None:
        self.embedder, self.outline = embedder, outline
        self.semantic_error: str | None = None
        self._terms: dict[str, Counter[str]] = {}  # digest -> term counts
        self._vectors: dict[str, list[float]] = {}  # digest -> unit vector
        self._lock = threading.Lock()
        self.base = {p: digest(d) for p, d in files.items() if _text(d) is not None}
        self.update(files)
        counts = [self._terms[self.base[p]] for p in self.base]
        self.df: Counter[str] = Counter(t for c in counts for t in c)
        self.n = max(len(counts), 1)
        self.avgdl = sum(sum(c.values()) for c in counts) / self.n or 1.0

    @property
    def semantic(self) -> bool:
        return self.embedder is not None and self.semantic_error is None

    def update(self, files: Mapping[str, bytes]) -> int:
        """Index the files not seen yet (by content); returns how many were new."""
        new: dict[str, tuple[str, str]] = {}
        for path, data in files.items():
            text, key = _text(data), digest(data)
            if text is None or key in self._terms or key in new:
                continue
            new[key] = (path, text)
        with self._lock:
            for key, (path, text) in new.items():
                terms = Counter(words(text))
                for w in words(path):
                    terms[w] += PATH_WEIGHT
                self._terms[key] = terms
        if new and self.semantic:
            self._embed(new)
        return len(new)

    def _embed(self, docs: Mapping[str, tuple[str, str]]) -> None:
        assert self.embedder is not None
        keys = [k for k in docs if k not in self._vectors]
        texts = [self._embed_text(*docs[k]) for k in keys]
        try:
            vectors = self.embedder.embed(texts) if texts else []
        except Exception as e:  # any failure of the endpoint: keyword search goes on
            self.semantic_error = f"{type(e).__name__}: {e}"[:300]
            return
        with self._lock:
            self._vectors.update(zip(keys, map(unit, vectors), strict=True))

    def _embed_text(self, path: str, text: str) -> str:
        symbols = self.outline(path, text) if self.outline else ""
        return f"{path}\n{symbols}\n{text}"[:EMBED_CHARS]

    def search(self, query: str, files: Mapping[str, bytes], k: int = 10) -> list[Hit]:
        """The ``k`` files of ``files`` most related to ``query``, best first; files not
        indexed yet (a candidate's changes) are indexed first."""
        self.update(files)
        keys = {p: digest(d) for p, d in files.items() if digest(d) in self._terms}
        lexical = self._bm25(query, keys)
        semantic = self._cosine(query, keys) if self.semantic else []
        if not semantic:
            return [Hit(p, s, "keyword") for p, s in lexical[:k]]
        return _fuse(lexical, semantic)[:k]

    def _bm25(self, query: str, keys: Mapping[str, str]) -> list[tuple[str, float]]:
        terms = set(words(query))
        scores = []
        for path, key in keys.items():
            counts, score = self._terms[key], 0.0
            dl = sum(counts.values())
            for t in terms & counts.keys():
                df = self.df.get(t, 0)
                idf = math.log(1 + (self.n - df + 0.5) / (df + 0.5))
                tf = counts[t]
                score += (
                    idf
                    * tf
                    * (self.K1 + 1)
                    / (tf + self.K1 * (1 - self.B + self.B * dl / self.avgdl))
                )
            if score > 0:
                scores.append((path, score))
        return sorted(scores, key=lambda s: (-s[1], s[0]))

    def _cosine(self, query: str, keys: Mapping[str, str]) -> list[tuple[str, float]]:
        assert self.embedder is not None
        try:
            q = unit(self.embedder.embed([query[:EMBED_CHARS]])[0])
        except Exception as e:
            self.semantic_error = f"{type(e).__name__}: {e}"[:300]
            return []
        scores = [
            (p, sum(a * b for a, b in zip(q, self._vectors[key], strict=False)))
            for p, key in keys.items()
            if key in self._vectors
        ]
        return sorted(scores, key=lambda s: (-s[1], s[0]))


def unit(v: Iterable[float]) -> list[float]:
    """``v`` scaled to length 1 (a zero vector as it is)."""
    vec = list(v)
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


def _fuse(*rankings: list[tuple[str, float]], k: int = 60) -> list[Hit]:
    """Reciprocal-rank fusion of the keyword and semantic rankings."""
    score: dict[str, float] = {}
    how: dict[str, set[str]] = {}
    for name, ranking in zip(("keyword", "semantic"), rankings, strict=False):
        for rank, (path, _) in enumerate(ranking):
            score[path] = score.get(path, 0.0) + 1 / (k + rank + 1)
            how.setdefault(path, set()).add(name)
    best = sorted(score, key=lambda p: (-score[p], p))
    return [Hit(p, score[p], "+".join(sorted(how[p]))) for p in best]


def make_embedder(
    model: str | None, base_url: str | None, api_key_env: str | None
) -> Embedder | None:
    """The embedder of ``[agents] embeddings_model`` at the run's ``base_url``, or None."""
    if not model:
        return None
    import os

    return OpenAIEmbedder(model, base_url, os.environ.get(api_key_env or "OPENAI_API_KEY"))
