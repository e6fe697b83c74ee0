"""The offline agents: an Optuna knob proposer and a coder that writes knob values.

The proposer keeps an in-memory Optuna study, rebuilt from the run's own nodes on
resume (an RDB-backed study costs ~70 ms a trial; this costs well under one). Each
``ask`` uses a sampler seeded from (run seed, node id), so given the same finished
history a resumed run asks for the same values as an uninterrupted one.
"""

from __future__ import annotations

import ast
import hashlib
import math
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState, create_trial

from revtree.agents.base import Proposal
from revtree.errors import EditError
from revtree.memory.records import Node, NodeStatus
from revtree.tasks.load import knob_regex
from revtree.tasks.spec import Knob

optuna.logging.set_verbosity(optuna.logging.WARNING)


def derive_seed(seed: int, *parts: object) -> int:
    digest = hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).digest()
    return int.from_bytes(digest[:4], "little")


def distribution(knob: Knob) -> BaseDistribution:
    if knob.type == "categorical":
        return CategoricalDistribution(list(knob.choices or ()))
    assert knob.low is not None and knob.high is not None
    if knob.type == "int":
        return IntDistribution(
            int(knob.low), int(knob.high), log=knob.log, step=int(knob.step or 1)
        )
    return FloatDistribution(knob.low, knob.high, log=knob.log, step=knob.step)


def read_knobs(knobs: Iterable[Knob], files: Mapping[str, bytes]) -> dict[str, Any]:
    """The knob values as they stand in ``files`` (unparsable ones are left out)."""
    values: dict[str, Any] = {}
    for knob in knobs:
        text = files.get(knob.file, b"").decode("utf-8", errors="replace")
        match = knob_regex(knob).search(text)
        if match is None:
            continue
        try:
            values[knob.name] = _parse(knob, match.group(1))
        except (ValueError, SyntaxError):
            continue
    return values


def _parse(knob: Knob, raw: str) -> Any:
    value = ast.literal_eval(raw) if knob.pattern is None or knob.type != "categorical" else raw
    if knob.type == "int":
        return int(value)
    if knob.type == "float":
        return float(value)
    return value


def _literal(knob: Knob, value: Any) -> str:
    if knob.type == "int":
        return str(int(value))
    if knob.type == "float":
        return repr(float(value))
    return repr(value) if knob.pattern is None else str(value)


class KnobCoder:
    """Writes knob values into the files that hold them."""

    def __init__(self, knobs: Iterable[Knob]) -> None:
        self.knobs = {k.name: k for k in knobs}

    def code(self, proposal: Proposal, files: Mapping[str, bytes]) -> dict[str, bytes | None]:
        texts: dict[str, str] = {}
        for name, value in proposal.knobs.items():
            knob = self.knobs.get(name)
            if knob is None:
                raise EditError(f"unknown knob {name!r}")
            if knob.file not in files and knob.file not in texts:
                raise EditError(f"knob {name!r}: file {knob.file!r} is not in the parent revision")
            text = texts.get(knob.file) or files[knob.file].decode("utf-8")
            match = knob_regex(knob).search(text)
            if match is None:
                raise EditError(f"knob {name!r}: its location is gone from {knob.file}")
            text = text[: match.start(1)] + _literal(knob, value) + text[match.end(1) :]
            texts[knob.file] = text
        return {
            path: text.encode("utf-8")
            for path, text in texts.items()
            if text.encode("utf-8") != files.get(path)
        }


class KnobProposer:
    """Optuna ask/tell over the task's knobs. Thread-safe."""

    def __init__(
        self,
        knobs: Iterable[Knob],
        maximize: bool,
        seed: int,
        sampler: str = "tpe",
        n_startup_trials: int = 8,
    ) -> None:
        self.knobs = list(knobs)
        self.maximize, self.seed = maximize, seed
        self.sampler_name, self.n_startup = sampler, n_startup_trials
        self.dists = {k.name: distribution(k) for k in self.knobs}
        self.study = optuna.create_study(direction="maximize" if maximize else "minimize")
        self._trials: dict[int, int] = {}  # node id -> trial number
        self._lock = threading.Lock()

    def _sampler(self, node_id: int) -> optuna.samplers.BaseSampler:
        seed = derive_seed(self.seed, "knobs", node_id)
        if self.sampler_name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=self.n_startup, multivariate=True, constant_liar=True
        )

    def rebuild(self, nodes: Iterable[Node]) -> None:
        """Load the history of a run (nodes in id order) into a fresh study."""
        with self._lock:
            for node in sorted(nodes, key=lambda n: n.id):
                params = self._params(node)
                if params is None:
                    continue
                if node.status.is_finished():
                    self._add(node, params)
                else:
                    self.study.add_trial(
                        create_trial(
                            params=params, distributions=self._d(params), state=TrialState.RUNNING
                        )
                    )
                    self._trials[node.id] = self.study.trials[-1].number

    def propose(self, node_id: int, parent: Node, operator: str) -> Proposal:
        if not self.knobs:
            return Proposal(hypothesis="no knobs to tune: re-evaluate the parent unchanged")
        with self._lock:
            self.study.sampler = self._sampler(node_id)
            trial = self.study.ask(self.dists)
            self._trials[node_id] = trial.number
            values = dict(trial.params)
        before = (parent.proposal or {}).get("knobs", {})
        changes = [
            f"{k} {_fmt(before.get(k))}->{_fmt(v)}" for k, v in values.items() if before.get(k) != v
        ]
        text = f"{operator} from node {parent.id}: " + (", ".join(changes) or "same values")
        return Proposal(hypothesis=text, knobs=values)

    def observe(self, node: Node) -> None:
        params = self._params(node)
        if params is None:
            return
        with self._lock:
            number = self._trials.pop(node.id, None)
            if number is None:
                self._add(node, params)
            elif node.status is NodeStatus.SUCCEEDED and _finite(node.score):
                self.study.tell(number, node.score)
            else:
                self.study.tell(number, state=TrialState.FAIL)

    def _params(self, node: Node) -> dict[str, Any] | None:
        knobs = (node.proposal or {}).get("knobs") or {}
        params = {k: v for k, v in knobs.items() if k in self.dists}
        if not params or not all(_contains(self.dists[k], v) for k, v in params.items()):
            return None
        return params

    def _d(self, params: Mapping[str, Any]) -> dict[str, BaseDistribution]:
        return {k: self.dists[k] for k in params}

    def _add(self, node: Node, params: dict[str, Any]) -> None:
        ok = node.status is NodeStatus.SUCCEEDED and _finite(node.score)
        self.study.add_trial(
            create_trial(
                params=params,
                distributions=self._d(params),
                value=node.score if ok else None,
                state=TrialState.COMPLETE if ok else TrialState.FAIL,
            )
        )


def _contains(dist: BaseDistribution, value: Any) -> bool:
    try:
        return bool(dist._contains(dist.to_internal_repr(value)))
    except (ValueError, TypeError):
        return False


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
