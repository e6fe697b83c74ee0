"""``revtree tune``: search configurations chosen by Optuna, scored on a suite of tasks at
equal budget; the best is written as a named profile (:mod:`revtree.tasks.profiles`).

The score of one run is its *relative improvement*: ``(best - baseline) / |baseline|``,
signed so that better is positive whatever the metric's direction (0: nothing beat the
baseline; a baseline of 0 divides by 1). It is scale-free, so tasks whose metrics differ
by orders of magnitude weigh alike, and it needs no other run, unlike a rank among the
trials (which would also move as trials are added). A run that fails scores nothing (below).
A configuration's score is the mean over the training tasks, each run once at the trial's
seed with the same ``--budget`` (nodes, root included) and ``parallel = 1``.

Guaranteed: the default configuration (``policy = "greedy"``, its defaults) is the first
trial whenever greedy is among the policies, so the tuned profile is never worse than the
default *on the training tasks at the training seed*. The held-out tasks (``--holdout K``,
drawn by ``seed``) take no part in the choice; on them the tuned and default
configurations are run at ``seeds`` other seeds and their means reported with standard
errors, which say whether the choice generalises. Not guaranteed: anything beyond the
suite and budget it was tuned at; each task's own ``[holdout]`` is not run.

A run that fails (it cannot start: a sandbox, a model or the task's own settings refused;
or it ends ``failed``: a baseline that cannot be scored, infrastructure failures) is
never scored 0: it fails its trial (``Trial.error`` names the task, seed and reason;
Optuna sees it pruned) and the tune goes on. A held-out run that fails is left out of
the means and listed. Only a tune whose every trial failed has no best (``tune`` raises
``AllFailed``, with the outcome).
"""

from __future__ import annotations

import math
import random
import statistics
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from revtree.errors import RevtreeError
from revtree.memory import Store
from revtree.memory.records import NodeStatus, directed
from revtree.tasks.load import load_task
from revtree.tasks.spec import TaskSpec

TUNABLE = ("greedy", "mcts", "evolution", "bgmcts")
DEFAULT: dict[str, Any] = {"policy": "greedy"}
HOLDOUT_SEED = 1000  # the held-out runs' seeds: HOLDOUT_SEED + i, none a trial uses


def suggest(trial: Any, policies: tuple[str, ...]) -> dict[str, Any]:
    """A ``[search]`` table from an Optuna trial: the policy, then a few of its knobs."""
    policy = trial.suggest_categorical("policy", list(policies))
    if policy == "greedy":
        return {
            "policy": policy,
            "num_drafts": trial.suggest_int("num_drafts", 1, 5),
            "debug_prob": round(trial.suggest_float("debug_prob", 0.0, 1.0), 3),
        }
    if policy in ("mcts", "bgmcts"):
        table = {
            "policy": policy,
            "uct_c": round(trial.suggest_float("uct_c", 0.1, 3.0, log=True), 3),
        }
        if policy == "mcts":
            table["num_children"] = trial.suggest_int("num_children", 2, 8)
        else:
            table["kappa"] = round(trial.suggest_float("kappa", 0.0, 2.0), 3)
        return table
    return {
        "policy": policy,
        "num_islands": trial.suggest_int("num_islands", 1, 4),
        "exploration_ratio": round(trial.suggest_float("exploration_ratio", 0.0, 0.3), 3),
        "crossover_rate": round(trial.suggest_float("crossover_rate", 0.0, 0.3), 3),
    }


def improvement(best: float | None, baseline: float | None, maximize: bool) -> float:
    """``(best - baseline) / |baseline|``, positive when better (see the module)."""
    if best is None or baseline is None or not math.isfinite(baseline):
        return 0.0
    return directed(best - baseline, maximize) / (abs(baseline) or 1.0)


def suite_folders(suite: Path | None) -> list[Path]:
    """The task folders of ``suite`` (its sub-folders that hold a task), else the bundled
    examples; refused when there are fewer than one."""
    if suite is None:
        import revtree

        suite = Path(revtree.__file__).resolve().parent.parent / "examples"
        if not suite.is_dir():
            raise RevtreeError("no bundled examples here (an installed package); pass SUITE")
    if not suite.is_dir():
        raise RevtreeError(f"{suite}: not a folder of task folders")
    folders = sorted(p for p in suite.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise RevtreeError(f"{suite}: holds no task folders")
    return folders


def split(names: list[str], holdout: int, seed: int) -> tuple[list[str], list[str]]:
    """(training, held-out) task names: ``holdout`` of them drawn by ``seed``."""
    if not 0 <= holdout < len(names):
        raise RevtreeError(
            f"--holdout {holdout}: the suite has {len(names)} tasks; keep one to train on"
        )
    held = set(random.Random(seed).sample(names, holdout))
    return [n for n in names if n not in held], [n for n in names if n in held]


class RunFailed(RevtreeError):
    """One run of the suite could not start or ended ``failed`` (the message says which)."""


@dataclass(frozen=True)
class Trial:
    """One configuration tried: its mean over the training tasks, or why it failed."""

    search: dict[str, Any]
    value: float | None
    error: str | None = None


Report = Callable[[str, dict[str, Any], int, float | None, str | None], None]


@dataclass
class Bench:
    """Runs ``[search]`` tables on the suite's tasks, in ``home`` and ``store``."""

    specs: dict[str, TaskSpec]
    budget: int
    home: Path
    store: Store
    on_run: Report = lambda *a: None  # task, search, seed, value or None, error or None
    runs: list[str] = field(default_factory=list)

    def score(self, task: str, search: dict[str, Any], seed: int) -> float:
        """The relative improvement of one run of ``task`` under ``search`` at ``seed``;
        ``RunFailed`` where the run cannot start or ends ``failed``."""
        try:
            value = self._score(task, search, seed)
        except Exception as e:  # the run boundary: this run failed, the tune goes on
            why = str(e) if isinstance(e, RunFailed) else f"{type(e).__name__}: {e}"
            self.on_run(task, search, seed, None, why)
            raise RunFailed(f"{task} (seed {seed}): {why}") from e
        self.on_run(task, search, seed, value, None)
        return value

    def _score(self, task: str, search: dict[str, Any], seed: int) -> float:
        from revtree.memory.records import RunStatus
        from revtree.orchestrator import Orchestrator, create_run

        spec = self.specs[task].with_overrides(
            budget={"max_nodes": self.budget}, search={**search, "seed": seed, "parallel": 1}
        )
        spec = spec.model_copy(update={"holdout": None})
        run = create_run(self.store, spec, self.home)
        self.runs.append(run.id)
        orch = Orchestrator(self.store, run.id, home=self.home)
        try:
            info = orch.drive()
        finally:
            orch.close()
        if info.status is RunStatus.FAILED:
            raise RunFailed(f"the run ended failed: {info.reason}")
        nodes = [n for n in self.store.nodes(run.id) if n.status is NodeStatus.SUCCEEDED]
        scores = [n.score for n in nodes if n.score is not None]
        base = next((n.score for n in nodes if n.id == 0), None)
        best = (max if spec.maximize else min)(scores) if scores else None
        return improvement(best, base, spec.maximize)

    def mean(self, tasks: list[str], search: dict[str, Any], seed: int) -> float:
        """The mean relative improvement over ``tasks`` at ``seed``."""
        return statistics.fmean(self.score(t, search, seed) for t in tasks)


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (0 for one value; NaN for none)."""
    if not values:
        return math.nan, math.nan
    m = statistics.fmean(values)
    return m, (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0)


@dataclass(frozen=True)
class Outcome:
    """What a tune found: the best table (None when every trial failed), every trial,
    the held-out comparison and the held-out runs that failed."""

    best: dict[str, Any] | None
    best_score: float | None
    trials: list[Trial]
    train: list[str]
    held: list[str]
    # per held-out task and overall: (tuned mean, se, default mean, se), over the seeds
    # whose runs did not fail (NaN where none)
    holdout: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)
    holdout_failures: list[str] = field(default_factory=list)


class AllFailed(RevtreeError):
    """Every trial of a tune failed: there is no configuration to write."""

    def __init__(self, outcome: Outcome) -> None:
        first = next((t.error for t in outcome.trials if t.error), "no trial ran")
        super().__init__(f"every trial of the tune failed; the first: {first}")
        self.outcome = outcome


def study(
    bench: Bench, train: list[str], trials: int, seed: int, policies: tuple[str, ...]
) -> list[Trial]:
    """``trials`` Optuna (TPE) trials on ``train``; the default first if greedy may be
    chosen. A trial one of whose runs fails is pruned, its reason kept, and the study
    goes on."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    if "greedy" in policies:
        s.enqueue_trial({"policy": "greedy", "num_drafts": 3, "debug_prob": 0.5})
    done: list[Trial] = []

    def objective(trial: Any) -> float:
        table = suggest(trial, policies)
        try:
            value = bench.mean(train, table, seed)
        except RunFailed as e:
            done.append(Trial(table, None, str(e)))
            raise optuna.TrialPruned(str(e)) from e
        done.append(Trial(table, value))
        return value

    s.optimize(objective, n_trials=trials)
    return done


def compare(
    bench: Bench, held: list[str], best: dict[str, Any], seeds: int, failures: list[str]
) -> dict[str, tuple[float, float, float, float]]:
    """Tuned against default on each held-out task and their mean, over ``seeds`` seeds;
    a run that fails is left out (its reason added to ``failures``), and so is a seed
    from the overall mean where one of its runs failed."""
    per: dict[str, tuple[list[float | None], list[float | None]]] = {t: ([], []) for t in held}
    for i in range(seeds):
        for t in held:
            for k, table in enumerate((best, DEFAULT)):
                try:
                    per[t][k].append(bench.score(t, table, HOLDOUT_SEED + i))
                except RunFailed as e:
                    per[t][k].append(None)
                    failures.append(f"{'tuned' if k == 0 else 'default'}: {e}")
    out = {t: (*mean_se(_ok(a)), *mean_se(_ok(b))) for t, (a, b) in per.items()}
    if held:
        means: tuple[list[float], list[float]] = ([], [])
        for k in (0, 1):
            for i in range(seeds):
                got = [per[t][k][i] for t in held]
                if None not in got:
                    means[k].append(statistics.fmean(_ok(got)))
        out["mean"] = (*mean_se(means[0]), *mean_se(means[1]))
    return out


def _ok(values: list[float | None]) -> list[float]:
    return [v for v in values if v is not None]


@contextmanager
def workspace(keep: bool, db: str | None) -> Iterator[tuple[Path, Store]]:
    """The home and store tune's runs go to: a throwaway folder, or (``keep``) the user's
    own home and store, where they are listed like any run."""
    from revtree.memory.home import revtree_home

    if keep:
        store = Store(db, create=True)
        try:
            yield revtree_home(), store
        finally:
            store.close()
        return
    with tempfile.TemporaryDirectory(prefix="revtree-tune-") as d:
        store = Store(f"sqlite:///{d}/revtree.db", create=True)
        try:
            yield Path(d), store
        finally:
            store.close()


def load_suite(folders: list[Path]) -> dict[str, TaskSpec]:
    """Each folder's task, by folder name (a compat folder's mapping notes kept quiet: the
    suite's tasks are run as they load, and ``revtree check`` says what was mapped)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return {f.name: load_task(f) for f in folders}


def tune(
    bench: Bench, trials: int, holdout: int, seeds: int, seed: int, policies: tuple[str, ...]
) -> Outcome:
    """The whole tune: split, study on the training tasks, compare on the held-out ones."""
    bad = sorted(set(policies) - set(TUNABLE))
    if bad or not policies:
        raise RevtreeError(f"--policies: {bad or 'none'}; choose among {', '.join(TUNABLE)}")
    train, held = split(sorted(bench.specs), holdout, seed)
    done = study(bench, train, trials, seed, policies)
    scored = [t for t in done if t.value is not None]
    if not scored:
        raise AllFailed(Outcome(None, None, done, train, held))
    best = max(scored, key=lambda t: t.value or 0.0)
    failures: list[str] = []
    rows = compare(bench, held, best.search, seeds, failures)
    return Outcome(best.search, best.value, done, train, held, rows, failures)
