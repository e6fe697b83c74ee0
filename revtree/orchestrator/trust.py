"""How far a reported best is trusted: drift alarms, improvement beyond noise, and the
failures that are not the candidates'.

Drift alarm (the holdout guard). The holdout command runs with
``REVTREE_STAGE=guard`` on the baseline and on each new best (within ``[trust]
guard_share`` of the evaluations), and with ``holdout`` only on the node that is
recommended at the end. A task that splits its held-out data by that variable
keeps the final judge clean: the guard set is consulted during the search, the final
set once. Two rules raise an alarm on a guarded node:

- ``holdout-worse``: better than the baseline on dev, but worse than the baseline on
  the guard holdout by more than ``tolerance`` times the baseline's holdout (a hack
  that hard-codes the dev answers scores perfectly on dev and badly on held-out data);
- ``dev-only``: a dev gain over the baseline of more than ``DEV_ONLY`` times the
  tolerance (relative), while the guard's gain is within the tolerance of zero (a
  table of the dev inputs' answers, with the honest code elsewhere, gains on dev only);
- ``rank``: over the guarded nodes (at least 4), Kendall's tau between dev and guard
  scores falls below ``min_rank_agreement`` while the node is the best on dev and in
  the worse half on the guard (the dev metric stopped tracking the held-out one).

An alarmed node ranks worst (``Node.score_of``): it is never the best, never
recommended or exported by default, and no policy exploits it; its descendants inherit
the alarm (kind ``subtree``).

Improvement beyond noise: the best and the baseline are re-evaluated (up to
``verify_repeats``, fewer where more would decide nothing: ``decided``; while no noise
is measured, the baseline's second run comes before a new best's re-run, so that one
re-run of each measures it; a new best found while the evaluator has reproduced every
repeat bit for bit is re-run at the end of the run only, ``defer_verification``); the
best's first evaluation, the one that made it the best, is left out of the comparison
(the winner's curse) unless every repeat of both reproduced it bit for bit, and the gain
is reported with its standard error and called real only when a t-test at 95%
(two-sided) says so.
"""

from __future__ import annotations

import errno
import math
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from revtree.agents.llm.base import LLMError
from revtree.agents.structured import AnswerError
from revtree.errors import (
    EditError,
    EditRefused,
    EditUnreadable,
    InfrastructureError,
    RevtreeError,
    SandboxError,
    StoreError,
    TaskSpecError,
)
from revtree.memory.records import EvalResult, Score, directed, finite_mean
from revtree.memory.stages import GUARD, HOLDOUT

DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}
DISK_TEXTS = ("No space left on device", "database or disk is full", "Disk quota exceeded")
ENGINE_TEXTS = ("no Docker engine answers", "the Docker engine failed or stopped answering")


def infra_cause(e: BaseException) -> str | None:
    """Why an exception is an infrastructure failure (outside the candidate), naming the
    URL or path, or None when it is the candidate's (or a bug). Only the exceptions of
    the machinery are read (OS, database, git, sandbox engine): a message that merely
    quotes "No space left on device" (a model's SEARCH text, say) is not a full disk."""
    seen: set[int] = set()
    todo: list[BaseException] = [e]
    while todo:
        x = todo.pop()
        if id(x) in seen or isinstance(x, (EditError, TaskSpecError)):
            continue
        seen.add(id(x))
        if isinstance(x, InfrastructureError):
            return str(x)
        if isinstance(x, OSError) and x.errno in DISK_ERRNOS:
            where = f" at {x.filename}" if x.filename else ""
            return f"disk full or read-only: {x.strerror}{where}"
        text = str(x)
        # the sandbox's own messages may quote candidate-chosen file names: not read
        machinery = isinstance(x, (OSError, StoreError)) or type(x).__module__.split(".")[0] in (
            "sqlite3",
            "sqlalchemy",
            "git",
            "psycopg",
        )
        if machinery and any(t in text for t in DISK_TEXTS):
            return f"disk full: {text[:400]}"
        if isinstance(x, SandboxError) and any(t in text for t in ENGINE_TEXTS):
            return text[:400]
        if isinstance(x, StoreError):
            return text[:400]
        if x.__cause__ is not None:
            todo.append(x.__cause__)
        elif x.__context__ is not None and not x.__suppress_context__:
            todo.append(x.__context__)
    return None


@dataclass(frozen=True)
class Failure:
    """A finished candidate's failure that is not its code's: the step it failed at, the
    exception's class, whose it is, and its message (an example for the user)."""

    step: str
    cls: str
    whose: str
    example: str

    @property
    def key(self) -> tuple[str, str]:
        return self.step, self.cls


# a failure's kind, by its class (None: the step's name)
ERROR_KINDS: tuple[tuple[type[Exception], str | None], ...] = (
    (EditError, "code"),
    (SandboxError, "sandbox"),
    (RevtreeError, None),
    (Exception, "internal"),
)


def error_kind(e: Exception, step: str) -> str:
    """The kind a candidate's failure is recorded with."""
    return next(kind or step for cls, kind in ERROR_KINDS if isinstance(e, cls))


def detail_of(e: BaseException) -> str:
    """The exception as a failed node's detail says it."""
    if isinstance(e, EditRefused):  # said as the EditError it is
        return f"{EditError.__module__}.{EditError.__name__}: {e}"
    return "".join(traceback.format_exception_only(e)).strip()


def foreign_failure(e: BaseException, step: str) -> Failure | None:
    """The failure ``e`` at ``step`` is, when it is not the candidate's: the model's (an
    ``LLMError`` after its retries), the reviewer's (any model error in ``review``, an
    unparseable verdict included), the parser's (an answer not in the form asked, or a
    coder's answer with no edit that can be read, even after its repair round) or the
    sandbox's (a ``SandboxError``: an evaluated command's timeout is no exception but an
    ``ExecResult.timed_out``). Decided
    by the exception's type and the step only. An edit that is read but does not apply
    is the candidate's (a sloppy answer, repaired once, may legitimately fail)."""
    if isinstance(e, EditUnreadable):
        whose = "the parser's"
    elif isinstance(e, EditError) or not isinstance(e, LLMError | SandboxError):
        return None
    elif step == "review":
        whose = "the reviewer's"
    elif isinstance(e, AnswerError):
        whose = "the parser's"
    elif isinstance(e, LLMError):
        whose = "the model's"
    else:
        whose = "the sandbox's"
    return Failure(step, type(e).__name__, whose, str(e)[:300])


class SameFailures:
    """The streak of finished candidates that failed alike for a reason not theirs.

    ``add`` takes each finished candidate's ``foreign_failure`` (None: it succeeded, was
    rejected, or failed by its own code) and says why the run must stop once ``k`` in
    a row share their step and class (``k`` = 0: never). The streak lives in memory
    only: a resumed run starts a new one."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.streak: list[tuple[int, Failure]] = []

    def add(self, node_id: int, failure: Failure | None) -> str | None:
        if failure is None or (self.streak and self.streak[-1][1].key != failure.key):
            self.streak = []
        if failure is None or self.k == 0:
            return None
        self.streak.append((node_id, failure))
        if len(self.streak) < self.k:
            return None
        nodes = sorted(n for n, _ in self.streak)
        return (
            f"{len(self.streak)} candidates in a row (nodes {', '.join(map(str, nodes))}) failed "
            f"in {failure.step} with {failure.cls}: {failure.whose} failure, not the "
            f"candidates'; the last: {failure.example}"
        )


def holdout_alarm(
    dev: float,
    holdout: float,
    base_dev: float,
    base_holdout: float,
    maximize: bool,
    tolerance: float,
) -> str | None:
    """The ``holdout-worse`` rule: a message, or None."""
    margin = tolerance * max(abs(base_holdout), 1e-12)
    worse = directed(holdout, maximize) < directed(base_holdout, maximize) - margin
    if Score(dev, maximize) > Score(base_dev, maximize) and worse:
        return (
            f"better than the baseline on dev ({dev:.6g} vs {base_dev:.6g}) but worse on the "
            f"guard holdout ({holdout:.6g} vs {base_holdout:.6g}, tolerance {tolerance:.0%})"
        )
    return None


DEV_ONLY = 5.0  # a dev gain this many tolerances large must show on the guard


def relative_gain(value: float, base: float, maximize: bool) -> float:
    """How much better ``value`` is than ``base``, relative to ``base``'s size."""
    return directed(value - base, maximize) / max(abs(base), 1e-12)


def dev_only_alarm(
    dev: float,
    guard: float,
    base_dev: float,
    base_guard: float,
    maximize: bool,
    tolerance: float,
) -> str | None:
    """The ``dev-only`` rule: a large dev gain with a guard gain within noise of zero."""
    dev_gain, guard_gain = (
        relative_gain(dev, base_dev, maximize),
        relative_gain(guard, base_guard, maximize),
    )
    if dev_gain > DEV_ONLY * max(tolerance, 0.01) and guard_gain <= tolerance:
        return (
            f"a gain on the dev inputs only: {dev_gain:+.1%} on dev ({dev:.6g} vs "
            f"{base_dev:.6g}) but {guard_gain:+.1%} on the guard holdout ({guard:.6g} vs "
            f"{base_guard:.6g}, within the {tolerance:.0%} tolerance of no gain)"
        )
    return None


def final_better(best: float, base: float, maximize: bool, tolerance: float) -> bool:
    """Whether the recommended node's final holdout beats the baseline's beyond the
    tolerance (the only gain a recommendation may be called an improvement for)."""
    return relative_gain(best, base, maximize) > tolerance


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Kendall's tau-a of two paired sequences (ties count as neither)."""
    n, s = len(xs), 0
    for i in range(n):
        for j in range(i + 1, n):
            s += _sign(xs[i] - xs[j]) * _sign(ys[i] - ys[j])
    pairs = n * (n - 1) / 2
    return s / pairs if pairs else 1.0


def _sign(v: float) -> int:
    return (v > 0) - (v < 0)


def rank_alarm(
    node_id: int,
    guarded: dict[int, tuple[float, float]],
    maximize: bool,
    threshold: float,
) -> str | None:
    """The ``rank`` rule for ``node_id`` over ``guarded`` (node -> (dev, holdout))."""
    if len(guarded) < 4 or node_id not in guarded:
        return None
    ids = list(guarded)
    devs, hold = [guarded[i][0] for i in ids], [guarded[i][1] for i in ids]
    tau = kendall_tau(devs, hold)
    if tau >= threshold:
        return None
    top_dev = max(ids, key=lambda i: directed(guarded[i][0], maximize))
    worse_half = sorted(ids, key=lambda i: directed(guarded[i][1], maximize))[: len(ids) // 2]
    if top_dev == node_id and node_id in worse_half:
        return (
            f"dev and guard-holdout ranks disagree over {len(ids)} guarded nodes "
            f"(Kendall tau {tau:.2f} < {threshold:.2f}); this node is first on dev and in the "
            "worse half on the holdout"
        )
    return None


# two-sided 95% critical values of Student's t by degrees of freedom
_T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def t_critical(dof: int) -> float:
    if dof <= 0:
        return math.inf
    if dof in _T95:
        return _T95[dof]
    return 2.23 if dof <= 10 else 2.09 if dof <= 20 else 2.04 if dof <= 30 else 1.96


@dataclass(frozen=True)
class Gain:
    """The best's gain over the baseline, in the better direction, with its noise."""

    delta: float  # positive: better
    stderr: float | None  # None: no repeat measured any noise
    n_best: int
    n_base: int
    significant: bool | None  # None: cannot tell (no repeats)

    def to_json(self) -> dict[str, Any]:
        return {
            "delta": self.delta,
            "stderr": self.stderr,
            "n_best": self.n_best,
            "n_baseline": self.n_base,
            "beyond_noise": self.significant,
        }


def gain(best: Sequence[float], base: Sequence[float], maximize: bool) -> Gain | None:
    """Welch-style comparison of the best's post-selection repeats with the baseline's;
    None also where a mean, the difference or the noise would not be a finite number
    (scores next to the largest double: no gain is claimed, and nothing raises)."""
    if not best or not base:
        return None
    m_best, m_base = finite_mean(best), finite_mean(base)
    if m_best is None or m_base is None:
        return None
    delta = directed(m_best - m_base, maximize)
    if not math.isfinite(delta):
        return None
    if len(best) < 2 or len(base) < 2:  # the noise of one side is unmeasured: no verdict
        return Gain(delta, None, len(best), len(base), None)
    # the evaluator's noise is pooled over both samples (it rarely depends on the code);
    # residuals are scaled by the largest before squaring, so huge scores do not overflow
    resid = [x - m_best for x in best] + [x - m_base for x in base]
    if not all(math.isfinite(r) for r in resid):
        return None
    dof = len(best) + len(base) - 2
    scale = max(abs(r) for r in resid)
    var = math.fsum((r / scale) ** 2 for r in resid) / dof if dof > 0 and scale else 0.0
    se = scale * math.sqrt(var / len(best) + var / len(base))
    if not math.isfinite(se):
        return None
    if se == 0.0:
        return Gain(delta, 0.0, len(best), len(base), delta > 0)
    return Gain(delta, se, len(best), len(base), delta / se > t_critical(dof))


WIDE = 4.0  # a margin this many standard errors wide is decided (and beyond the t-test)
MIN_DOF = 2  # the degrees of freedom of repeats before the run's noise is trusted


@dataclass(frozen=True)
class Noise:
    """The evaluator's noise, pooled over every node's repeats: ``sigma`` (0.0: every
    repeat so far reproduced its node's score bit for bit) with ``dof`` degrees of
    freedom, the sum over nodes of their repeats less one."""

    sigma: float
    dof: int


def pooled_noise(groups: Sequence[Sequence[float]]) -> Noise | None:
    """The within-node spread of ``groups`` (each node's scores), or None where fewer
    than ``MIN_DOF`` degrees of freedom were measured or a number is not finite."""
    resid, dof = [], 0
    for g in groups:
        if len(g) < 2:
            continue
        mean = finite_mean(g)
        if mean is None:
            return None
        resid += [x - mean for x in g]
        dof += len(g) - 1
    if dof < MIN_DOF or not all(math.isfinite(r) for r in resid):
        return None
    scale = max((abs(r) for r in resid), default=0.0)
    if scale == 0.0:
        return Noise(0.0, dof)
    sigma = scale * math.sqrt(math.fsum((r / scale) ** 2 for r in resid) / dof)
    return Noise(sigma, dof) if math.isfinite(sigma) else None


def defer_verification(noise: Noise | None) -> bool:
    """Whether a new best found during the run may wait for the run's end to be re-run:
    where ``noise``, pooled over the other nodes' repeats, is known to be nil (every
    repeat so far, over at least ``MIN_DOF`` degrees of freedom, reproduced its node's
    score bit for bit). Its re-run then would decide nothing the end does not: the best
    reported is always verified (``decided`` never decides on an empty sample), and a
    deferred best that fails to reproduce makes the noise non-zero there, so the best
    moves and the next is verified in turn. What deferral gives up is the early
    demotion of a best good on its first run only: until the end, the search may
    exploit it (the guard holdout still runs on it as it is found)."""
    return noise is not None and noise.sigma == 0.0


def decided(
    sample: Sequence[float],
    ref: float | None,
    n_ref: int,
    noise: Noise | None,
    min_n: int = 1,
) -> bool:
    """Whether more repeats of a node could change what its verification says, so the
    ones left may be skipped. ``sample``: its scores that count (a new best's repeats
    after the evaluation that selected it); ``ref``: the mean it is compared with (the
    previous best's, or the best's for the baseline) over ``n_ref`` evaluations.

    Never decided before the sample has one score (a node verified is always re-run).
    Decided when the run's noise is known to be nil (``noise.sigma`` 0: every repeat of
    every node, this one's included, reproduced its score bit for bit), or when the
    sample has ``min_n`` scores (two where a t-test must give a verdict) and its margin
    to ``ref`` is at least ``WIDE`` standard errors (and beyond the t-test's critical
    value) either way. Undecided while the noise is unmeasured (``noise`` None: fewer
    than ``MIN_DOF`` degrees of freedom) or there is no ``ref``.

    Why a deterministic shortcut opens no hole: the pooled noise includes this node's
    own repeats, so a candidate that scores well on its first run only makes the noise
    non-zero and is judged by its margin, re-run up to ``verify_repeats`` while that
    margin is within noise. What a bit-identical re-run cannot catch is a candidate that
    reads which repeat it is in (``REVTREE_SEED``) and fakes the ones it expects; such a
    candidate fakes any number of repeats fixed in advance, ``verify_repeats`` included,
    and the shortcut only lowers that number to two where the evaluator has shown no
    noise at all. Repeats measure noise; the guard holdout, unchanged, is the check
    against a candidate that games its evaluator."""
    n = len(sample)
    if n < 1 or noise is None:
        return False
    if noise.sigma == 0.0:
        return True
    mean = finite_mean(sample)
    if ref is None or mean is None or n < min_n:
        return False
    se = noise.sigma * math.sqrt(1 / n + 1 / max(1, n_ref))
    wide = max(WIDE, t_critical(noise.dof))
    return math.isfinite(mean - ref) and abs(mean - ref) >= wide * se


def eval_event(result: EvalResult) -> tuple[str, str, dict[str, Any]]:
    """The live log's line for an evaluation stored: ``eval``, or ``holdout`` for a
    holdout's (the guard split or the final judge)."""
    if result.stage in (GUARD, HOLDOUT):
        what = f"{result.score:.6g}" if result.ok else f"failed: {result.error}"
        label = "guard holdout" if result.stage == GUARD else "holdout"
        message = f"{label} of node {result.node_id}: {what}"
        return "holdout", message, {"score": result.score, "ok": result.ok}
    what = (
        f"{result.score:.6g}"
        if result.ok and result.score is not None
        else (f"failed ({result.error_kind}): {result.error}")
    )
    data: dict[str, Any] = {
        "stage": result.stage,
        "repeat": result.repeat,
        "score": result.score,
        "ok": result.ok,
        "duration": result.duration,
    }
    where = f"node {result.node_id} {result.stage}#{result.repeat}"
    return "eval", f"{where}: {what} in {result.duration:.2f}s", data
