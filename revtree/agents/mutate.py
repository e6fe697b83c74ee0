"""The offline program-mutation agents: a proposer and a coder that edit code, not knobs.

``MutationProposer`` draws, per node, a seed and a number of edits (``draft``: the
configured ``draft_edits``; ``tune``: numbers only; ``debug``: it undoes all but the
least suspect change of the failed parent (``undo``), plus one new edit where the parent
made only one; otherwise 1..``max_edits``), applies them to the parent's files to
name them in the hypothesis, and writes the plan: the seed, the edits, what to undo, the
kinds' weights and the sites to avoid. ``MutationCoder`` replays that plan. Each edit
picks a kind by weight, then a site of that kind:

- a number literal, by its place: ``constant`` (the value of a module-level
  assignment), ``threshold`` (a comparison's operand), ``bound`` (an argument of
  ``range``), ``setting`` (another assignment's value, a default, a keyword argument),
  ``coefficient`` (another float) or ``integer`` (another int: an index, an offset). A
  float is multiplied by ``exp(N(0, scale))`` (0.0 becomes a small positive value); an
  int of the first four kinds from 3 up is scaled the same way and rounded, any other
  int moves by +-1 or +-2 (never below 0, nor below 1 for those four kinds if it was);
- a token swap: an operator or name replaced by another of its ``swaps`` group
  (``+``/``-``, ``*``/``/``, ``min``/``max``, a task's own ``sin``/``cos``, ...).

The number kinds share ``p_number`` by ``BASE_WEIGHTS`` (the places that set a value
first: they keep the program running), swaps the rest. The proposer learns from each
finished node: a kind's weight follows how often it kept the program running or broke
it (a crash, a timeout, no metrics), and a site that broke it is avoided (its weight
times ``AVOID`` per breakage; the edits of a node share the blame).

Guarantees: the same plan on the same files gives the same change; the seed and the
number of edits depend only on (run seed, node id), the weights, the sites to avoid and
what a debug undoes on the finished nodes observed, so a resumed run that rebuilt the
same finished history plans the same; only editable ``.py`` files change, and where a
file has EVOLVE-BLOCK markers only text between them; formatting and comments outside
the edited tokens are kept. Not guaranteed: that the result runs (a swap to ``/`` may
divide by zero: that is a failed candidate, which ``debug`` may repair). Crossover has
no second program here: it is an ``improve`` of the first parent.
"""

from __future__ import annotations

import ast
import io
import json
import keyword
import math
import random
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from revtree.agents.base import Coder, Job, Learner, Proposal, Refusal
from revtree.agents.driver import MUTATE, driver
from revtree.agents.edits import evolve_regions
from revtree.agents.knobs import KnobCoder, KnobProposer, derive_seed
from revtree.errors import EditError
from revtree.memory.records import Node, NodeStatus
from revtree.tasks.names import matches
from revtree.tasks.spec import MutateAgent, TaskSpec

BASE_WEIGHTS = {
    "constant": 6.0,
    "threshold": 2.0,
    "bound": 2.0,
    "setting": 0.5,
    "coefficient": 1.5,
    "integer": 0.3,
    "swap": 1.0,  # its share is 1 - p_number, whatever this says
}
"""The share of each kind of number site (before learning): a module-level constant, a
comparison's threshold or a loop bound keeps the program running far more often than
an index or an offset (and a function's default may be part of the problem)."""
RISK = {
    "swap": 0.6,
    "integer": 0.4,
    "setting": 0.3,
    "coefficient": 0.2,
    "bound": 0.2,
    "threshold": 0.15,
    "constant": 0.1,
}
"""The chance that a change of each kind breaks the program, before the run has seen any:
which of a failed candidate's changes a debug undoes first."""
BROKEN = ("crash", "timeout", "metrics")  # a node that these fail broke the program
AVOID = 0.05  # a site's weight is multiplied by this for each breakage it shared


def offline_agents(
    spec: TaskSpec, baseline: Mapping[str, Any] | None = None
) -> tuple[Learner, Coder]:
    """The offline proposer and coder that the driver names (``agents.driver``): knobs
    (from the root's values, ``baseline``), or code mutations."""
    if driver(spec).name == MUTATE:
        cfg = spec.agents.mutate
        mutation = MutationProposer(spec.search.seed, cfg, spec.editable)
        return mutation, MutationCoder(spec.editable, cfg)
    proposer = KnobProposer.from_config(
        spec.knobs, spec.maximize, spec.search.seed, spec.agents.knobs, baseline
    )
    return proposer, KnobCoder(spec.knobs)


class MutationProposer:
    """Plans each candidate's mutations from (run seed, node id) and what the run has
    learnt: the share of each kind of site (``weights``) and the sites to avoid."""

    def __init__(self, seed: int, config: MutateAgent, editable: Iterable[str] = ()) -> None:
        self.seed, self.config = seed, config
        self.coder = MutationCoder(editable, config)
        self.kinds: dict[str, list[float]] = {}  # kind -> [ran, broke], shared by edits
        self.broke: dict[str, float] = {}  # site key -> breakages it shared
        self.seen: set[int] = set()

    def propose(self, job: Job) -> Proposal:
        proposal = self.ask(job.node.id, job.parent, job.node.operator)
        plan = json.loads(proposal.plan)
        try:
            _, done = self.coder.apply(plan, job.files)
        except EditError:
            return proposal  # the coder refuses it, with the reason
        plan["sites"] = [
            {"key": m.site.key, "kind": m.site.kind, "old": m.site.text}
            for m in done
            if m.site.kind != "revert"
        ]
        what = "; ".join(m.describe() for m in done)
        return Proposal(f"{proposal.hypothesis}: {what}", plan=json.dumps(plan))

    def ask(self, node_id: int, parent: Node, operator: str) -> Proposal:
        """The mutation plan of node ``node_id``: its seed and number of edits depend only
        on (seed, node id); the weights and the sites to avoid on the nodes observed."""
        seed = derive_seed(self.seed, "mutate", node_id)
        revert: list[dict[str, str]] = []
        if operator == "draft":
            edits = self.config.draft_edits
        elif operator == "debug":
            revert = self.undo(parent, random.Random(seed))
            edits = 1 if len(_sites_of(parent)) <= 1 else 0
        else:
            edits = random.Random(seed).randint(1, self.config.max_edits)
        only = "number" if operator == "tune" else None
        plan = {
            "seed": seed,
            "edits": edits,
            "only": only,
            "weights": self.weights(),
            "avoid": {k: round(v, 3) for k, v in sorted(self.broke.items())},
            "revert": revert,
        }
        what = f"{edits} {only or 'code'} mutation(s)"
        if revert:
            undone = f"{len(revert)} of node {parent.id}'s changes"
            what = f"undo {undone}" + (f", {what}" if edits else "")
        return Proposal(
            hypothesis=f"{operator} from node {parent.id}: {what}", plan=json.dumps(plan)
        )

    def undo(self, parent: Node, rng: random.Random) -> list[dict[str, str]]:
        """The changes of ``parent`` a debug undoes: all but the least suspect (the
        only one, if it made one). A change is the more suspect the more breakages its
        site shared and the more often its kind broke the program (``RISK`` before the
        run has seen any)."""
        sites = _sites_of(parent)

        def suspicion(site: tuple[str, str, str]) -> tuple[float, float]:
            ran, broke = self.kinds.get(site[1], [0.0, 0.0])
            risk = (broke + RISK.get(site[1], 0.5)) / (ran + broke + 1)
            return self.broke.get(site[0], 0.0) + risk, rng.random()

        ranked = sorted(sites, key=suspicion, reverse=True)
        return [{"key": key, "text": old} for key, _, old in ranked[: max(1, len(ranked) - 1)]]

    def weights(self) -> dict[str, float]:
        return kind_weights(self.config, self.kinds)

    def observe(self, node: Node) -> None:
        """Learn which kinds and sites of a finished node's mutations broke the program
        (a crash, a timeout, no metrics) or kept it running; each edit shares the blame."""
        broke = node.status is NodeStatus.FAILED and node.error_kind in BROKEN
        ran = node.status is NodeStatus.SUCCEEDED
        sites = _sites_of(node)
        if node.id in self.seen or not (broke or ran) or not sites:
            return
        self.seen.add(node.id)
        share = 1 / len(sites)
        for key, kind, _ in sites:
            counts = self.kinds.setdefault(kind, [0.0, 0.0])
            counts[1 if broke else 0] += share
            if broke:
                self.broke[key] = self.broke.get(key, 0.0) + share

    def rebuild(self, nodes: Iterable[Node]) -> None:
        """Learn a resumed run's finished nodes, in id order, as the live run did."""
        for node in sorted(nodes, key=lambda n: n.id):
            self.observe(node)


def kind_weights(config: MutateAgent, counts: Mapping[str, list[float]]) -> dict[str, float]:
    """Each kind's share: ``p_number`` split over the number kinds by ``BASE_WEIGHTS``,
    the rest to swaps, each times (ran + 1) / (tried + 2) * 2 from ``counts`` (kind ->
    [ran, broke]): a kind that keeps breaking the program fades, one that runs grows."""
    numbers = sum(w for k, w in BASE_WEIGHTS.items() if k != "swap")
    out = {}
    for kind, w in BASE_WEIGHTS.items():
        share = 1 - config.p_number if kind == "swap" else w * config.p_number / numbers
        ran, broke = counts.get(kind, [0.0, 0.0])
        out[kind] = round(share * (ran + 1) / (ran + broke + 2) * 2, 6)
    return out


def _sites_of(node: Node) -> list[tuple[str, str, str]]:
    """(key, kind, text before) of each site a node's mutation plan changed, once each
    (a site changed twice: its text before the first change)."""
    try:
        plan = json.loads((node.proposal or {}).get("plan") or "{}")
        sites = [(str(s["key"]), str(s["kind"]), str(s["old"])) for s in plan.get("sites") or ()]
    except (ValueError, TypeError, KeyError, AttributeError):
        return []
    first: dict[str, tuple[str, str, str]] = {}
    for site in sites:
        first.setdefault(site[0], site)
    return list(first.values())


@dataclass(frozen=True)
class Site:
    """A token that may be mutated: its file, character span and text, its kind (a
    number's place in the code, or ``swap``) and a key stable across mutations (path,
    line, and its rank among the line's sites: a mutation never adds or drops one)."""

    path: str
    start: int
    end: int
    text: str
    kind: str
    key: str = ""


@dataclass(frozen=True)
class Mutation:
    """One applied edit: the site and its new text."""

    site: Site
    new: str

    def describe(self) -> str:
        line = self.site.key.rsplit(":", 1)[0]
        return f"{line} {self.site.text} -> {self.new} ({self.site.kind})"


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
            int(plan["seed"]), int(plan["edits"])
        except (ValueError, KeyError, TypeError) as e:
            raise EditError(f"not a mutation plan: {proposal.plan[:80]!r}") from e
        texts, _ = self.apply(plan, files)
        return {p: t.encode() for p, t in texts.items() if t.encode() != files[p]}

    def apply(
        self, plan: Mapping[str, Any], files: Mapping[str, bytes]
    ) -> tuple[dict[str, str], list[Mutation]]:
        """The editable texts after the plan's mutations, and the mutations, in order."""
        rng, edits = random.Random(int(plan["seed"])), int(plan["edits"])
        weights = {**kind_weights(self.config, {}), **(plan.get("weights") or {})}
        avoid = plan.get("avoid") or {}
        texts = {
            p: d.decode("utf-8")
            for p, d in sorted(files.items())
            if p.endswith(".py") and matches(p, self.editable)
        }
        done: list[Mutation] = [self._revert(texts, r) for r in plan.get("revert") or ()]
        for _ in range(edits):
            sites = [s for p, t in texts.items() for s in self.sites(p, t)]
            if plan.get("only") == "number":
                sites = [s for s in sites if s.kind != "swap"]
            elif plan.get("only"):
                sites = [s for s in sites if s.kind == plan["only"]]
            if not sites:
                raise EditError(f"nothing to mutate ({plan.get('only') or 'any'}) in the files")
            site = self._pick(rng, sites, weights, avoid)
            new, text = self.mutate(site, rng), texts[site.path]
            texts[site.path] = text[: site.start] + new + text[site.end :]
            done.append(Mutation(site, new))
        return texts, done

    def _revert(self, texts: dict[str, str], revert: Mapping[str, str]) -> Mutation:
        """Put back the text a site had (a debug undoing its parent's change)."""
        key, old = str(revert["key"]), str(revert["text"])
        path = key.rsplit(":", 2)[0]
        site = next((s for s in self.sites(path, texts.get(path, "")) if s.key == key), None)
        if site is None:
            raise EditError(f"the site {key} to undo is gone")
        text = texts[path]
        texts[path] = text[: site.start] + old + text[site.end :]
        return Mutation(Site(path, site.start, site.end, site.text, "revert", key), old)

    def _pick(
        self,
        rng: random.Random,
        sites: list[Site],
        weights: Mapping[str, float],
        avoid: Mapping[str, float],
    ) -> Site:
        """A kind by its weight (among the kinds present), then a site of that kind, each
        weighted down by AVOID ** the breakages it shared."""
        kinds = sorted({s.kind for s in sites})
        shares = [max(float(weights.get(k, 0.0)), 1e-6) for k in kinds]
        kind = rng.choices(kinds, shares)[0]
        of_kind = [s for s in sites if s.kind == kind]
        return rng.choices(of_kind, [AVOID ** float(avoid.get(s.key, 0)) for s in of_kind])[0]

    def sites(self, path: str, text: str) -> list[Site]:
        """The mutable tokens of one file (inside EVOLVE blocks where it has them)."""
        regions = evolve_regions(text)
        offsets = _line_offsets(text)
        places = number_places(text)
        out: list[Site] = []
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        except (tokenize.TokenError, SyntaxError):
            return []  # a broken file has no reliable sites; debug mutates the others
        lines = text.splitlines()
        prev: tokenize.TokenInfo | None = None
        rank: dict[int, int] = {}
        for tok in tokens:
            kind = self._kind(tok)
            before, prev = prev, (prev if tok.type in _TRIVIA else tok)
            if kind is None or (kind == "swap" and tok.type == tokenize.OP and not _binary(before)):
                continue
            line = tok.start[0]
            if kind == "number":
                column = len(lines[line - 1][: tok.start[1]].encode())
                other = "integer" if tok.string.isdigit() else "coefficient"
                kind = places.get((line, column), other)
            start = offsets[line - 1] + tok.start[1]
            end = offsets[tok.end[0] - 1] + tok.end[1]
            rank[line] = rank.get(line, -1) + 1
            if regions and not any(a <= start and end <= b for a, b in regions):
                continue
            out.append(Site(path, start, end, tok.string, kind, f"{path}:{line}:{rank[line]}"))
        return out

    def _kind(self, tok: tokenize.TokenInfo) -> str | None:
        if tok.type == tokenize.NUMBER and _number(tok.string) is not None:
            return "number"
        if tok.type in (tokenize.OP, tokenize.NAME) and tok.string in self.groups:
            return "swap"
        return None

    def mutate(self, site: Site, rng: random.Random) -> str:
        """The new text of one site: a swap takes another token of its group; a float is
        scaled; an int from 3 up that sets a value (not an ``integer``) is scaled too,
        kept at least 1; any other int moves by 1 or 2."""
        if site.kind == "swap":
            return rng.choice([t for t in self.groups[site.text] if t != site.text])
        value = _number(site.text)
        if isinstance(value, int) and (site.kind == "integer" or value < 3):
            floor = 1 if value >= 1 and site.kind != "integer" else 0
            steps = [d for d in (-2, -1, 1, 2) if value + d >= floor] or [1]
            return str(value + rng.choice(steps))
        assert value is not None
        factor = math.exp(rng.gauss(0, self.config.scale))
        if isinstance(value, int):
            scaled = max(1, round(value * factor))
            return str(scaled if scaled != value else value + rng.choice((-1, 1)))
        return _float_literal(value * factor if value else rng.random())


def number_places(text: str) -> dict[tuple[int, int], str]:
    """(line, byte column) -> kind of each number literal that sets a value: ``constant``
    (a module-level assignment's value), ``setting`` (another assignment's value, a
    default, a keyword argument), ``threshold`` (a comparison's operand) or ``bound`` (an
    argument of ``range``), with its sign."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    out: dict[tuple[int, int], str] = {}

    def mark(node: ast.AST | None, kind: str) -> None:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            node = node.operand
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            out.setdefault((node.lineno, node.col_offset), kind)

    for stmt in tree.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign):
            mark(stmt.value, "constant")
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.keyword):
            mark(node.value, "setting")
        elif isinstance(node, ast.arguments):
            for d in [*node.defaults, *node.kw_defaults]:
                mark(d, "setting")
        elif isinstance(node, ast.Compare):
            for o in [node.left, *node.comparators]:
                mark(o, "threshold")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "range":
            for a in node.args:
                mark(a, "bound")
    return out


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
