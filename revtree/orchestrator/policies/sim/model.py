"""A simulated model for the agentic policy: a seeded heuristic stand-in for an LLM.

``SimulatedPolicyModel`` implements the :class:`~revtree.agents.llm.base.LLM` protocol.
It reads the tree summary that ``agentic.summarize`` writes (the prompt's ``user``
part), and answers in the policy's fixed form with a heuristic choice, in this order:

1. the whole tree is shown and has fewer than ``drafts`` drafts under the root:
   ``restart`` (draft from the root);
2. stuck (the best node is older than the last ``patience`` nodes): ``restart`` with
   probability ``p_restart``;
3. the best node has one evaluation and has at least two children, and the runner-up is
   within ``close`` of it (as a fraction of the range of the shown scores): ``verify``;
4. a failed leaf whose parent is among the three best nodes: ``debug`` it with
   probability ``p_debug``;
5. ``improve`` a random one of the three best with probability ``explore``, a
   ``crossover`` of the two best with probability ``p_crossover``, else ``improve`` the
   best.

With probability ``p_malformed`` it instead answers something unusable (prose without
fields, a node that does not exist, or debugging a node that did not fail), so the
policy's fallback to greedy is exercised. Every answer is drawn from an RNG seeded by
(seed, call number): the same prompts in the same order give the same answers. It
ignores "Budget spent", so its choices do not depend on the run's budget. It is *not*
an LLM: it has no knowledge of the task or the code, only of the summary.
"""

from __future__ import annotations

import random
import re
import threading
from dataclasses import dataclass

from revtree.agents.llm.base import Completion, Prompt, Usage, estimate_tokens

_LINE = re.compile(r"^\s*node (\d+) \(parent (\w+), (\w+), depth (\d+), evals (\d+)\): (\S+)", re.M)
_DIRECTION = re.compile(r"Scores: (higher|lower) is better")
_TOTAL = re.compile(r"^Nodes: (\d+)", re.M)


@dataclass(frozen=True)
class Seen:
    """One node as the summary shows it."""

    id: int
    parent: int | None
    operator: str
    evals: int
    score: float | None  # None: not succeeded
    status: str  # "succeeded", or the status shown instead of a score ("failed", ...)


@dataclass(frozen=True)
class Summary:
    """What the simulated model reads of a summary."""

    nodes: dict[int, Seen]
    higher: bool  # higher scores are better
    total: int  # nodes in the tree (shown or not)


def parse_summary(text: str) -> Summary:
    """The nodes shown in an agentic summary (by id), the direction and the tree size."""
    nodes: dict[int, Seen] = {}
    for m in _LINE.finditer(text):
        node_id, parent, op, _, evals, what = m.groups()
        try:
            score: float | None = float(what)
        except ValueError:
            score = None
        pid = int(parent) if parent.isdigit() else None
        status = "succeeded" if score is not None else what
        nodes[int(node_id)] = Seen(int(node_id), pid, op, int(evals), score, status)
    direction = _DIRECTION.search(text)
    total = _TOTAL.search(text)
    return Summary(
        nodes,
        direction is None or direction.group(1) == "higher",
        int(total.group(1)) if total else len(nodes),
    )


def answer(action: str, node: int | None = None, op: str = "", other: int | None = None) -> str:
    """An answer in the agentic policy's fixed form."""
    lines = [f"ACTION: {action}"]
    if node is not None:
        lines.append(f"NODE: {node}")
    if op:
        lines.append(f"OPERATOR: {op}")
    if other is not None:
        lines.append(f"OTHER: {other}")
    lines.append(f"REASON: simulated heuristic ({action} {op})".rstrip() + ".")
    return "\n".join(lines)


class SimulatedPolicyModel:
    """The heuristic of the module docstring behind the LLM protocol. Thread-safe."""

    def __init__(
        self,
        seed: int = 0,
        *,
        p_malformed: float = 0.1,
        drafts: int = 3,
        patience: int = 10,
        p_restart: float = 0.3,
        close: float = 0.05,
        p_debug: float = 0.3,
        explore: float = 0.2,
        p_crossover: float = 0.05,
        model: str = "simulated-policy",
    ) -> None:
        self.seed, self.model = seed, model
        self.p_malformed, self.drafts, self.patience = p_malformed, drafts, patience
        self.p_restart, self.close, self.p_debug = p_restart, close, p_debug
        self.explore, self.p_crossover = explore, p_crossover
        self.calls = self.malformed = 0
        self._lock = threading.Lock()

    def complete(self, prompt: Prompt, *, max_tokens: int, temperature: float) -> Completion:
        with self._lock:
            rng = random.Random(f"simulated-policy:{self.seed}:{self.calls}")
            self.calls += 1
            if rng.random() < self.p_malformed:
                self.malformed += 1
                text = self._malformed(rng, prompt.user)
            else:
                text = self.decide(prompt.user, rng)
        usage = Usage(estimate_tokens(prompt.chars()), estimate_tokens(text))
        return Completion(text, self.model, usage, 0.0)

    def ask(self, summary: str) -> str:
        """The agentic policy's ``Ask``: the summary in, the answer text out."""
        return self.complete(Prompt("", "", summary), max_tokens=400, temperature=0.0).text

    def decide(self, summary: str, rng: random.Random) -> str:
        """The heuristic choice for one summary (rules 1-5 of the module docstring)."""
        seen = parse_summary(summary)
        nodes, sign = seen.nodes, 1.0 if seen.higher else -1.0
        ok = sorted(
            (n for n in nodes.values() if n.score is not None),
            key=lambda n: (sign * (n.score or 0.0), -n.id),
            reverse=True,
        )
        drafts = sum(1 for n in nodes.values() if n.parent == 0 and n.operator == "draft")
        if not ok or (seen.total <= len(nodes) and drafts < self.drafts):
            return answer("restart")
        best, top = ok[0], ok[:3]
        if max(nodes) - best.id > self.patience and rng.random() < self.p_restart:
            return answer("restart")
        if self._verify(best, ok, nodes):
            return answer("verify", best.id)
        failed = self._debuggable(nodes, {n.id for n in top})
        if failed and rng.random() < self.p_debug:
            return answer("expand", rng.choice(failed), "debug")
        if len(top) > 1 and rng.random() < self.p_crossover:
            return answer("expand", best.id, "crossover", top[1].id)
        if rng.random() < self.explore:
            return answer("expand", rng.choice(top).id, "improve")
        return answer("expand", best.id, "improve")

    def _verify(self, best: Seen, ok: list[Seen], nodes: dict[int, Seen]) -> bool:
        children = sum(1 for n in nodes.values() if n.parent == best.id)
        if best.evals > 1 or children < 2 or len(ok) < 2:
            return False
        scores = [n.score or 0.0 for n in ok]
        spread = max(scores) - min(scores)
        return abs((best.score or 0.0) - (ok[1].score or 0.0)) <= self.close * spread

    @staticmethod
    def _debuggable(nodes: dict[int, Seen], top: set[int]) -> list[int]:
        parents = {n.parent for n in nodes.values()}
        return sorted(
            n.id
            for n in nodes.values()
            if n.status == "failed" and n.id not in parents and n.parent in top
        )

    @staticmethod
    def _malformed(rng: random.Random, summary: str) -> str:
        nodes = parse_summary(summary).nodes
        kind = rng.randrange(3)
        if kind == 0:
            return "I think we should keep going with the most promising branch."
        if kind == 1:
            return answer("expand", max(nodes, default=0) + 1000, "improve")
        done = [n.id for n in nodes.values() if n.score is not None]
        return answer("expand", rng.choice(done) if done else 0, "debug")
