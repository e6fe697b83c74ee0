"""The offline agents: an Optuna knob proposer, and the coder that writes knob values
(``knob_text``, where it lives without Optuna; its names are re-exported here).

The proposer keeps an in-memory Optuna study, rebuilt from the run's own nodes on
resume (an RDB-backed study costs ~70 ms a trial; this costs well under one). Each
``ask`` uses a sampler seeded from (run seed, node id), so given the same finished
history a resumed run asks for the same values as an uninterrupted one.

With ``sampler="local"`` an ``improve``, ``debug`` or ``crossover`` does not ask the
study: it perturbs the parent's values (for crossover, the first parent's) with a
``random.Random`` seeded from (run seed, node id), so it is as reproducible. Each knob
changes with probability ``local_share`` (at least one always does, if any can): a
number by a Gaussian step of std ``local_scale`` times its range, in log space for a log
knob, then rounded to its int or step grid and clipped to the range; a categorical to
another of its choices. A knob the parent lacks (the root's, unless ``baseline`` holds
it) is drawn uniformly. Such a proposal enters the study as a RUNNING trial, exactly as
``rebuild`` enters an unfinished node, and ``observe`` tells it, so the study learns
from every node and a rebuilt study equals the live one. ``draft`` and ``tune`` (the
``optuna`` policy's operator: the study alone decides) ask the TPE study as ``"tpe"``.
"""

from __future__ import annotations

import math
import random
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

from revtree.agents.base import Job, Proposal
from revtree.agents.knob_text import KnobCoder, derive_seed, read_knobs
from revtree.memory.records import TWIN, Node, NodeStatus
from revtree.tasks.spec import Knob, KnobAgent

__all__ = ["KnobCoder", "KnobProposer", "derive_seed", "distribution", "read_knobs"]

optuna.logging.set_verbosity(optuna.logging.WARNING)

LOCAL_OPERATORS = frozenset({"improve", "debug", "crossover"})
"""The operators that ``sampler="local"`` answers near the parent."""


def distribution(knob: Knob) -> BaseDistribution:
    if knob.type == "categorical":
        return CategoricalDistribution(list(knob.choices or ()))
    assert knob.low is not None and knob.high is not None
    if knob.type == "int":
        return IntDistribution(
            int(knob.low), int(knob.high), log=knob.log, step=int(knob.step or 1)
        )
    return FloatDistribution(knob.low, knob.high, log=knob.log, step=knob.step)


class KnobProposer:
    """Optuna ask/tell over the task's knobs. Thread-safe."""

    def __init__(
        self,
        knobs: Iterable[Knob],
        maximize: bool,
        seed: int,
        sampler: str = "tpe",
        n_startup_trials: int = 8,
        *,
        local_scale: float = 0.2,
        local_share: float = 0.5,
        baseline: Mapping[str, Any] | None = None,
    ) -> None:
        self.knobs = list(knobs)
        self.maximize, self.seed = maximize, seed
        self.sampler_name, self.n_startup = sampler, n_startup_trials
        self.local_scale, self.local_share = local_scale, local_share
        self.baseline: dict[str, Any] = dict(baseline or {})  # the root's values
        self.dists = {k.name: distribution(k) for k in self.knobs}
        self.study = optuna.create_study(direction="maximize" if maximize else "minimize")
        self._trials: dict[int, int] = {}  # node id -> trial number
        self._lock = threading.Lock()

    @classmethod
    def from_config(
        cls,
        knobs: Iterable[Knob],
        maximize: bool,
        seed: int,
        config: KnobAgent,
        baseline: Mapping[str, Any] | None = None,
    ) -> KnobProposer:
        """The proposer that a task's ``[agents.knobs]`` section describes."""
        return cls(
            knobs,
            maximize,
            seed,
            config.sampler,
            config.n_startup_trials,
            local_scale=config.local_scale,
            local_share=config.local_share,
            baseline=baseline,
        )

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
                    self._add_running(node.id, params)

    def propose(self, job: Job) -> Proposal:
        return self.ask(job.node.id, job.parent, job.node.operator)

    def ask(self, node_id: int, parent: Node, operator: str) -> Proposal:
        """The next values to try for node ``node_id`` (an Optuna ask, or a local step
        from the parent's values)."""
        if not self.knobs:
            return Proposal(hypothesis="no knobs to tune: re-evaluate the parent unchanged")
        before = (parent.proposal or {}).get("knobs", {})
        local = self.sampler_name == "local" and operator in LOCAL_OPERATORS
        with self._lock:
            if local:
                before = self._start(parent)
                values = self._short(self._perturb(node_id, before))
                self._add_running(node_id, values)
            else:
                self.study.sampler = self._sampler(node_id)
                trial = self.study.ask(self.dists)
                self._trials[node_id] = trial.number
                values = self._short(dict(trial.params))
                for name, value in values.items():  # the trial holds what the code will
                    if value != trial.params[name]:
                        dist = self.dists[name]
                        self.study._storage.set_trial_param(
                            trial._trial_id, name, dist.to_internal_repr(value), dist
                        )
        changes = [
            f"{k} {_fmt(before.get(k))}->{_fmt(v)}" for k, v in values.items() if before.get(k) != v
        ]
        text = f"{operator} from node {parent.id}: " + (", ".join(changes) or "same values")
        return Proposal(hypothesis=text, knobs=values)

    def _short(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` with each float knob rounded by :func:`_shortest`, so that the code,
        the log and the proposal hold the same short number."""
        return {k: _shortest(self.dists[k], v) if k in self.dists else v for k, v in values.items()}

    def _start(self, parent: Node) -> dict[str, Any]:
        """The parent's values, else the baseline's, put on each knob's range and grid."""
        given = (parent.proposal or {}).get("knobs") or {}
        start: dict[str, Any] = {}
        for name, dist in self.dists.items():
            for value in (given.get(name), self.baseline.get(name)):
                value = _onto(dist, value)
                if value is not None:
                    start[name] = value
                    break
        return start

    def _perturb(self, node_id: int, start: Mapping[str, Any]) -> dict[str, Any]:
        rng = random.Random(derive_seed(self.seed, "local", node_id))
        values = {n: start[n] if n in start else _uniform(d, rng) for n, d in self.dists.items()}
        movable = [n for n, d in self.dists.items() if _movable(d)]
        chosen = [n for n in movable if rng.random() < self.local_share]
        if not chosen and movable:
            chosen = [rng.choice(movable)]
        for name in chosen:
            values[name] = _step(self.dists[name], values[name], rng, self.local_scale)
        return values

    def observe(self, node: Node) -> None:
        params = self._params(node)
        if params is None:
            return
        with self._lock:
            number = self._trials.pop(node.id, None)
            if number is None:
                self._add(node, params)
            elif (value := self._value(node, params)) is not None:
                self.study.tell(number, value)
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

    def _add_running(self, node_id: int, params: dict[str, Any]) -> None:
        """Enter values that no ``ask`` made as an in-flight trial, for ``observe``."""
        self.study.add_trial(
            create_trial(params=params, distributions=self._d(params), state=TrialState.RUNNING)
        )
        self._trials[node_id] = self.study.get_trials(deepcopy=False)[-1].number

    def _add(self, node: Node, params: dict[str, Any]) -> None:
        value = self._value(node, params)
        self.study.add_trial(
            create_trial(
                params=params,
                distributions=self._d(params),
                value=value,
                state=TrialState.FAIL if value is None else TrialState.COMPLETE,
            )
        )

    def _value(self, node: Node, params: Mapping[str, Any]) -> float | None:
        """What the study is told of a finished node: its score; for a candidate refused
        unevaluated as a near twin (``TWIN``), the score of the same values tried before
        (so the sampler learns them, rather than a failure it would ask again); else None."""
        if node.status is NodeStatus.SUCCEEDED and _finite(node.score):
            return node.score
        if node.error_kind != TWIN:
            return None
        done = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        same = [t.value for t in done if t.params == dict(params) and t.value is not None]
        return same[-1] if same else None


# -- local moves (numbers in Optuna's internal space: the log for a log knob) ---------


def _span(dist: IntDistribution | FloatDistribution) -> tuple[float, float]:
    lo, hi = float(dist.low), float(dist.high)
    return (math.log(lo), math.log(hi)) if dist.log else (lo, hi)


def _internal(dist: IntDistribution | FloatDistribution, value: float) -> float:
    return math.log(value) if dist.log else float(value)


def _snap(dist: IntDistribution | FloatDistribution, x: float) -> int | float:
    """The value at internal ``x``, on the knob's grid and within its range."""
    value = math.exp(x) if dist.log else x
    if dist.step is not None:
        value = dist.low + round((value - dist.low) / dist.step) * dist.step
    value = min(max(value, dist.low), dist.high)
    return round(value) if isinstance(dist, IntDistribution) else _shortest(dist, float(value))


def _onto(dist: BaseDistribution, value: Any) -> Any:
    """``value`` as a valid value of ``dist`` (a number clipped and snapped), or None."""
    if isinstance(dist, CategoricalDistribution):
        return value if value is not None and _contains(dist, value) else None
    assert isinstance(dist, IntDistribution | FloatDistribution)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    if _contains(dist, value):  # as it is: exp(log(x)) need not be x
        return int(value) if isinstance(dist, IntDistribution) else float(value)
    return _snap(dist, _internal(dist, min(max(value, dist.low), dist.high)))


def _uniform(dist: BaseDistribution, rng: random.Random) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return rng.choice(dist.choices)
    assert isinstance(dist, IntDistribution | FloatDistribution)
    return _snap(dist, rng.uniform(*_span(dist)))


def _movable(dist: BaseDistribution) -> bool:
    if isinstance(dist, CategoricalDistribution):
        return len(set(dist.choices)) > 1
    assert isinstance(dist, IntDistribution | FloatDistribution)
    return dist.high > dist.low


def _step(dist: BaseDistribution, value: Any, rng: random.Random, scale: float) -> Any:
    """A different value near ``value`` (of a movable ``dist``)."""
    if isinstance(dist, CategoricalDistribution):
        return rng.choice([c for c in dist.choices if c != value])
    assert isinstance(dist, IntDistribution | FloatDistribution)
    lo, hi = _span(dist)
    x = _internal(dist, value)
    noise = rng.gauss(0.0, scale * (hi - lo))
    new = _snap(dist, min(max(x + noise, lo), hi))
    if new != value:
        return new
    # rounded or clipped back onto the value: the next grid point (or a reflected step)
    # the noise's way, else the other way
    for way in (1.0, -1.0) if noise > 0 else (-1.0, 1.0):
        if (way > 0 and value >= dist.high) or (way < 0 and value <= dist.low):
            continue
        if dist.step is not None:
            near = _snap(dist, _internal(dist, value + way * dist.step))
        else:  # a step too small to show in the value's short form: a longer one
            move = abs(noise) or (hi - lo) * 1e-6
            near = value
            for _ in range(64):
                near = _snap(dist, min(max(x + way * move, lo), hi))
                if near != value:
                    break
                move *= 2
        if near != value:
            return near
    return value


def _shortest(dist: BaseDistribution, value: Any) -> Any:
    """A float knob's sampled ``value`` at the precision the knob needs, so that it is
    written into the user's code as a short literal (``0.4697``, not
    ``0.4697358999576485``): a knob with a step to a tenth of its step's decimals, a log
    knob to 4 significant digits, any other to 1/10,000 of its range (at least 4 significant
    digits); kept within the range. Ints and categories are returned as they are."""
    if not isinstance(dist, FloatDistribution) or not isinstance(value, float):
        return value
    if not math.isfinite(value) or value == 0:
        return value
    if dist.step is not None:
        places = 1 - math.floor(math.log10(dist.step))
    else:
        digits = 4 - 1 - math.floor(math.log10(abs(value)))
        span = dist.high - dist.low
        places = digits if dist.log or span <= 0 else max(digits, 4 - math.floor(math.log10(span)))
    short = min(max(round(value, places), dist.low), dist.high)
    return short if _contains(dist, short) else value


def _contains(dist: BaseDistribution, value: Any) -> bool:
    try:
        return bool(dist._contains(dist.to_internal_repr(value)))
    except (ValueError, TypeError):
        return False


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
