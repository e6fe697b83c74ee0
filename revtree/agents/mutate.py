"""The offline program-mutation agents: a proposer and a coder that edit code, not knobs.

``MutationProposer`` draws, per node, a seed and a number of edits (``draft``: the
configured ``draft_edits``; ``debug``: one token swap, as a crash more often comes from
an operator than from a number; ``tune``: numbers only; otherwise 1..``max_edits`` of
either kind) and writes them in the proposal's ``plan``. ``MutationCoder`` applies that
many seeded mutations to the editable Python files of the parent, each one either

- a number literal: a float is multiplied by ``exp(N(0, scale))`` (0.0 becomes a small
  positive value), an int moves by +-1 or +-2 (never below 0); or
- a token swap: an operator or name is replaced by another of its ``swaps`` group
  (``+``/``-``, ``*``/``/``, ``min``/``max``, a task's own ``sin``/``cos``, ...).

Guarantees: the same proposal on the same files gives the same change; only editable
``.py`` files change, and where a file has EVOLVE-BLOCK markers only text between them;
formatting and comments outside the edited tokens are kept. Not guaranteed: that the
result runs (a swap to ``/`` may divide by zero: that is a failed candidate, which
``debug`` may repair by mutating again). Crossover has no second program here: it is
an ``improve`` of the first parent.
"""

from __future__ import annotations

import io
import json
import keyword
import math
import random
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from revtree.agents.base import Coder, Job, Proposal, Proposer, Refusal
from revtree.agents.edits import evolve_regions
from revtree.agents.knobs import KnobCoder, KnobProposer, derive_seed
from revtree.errors import EditError
from revtree.memory.records import Node
from revtree.tasks.load import matches
from revtree.tasks.spec import MutateAgent, TaskSpec


def offline_agents(spec: TaskSpec) -> tuple[Proposer, Coder]:
    """The offline proposer and coder that ``[agents] mode`` selects: knobs, or code
    mutations with ``mode = "mutate"``, and in ``auto`` when the task has no knobs (the
    knob proposer would have nothing to change)."""
    if spec.agents.mode == "mutate" or (spec.agents.mode == "auto" and not spec.knobs):
        cfg = spec.agents.mutate
        return MutationProposer(spec.search.seed, cfg), MutationCoder(spec.editable, cfg)
    proposer = KnobProposer.from_config(
        spec.knobs, spec.maximize, spec.search.seed, spec.agents.knobs
    )
    return proposer, KnobCoder(spec.knobs)


class MutationProposer:
    """Seeded by (run seed, node id): a resumed run proposes what the first would have."""

    def __init__(self, seed: int, config: MutateAgent) -> None:
        self.seed, self.config = seed, config

    def propose(self, job: Job) -> Proposal:
        return self.ask(job.node.id, job.parent, job.node.operator)

    def ask(self, node_id: int, parent: Node, operator: str) -> Proposal:
        """The mutation plan of node ``node_id``: depends only on (seed, node id)."""
        seed = derive_seed(self.seed, "mutate", node_id)
        if operator == "draft":
            edits = self.config.draft_edits
        elif operator == "debug":
            edits = 1
        else:
            edits = random.Random(seed).randint(1, self.config.max_edits)
        only = {"tune": "number", "debug": "swap"}.get(operator)
        what = only or "code"
        plan = json.dumps({"seed": seed, "edits": edits, "only": only})
        return Proposal(
            hypothesis=f"{operator} from node {parent.id}: {edits} random {what} mutation(s)",
            plan=plan,
        )

    def observe(self, node: Node) -> None:
        """Mutations are blind: nothing to learn."""

    def rebuild(self, nodes: Iterable[Node]) -> None:
        """Nothing to rebuild: every proposal depends only on (seed, node id)."""


@dataclass(frozen=True)
class Site:
    """A token that may be mutated: its file, character span and text."""

    path: str
    start: int
    end: int
    text: str
    kind: str  # "number" or "swap"


class MutationCoder:
    """Applies a ``MutationProposer`` plan to the parent's files."""

    def __init__(self, editable: Iterable[str], config: MutateAgent) -> None:
        self.editable, self.config = tuple(editable), config
        self.groups = {tok: g for g in config.swaps for tok in g}

    repairs = 0  # a plan is replayed exactly: repairing it would fail the same way

    def code(
        self, job: Job, proposal: Proposal, refusal: Refusal | None = None
    ) -> dict[str, bytes | None]:
        return self.write(proposal, job.files)

    def write(self, proposal: Proposal, files: Mapping[str, bytes]) -> dict[str, bytes | None]:
        """The plan of ``proposal`` applied to ``files``."""
        try:
            plan = json.loads(proposal.plan)
            rng, edits = random.Random(int(plan["seed"])), int(plan["edits"])
        except (ValueError, KeyError, TypeError) as e:
            raise EditError(f"not a mutation plan: {proposal.plan[:80]!r}") from e
        texts = {
            p: d.decode("utf-8")
            for p, d in sorted(files.items())
            if p.endswith(".py") and matches(p, self.editable)
        }
        for _ in range(edits):
            sites = [s for p, t in texts.items() for s in self.sites(p, t)]
            if plan.get("only"):
                sites = [s for s in sites if s.kind == plan["only"]]
            if not sites:
                raise EditError(f"nothing to mutate ({plan.get('only') or 'any'}) in the files")
            site = self._pick(rng, sites)
            text = texts[site.path]
            texts[site.path] = text[: site.start] + self.mutate(site, rng) + text[site.end :]
        return {p: t.encode() for p, t in texts.items() if t.encode() != files[p]}

    def _pick(self, rng: random.Random, sites: list[Site]) -> Site:
        numbers = [s for s in sites if s.kind == "number"]
        swaps = [s for s in sites if s.kind == "swap"]
        if numbers and (not swaps or rng.random() < self.config.p_number):
            return rng.choice(numbers)
        return rng.choice(swaps)

    def sites(self, path: str, text: str) -> list[Site]:
        """The mutable tokens of one file (inside EVOLVE blocks where it has them)."""
        regions = evolve_regions(text)
        offsets = _line_offsets(text)
        out = []
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        except (tokenize.TokenError, SyntaxError):
            return []  # a broken file has no reliable sites; debug mutates the others
        prev: tokenize.TokenInfo | None = None
        for tok in tokens:
            kind = self._kind(tok)
            before, prev = prev, (prev if tok.type in _TRIVIA else tok)
            if kind is None or (kind == "swap" and tok.type == tokenize.OP and not _binary(before)):
                continue
            start = offsets[tok.start[0] - 1] + tok.start[1]
            end = offsets[tok.end[0] - 1] + tok.end[1]
            if regions and not any(a <= start and end <= b for a, b in regions):
                continue
            out.append(Site(path, start, end, tok.string, kind))
        return out

    def _kind(self, tok: tokenize.TokenInfo) -> str | None:
        if tok.type == tokenize.NUMBER and _number(tok.string) is not None:
            return "number"
        if tok.type in (tokenize.OP, tokenize.NAME) and tok.string in self.groups:
            return "swap"
        return None

    def mutate(self, site: Site, rng: random.Random) -> str:
        """The new text of one site."""
        if site.kind == "swap":
            return rng.choice([t for t in self.groups[site.text] if t != site.text])
        value = _number(site.text)
        if isinstance(value, int):
            return str(max(0, value + rng.choice((-2, -1, 1, 2))))
        assert value is not None
        new = value * math.exp(rng.gauss(0, self.config.scale)) if value else rng.random()
        return _float_literal(new)


def _number(text: str) -> int | float | None:
    """The value of a plain int or float literal (None for hex, complex, ...)."""
    clean = text.replace("_", "")
    try:
        return int(clean) if clean.isdigit() else float(clean)
    except ValueError:
        return None


def _float_literal(value: float) -> str:
    text = f"{value:.4g}"
    return text if any(c in text for c in ".en") else text + ".0"


_TRIVIA = (tokenize.NL, tokenize.COMMENT)


def _binary(prev: tokenize.TokenInfo | None) -> bool:
    """Whether an operator after ``prev`` is a binary one: after an operand (a name
    that is not a keyword, a number, a string, a closing bracket), never a unary sign
    or an unpacking star (``f(*args)``, ``return -x``, ``[**d]``)."""
    if prev is None:
        return False
    if prev.type == tokenize.NAME:
        return not keyword.iskeyword(prev.string)
    if prev.type in (tokenize.NUMBER, tokenize.STRING):
        return True
    return prev.type == tokenize.OP and prev.string in (")", "]", "}")


def _line_offsets(text: str) -> list[int]:
    """Character offset of the start of each line (tokenize counts lines from 1)."""
    offsets, pos = [0], 0
    for line in text.splitlines(keepends=True):
        pos += len(line)
        offsets.append(pos)
    return offsets
