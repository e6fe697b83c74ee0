"""The embeddings fake: a :class:`~revtree.agents.llm.fake_server.FakeLLMServer` that
also answers OpenAI's ``POST /v1/embeddings``, with deterministic vectors."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from revtree.agents.llm.base import estimate_tokens
from revtree.agents.llm.fake_server import FakeLLMServer, Responder


def fake_embedding(text: str, dims: int = 256, words: str = r"[a-z]{3,}") -> list[float]:
    """A deterministic unit vector: hashed features of the words' first five letters, so
    texts sharing word stems (``smoothing``, ``smoothed``) are near, as real embeddings
    of related texts are. ``words``: what counts as a word."""
    vec = [0.0] * dims
    for word in re.findall(words, re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower()):
        h = int.from_bytes(hashlib.blake2b(word[:5].encode(), digest_size=4).digest(), "big")
        vec[h % dims] += 1.0 if h & 1 << 31 else -1.0
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


class EmbeddingsFakeLLMServer(FakeLLMServer):
    """A ``FakeLLMServer`` that also answers OpenAI's ``POST /v1/embeddings`` with
    ``fake_embedding`` vectors (float or base64, as asked); each call's inputs are kept
    in ``embedding_inputs``. ``embeddings_status`` other than 200 fails those calls;
    ``embed`` replaces ``fake_embedding``."""

    def __init__(
        self,
        responder: Responder,
        *,
        embeddings_status: int = 200,
        embed: Callable[[str], list[float]] = fake_embedding,
        **kw: Any,
    ) -> None:
        self.embedding_inputs: list[list[str]] = []
        self.embeddings_status, self.embed = embeddings_status, embed
        super().__init__(responder, **kw)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake, plain = self, super().handler()

        class Handler(plain):  # type: ignore[misc, valid-type]
            def do_POST(self) -> None:
                if not self.path.endswith("/embeddings"):
                    super().do_POST()
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                texts = body.get("input")
                texts = [texts] if isinstance(texts, str) else list(texts or [])
                with fake.lock:
                    fake.embedding_inputs.append(texts)
                status, payload = fake._embeddings(body, texts)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def _embeddings(self, body: dict[str, Any], texts: list[str]) -> tuple[int, dict[str, Any]]:
        if self.embeddings_status != 200:
            error = {"type": "fake_error", "message": f"fake status {self.embeddings_status}"}
            return self.embeddings_status, {"error": error}
        rows: list[dict[str, Any]] = []
        for i, text in enumerate(texts):
            vec: Any = self.embed(text)
            if body.get("encoding_format") == "base64":
                vec = base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode()
            rows.append({"object": "embedding", "index": i, "embedding": vec})
        tokens = sum(estimate_tokens(t) for t in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return 200, {"object": "list", "data": rows, "model": body.get("model"), "usage": usage}
