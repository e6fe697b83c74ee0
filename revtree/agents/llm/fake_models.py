"""Fake models of known quality for the fake server: which model learns, which repeats.

``Climber`` is a responder for :class:`revtree.agents.llm.fake_server.FakeLLMServer`
that answers each coder call with the whole of one file in which one number (the line
``X = ...``) moved: up (better, for a task that maximises X) with the probability
``quality[model]`` of the model the request names, else down, by a random step so that
no two answers are alike. With ``repeat``, that share of the answers is instead one it
gave before, word for word (a model that repeats itself); with ``paraphrase``, that share
is one it gave before to a file with the same ``X``, with its number written with one more trailing
zero (the same program in other words: ``12.3`` as ``12.30``). With ``crash``, that share of
the answers also carry a line that makes the program fail (its ``X`` moved all the
same); asked to edit such a program (a debug), the model removes the line with the
chance ``fix``, else moves ``X`` and keeps the line. Seeded: one RNG per model, so the
answers of a model depend only on the seed and how often it was asked.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Mapping

from revtree.agents.llm.fake_server import FakeReply, FakeRequest, current_file

PROGRAM = '''"""A program whose score is X: the higher, the better."""

X = {x!r}


def score() -> float:
    return X
'''
EVALUATOR = """import json, os, prog
os.write(3, json.dumps({"score": prog.score()}).encode())
"""
VALUE = re.compile(r"^X = (\S+)$", re.M)
CRASH = 'raise SystemExit("a bug")'


class Climber:
    """A coder whose edits improve the score with a per-model probability (see above)."""

    def __init__(
        self,
        quality: Mapping[str, float],
        seed: int = 0,
        repeat: float = 0.0,
        path: str = "prog.py",
        crash: float = 0.0,
        fix: float = 0.0,
        paraphrase: float = 0.0,
    ) -> None:
        self.quality, self.seed, self.repeat, self.path = dict(quality), seed, repeat, path
        self.paraphrase = paraphrase
        self.given: dict[str, list[str]] = {}  # the X asked about -> the answers to it
        self.crash, self.fix = crash, fix
        self.rngs: dict[str, random.Random] = {}
        self.answers: list[str] = []
        self.asked: dict[str, int] = {}  # model -> coder calls
        self.repeats = 0
        self._lock = threading.Lock()

    def __call__(self, req: FakeRequest) -> FakeReply | str:
        text = current_file(req, self.path)
        found = VALUE.search(text or "")
        if found is None:  # a preflight ping, or a role with no file to edit
            return "OK"
        with self._lock:
            self.asked[req.model] = self.asked.get(req.model, 0) + 1
            rng = self.rngs.setdefault(req.model, random.Random(f"{self.seed}:{req.model}"))
            if self.answers and rng.random() < self.repeat:
                self.repeats += 1
                return rng.choice(self.answers)
            earlier = self.given.get(found.group(1), [])
            if earlier and self.paraphrase and rng.random() < self.paraphrase:
                self.repeats += 1
                return VALUE.sub(lambda m: f"X = {m.group(1)}0", rng.choice(earlier), count=1)
            x = float(found.group(1))
            broken = CRASH in (text or "")
            if broken and rng.random() < self.fix:
                broken = False  # a debug that finds the bug keeps the parent's X
            else:
                up = rng.random() < self.quality.get(req.model, 0.5)
                step = round(rng.uniform(0.5, 1.5), 4)
                x = round(x + (step if up else -step), 4)
                broken = broken or (self.crash > 0 and rng.random() < self.crash)
            program = PROGRAM.format(x=x) + (f"\n{CRASH}\n" if broken else "")
            answer = f"=== FILE: {self.path} ===\n```python\n{program}```\n"
            self.answers.append(answer)
            self.given.setdefault(found.group(1), []).append(answer)
            return answer
