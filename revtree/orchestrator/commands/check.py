"""Preflight: whether a task will run, before a run spends anything on it.

``preflight(spec)`` checks, in order, and reports each as an :class:`Item`:

1. the task: it loaded and validated (``check_task`` loads it; a task that does not
   load is the one failed item);
2. the sandbox: which backend ``choose_backend`` picks and why (an engine without its
   image fails here);
3. the baseline: the untouched source evaluated once, all stages and repeats, in that
   sandbox, as node 0 would be; a baseline that cannot be scored fails with the error
   and the tail of its stderr. The results are in ``Report.evaluations`` (node 0) and
   ``Report.baseline``, so a run can record them as its node 0's instead of evaluating
   it again;
4. the models: one call of one token to each model the run would use, naming the URL;
   skipped, with the reason, when the run is offline;
5. the estimate: evaluation time of the node budget (baseline seconds x nodes /
   parallel) and, where every model's price is known, its rough cost.

``Report.ok`` is false when any item failed. Nothing here raises for a problem of the
task; only an unexpected bug does.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from revtree.agents import Evaluator
from revtree.agents.driver import driver
from revtree.agents.evaluator import Outcome
from revtree.agents.llm import Usage
from revtree.agents.llm.pricing import Rate, cost, rate_for
from revtree.agents.stage_inputs import labels_visible
from revtree.errors import RevtreeError
from revtree.memory import GitStore
from revtree.memory.records import EvalResult
from revtree.orchestrator.commands.models import (
    FAIL,
    OK,
    SKIP,
    WARN,
    Item,
    ping_models,
    role_models,
)
from revtree.orchestrator.run import read_source
from revtree.orchestrator.wiring import writers
from revtree.sandboxes import BackendChoice, Sandbox, choose_backend, make_sandbox
from revtree.tasks import TaskSpec, code_files, load_task, matches
from revtree.tasks.sandbox import without_pool

TAIL_LINES = 15


@dataclass
class Report:
    """Everything ``preflight`` found; ``spec`` is None when the task did not load."""

    spec: TaskSpec | None
    items: list[Item] = field(default_factory=list)
    choice: BackendChoice | None = None
    baseline: Outcome | None = None
    evaluations: list[EvalResult] = field(default_factory=list)  # node 0's, in order
    estimate_seconds: float | None = None
    estimate_usd: float | None = None

    @property
    def ok(self) -> bool:
        return all(i.status != FAIL for i in self.items)

    @property
    def failures(self) -> list[Item]:
        return [i for i in self.items if i.status == FAIL]

    def add(self, name: str, status: str, message: str, detail: str = "") -> Item:
        item = Item(name, status, message, detail)
        self.items.append(item)
        return item


def check_task(
    path: Path,
    overrides: dict[str, dict[str, Any]] | None = None,
    **kw: Any,
) -> Report:
    """Load the task at ``path`` (with ``overrides``, as ``TaskSpec.with_overrides``
    takes them) and run :func:`preflight` on it; a task that does not load is a report
    with one failed item."""
    try:
        spec = load_task(path)
        if overrides:
            spec = spec.with_overrides(**overrides)
    except (RevtreeError, ValueError) as e:
        report = Report(None)
        report.add("task", FAIL, f"{path}: the task does not load", str(e))
        return report
    return preflight(spec, **kw)


def preflight(
    spec: TaskSpec,
    *,
    sandbox: Sandbox | None = None,
    baseline: bool = True,
    models: bool = True,
    log_dir: Path | None = None,
) -> Report:
    """Check ``spec`` (already loaded): the sandbox, the baseline evaluation (in
    ``sandbox`` if given, else in the backend it would get), the models, the estimate."""
    report = Report(spec)
    names = ", ".join(spec.editable)
    report.add(
        "task",
        OK,
        f"{spec.name}: {spec.evaluate.metric} ({spec.evaluate.direction}), editable {names}",
    )
    for why in labels_visible(spec):
        report.add("labels", WARN, "a grader's labels are visible to the run step", why)
    with tempfile.TemporaryDirectory(prefix="revtree-check-") as tmp:
        own = sandbox is None
        if sandbox is None:
            sandbox = _sandbox(spec, report, Path(tmp))
        else:
            report.choice = BackendChoice(sandbox.name, "given by the caller")
            report.add("sandbox", OK, f"{sandbox.name} (given by the caller)")
        if sandbox is not None:
            try:
                if baseline:
                    _baseline(spec, sandbox, report, Path(tmp), log_dir)
            finally:
                if own:
                    sandbox.close()
    if models:
        ping_models(spec, report.add)
    _estimate(spec, report)
    return report


def _sandbox(spec: TaskSpec, report: Report, tmp: Path) -> Sandbox | None:
    try:
        choice = choose_backend(spec.sandbox.backend, spec.sandbox, **writers(spec))
    except RevtreeError as e:
        report.add("sandbox", FAIL, f"no sandbox: {e}")
        return None
    report.choice = choice
    status = WARN if choice.warning else OK
    note = "; it does not isolate (README: Sandboxes)" if choice.warning else ""
    report.add("sandbox", status, f"{choice.name} ({choice.reason}){note}", choice.warning or "")
    config = without_pool(spec.sandbox)  # one evaluation: no pool
    try:
        return make_sandbox(
            choice.name,
            base_dir=tmp / "work",
            config=config,
            task_root=spec.root,
            labels={"revtree.run": f"check-{spec.name}"},
        )
    except (RevtreeError, TypeError, ValueError, OSError) as e:
        report.add("sandbox", FAIL, f"the {choice.name} sandbox cannot start: {e}")
        return None


def baseline_archive(spec: TaskSpec, tmp: Path) -> tuple[bytes, dict[str, bytes]]:
    """The workspace of the untouched source (as ``create_run`` commits it) with its
    protected files, and those protected files (the grade step's workspace)."""
    files, modes = read_source(spec, code_files(spec))
    git = GitStore(tmp / "baseline.git")
    try:
        sha = git.commit_files(files, f"{spec.name}: baseline (preflight)", modes)
        overlay = {p: d for p, d in files.items() if matches(p, spec.protected)}
        overlay.update({p: t.encode() for p, t in spec.support_files.items()})
        return git.archive(sha, overlay), overlay
    finally:
        git.close()


def _baseline(
    spec: TaskSpec, sandbox: Sandbox, report: Report, tmp: Path, log_dir: Path | None
) -> None:
    try:
        archive, overlay = baseline_archive(spec, tmp)
        evaluator = Evaluator(spec, sandbox, log_dir, protected=overlay)
        results: list[EvalResult] = []
        outcome = evaluator.evaluate(0, archive, {}, results.append)
    except (RevtreeError, OSError, ValueError) as e:
        report.add("baseline", FAIL, f"the baseline cannot be evaluated: {e}")
        return
    report.baseline, report.evaluations = outcome, results
    where = f"in {outcome.sandbox_seconds:.2f} s ({sandbox.name} sandbox)"
    if not outcome.ok:
        last = results[-1] if results else None
        tail = _tail(last.stderr_tail) if last else ""
        log = f"\nfull log: {last.log_path}" if last and last.log_path else ""
        printed = printed_metrics(last, spec) if last else None
        why = STDOUT_FIX.format(line=printed[:100]) if printed else outcome.error
        report.add(
            "baseline",
            FAIL,
            f"the baseline cannot be scored {where}: {why}",
            (f"stderr (tail):\n{tail}" if tail else "no stderr") + log,
        )
        return
    metrics = results[-1].metrics if results else {}
    shown = ", ".join(f"{k} = {_fmt(v)}" for k, v in list(metrics.items())[:8])
    std = f" ± {outcome.score_std:.4g}" if outcome.score_std else ""
    report.add(
        "baseline",
        OK,
        f"{spec.evaluate.metric} = {_fmt(outcome.score)}{std} {where}; metrics: {shown}",
    )


STDOUT_FIX = (
    "the evaluator printed its metrics ({line}) instead of writing them to file "
    "descriptor 3; to read them there, add this line under [evaluate] in task.toml: "
    "stdout_metrics = true (any code the command runs can then print a forged line; a "
    'grade step cannot be forged: README, "The grade step")'
)


def printed_metrics(result: EvalResult, spec: TaskSpec) -> str | None:
    """The last stdout line of a single-step evaluation that wrote no metrics to file
    descriptor 3 but printed them (a JSON object holding the task's metric as a
    number), or None: the metrics ``stdout_metrics = true`` would have read."""
    if spec.evaluate.grade is not None or spec.evaluate.stdout_metrics or result.metrics:
        return None
    if result.error_kind != "metrics" or result.exit_code not in (0, None):
        return None
    lines = [ln.strip() for ln in result.stdout_tail.splitlines() if ln.strip()]
    try:
        metrics = json.loads(lines[-1]) if lines else None
    except (ValueError, RecursionError):
        return None
    value = metrics.get(spec.evaluate.metric) if isinstance(metrics, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return lines[-1] if math.isfinite(value) else None


def _tail(text: str) -> str:
    return "\n".join(text.rstrip().splitlines()[-TAIL_LINES:])


def _fmt(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _estimate(spec: TaskSpec, report: Report) -> None:
    b, parallel = spec.budget, spec.search.parallel
    seconds = report.baseline.sandbox_seconds if report.baseline else None
    if b.max_nodes is None:
        report.add("estimate", SKIP, "no node budget (budget.max_nodes): no estimate")
        return
    nodes = max(b.max_nodes - 1, 0)  # the root is the baseline
    parts = []
    if seconds is not None:
        report.estimate_seconds = seconds * nodes / parallel
        wall = report.estimate_seconds
        capped = f", capped by max_wall {_duration(b.max_wall)}" if b.max_wall else ""
        if b.max_wall:
            wall = min(wall, b.max_wall)
        parts.append(
            f"{nodes} candidates x {seconds:.2f} s / parallel {parallel} ≈ "
            f"{_duration(wall)} of evaluation{capped}"
        )
    if driver(spec).llm:
        usd, unknown = llm_cost(spec, nodes)
        if unknown:
            parts.append(f"cost unknown (no price for {', '.join(unknown)}; [agents.prices])")
        else:
            report.estimate_usd = usd
            cap = f", capped by max_usd ${b.max_usd:g}" if b.max_usd else ""
            parts.append(f"≈ ${usd:.2f} of model calls (rough){cap}")
    if not parts:
        report.add("estimate", SKIP, "no baseline time: no estimate")
        return
    report.add("estimate", OK, "; ".join(parts))


def llm_cost(spec: TaskSpec, nodes: int) -> tuple[float, list[str]]:
    """A rough cost of ``nodes`` candidates: per role call, a prompt of the code (up to
    the context budget) plus memory and instructions, and an answer of a quarter of
    ``max_tokens``; and the models whose price is not known."""
    a = spec.agents
    files, _ = read_source(spec, code_files(spec))
    code = sum(len(d) for d in files.values()) // 4
    prompt = min(code, a.context_tokens) + a.memory_tokens + 1000
    prices = {k: Rate(p.input, p.output, p.cached_input) for k, p in a.prices.items()}
    usd, unknown = 0.0, []
    for name, models in role_models(spec).items():
        role = getattr(a, name)
        answer = (role.max_tokens or a.max_tokens) // 4
        for model in models:
            rate = rate_for(model, prices)
            if rate is None:
                unknown.append(model)
                continue
            usd += cost(Usage(prompt, answer), rate) / len(models) * nodes
    return usd, sorted(set(unknown))


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
