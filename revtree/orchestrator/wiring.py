"""The one place that builds a run's components from its stored spec.

``wire`` returns ``Parts``: the sandbox (chosen with its reason), the policy with its
stored state, the agents (offline or on models, behind one protocol), the evaluator
with the protected files it overlays, the mirror of the nodes, the budget and the
evaluation slots. The pipeline steps, the trust checks and the scheduler share them;
none of them builds anything.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from revtree.agents import Evaluator, StaticReviewer, read_knobs
from revtree.agents.base import Agents, Reviewer
from revtree.agents.driver import driver
from revtree.agents.llm import BudgetExhausted
from revtree.errors import Cancelled
from revtree.memory import GitStore, RunInfo, Store
from revtree.memory.gitstore import PROTECTED_REF
from revtree.memory.home import revtree_home
from revtree.orchestrator.budget import Budget
from revtree.orchestrator.contexts import ContextSource
from revtree.orchestrator.gpus import GpuPool
from revtree.orchestrator.llm_agents import (
    AnalystAgent,
    CoderAgent,
    OneCallProposer,
    PolicyModel,
    ProposerAgent,
    ReviewerAgent,
)
from revtree.orchestrator.llm_models import Models, rewards
from revtree.orchestrator.mirror import Mirror
from revtree.orchestrator.policies import make_policy
from revtree.orchestrator.policies.base import Policy
from revtree.orchestrator.run import RunPaths, claim
from revtree.sandboxes import BackendChoice, Capacity, Sandbox, choose_backend, make_sandbox
from revtree.tasks import TaskSpec, matches
from revtree.tasks.sandbox import gpus_of

AUTO_PERIOD = 3.0  # seconds between looks at the cluster's resources (--parallel auto)
AUTO_MAX = 256


class Slots:
    """The evaluation slots: ``limit`` evaluations at once (``resize`` changes it; those
    in flight above a lowered limit finish). Candidates prepared ahead queue here; the
    budget is checked again once a slot is had (preparing may have taken long), and a
    stopping run stops the wait."""

    def __init__(self, n: int, cancel: threading.Event, budget: Budget) -> None:
        self.limit, self.used, self.cond = n, 0, threading.Condition()
        self.cancel, self.budget = cancel, budget
        self._filled: list[Future[None]] = []  # told once every slot is held

    def filled(self) -> Future[None]:
        """A future done once every slot is held (done already if they are)."""
        fut: Future[None] = Future()
        with self.cond:
            if self.used >= self.limit:
                fut.set_result(None)
            else:
                self._filled.append(fut)
        return fut

    @contextmanager
    def held(self, check: bool = True) -> Iterator[None]:
        with self.cond:
            while self.used >= self.limit:
                if self.cancel.is_set():
                    raise Cancelled("the run is stopping")
                self.cond.wait(0.1)
            self.used += 1
            self._tell_filled()
        try:
            if check:
                self.check()
            yield
        finally:
            with self.cond:
                self.used -= 1
                self.cond.notify_all()

    def check(self) -> None:
        """``BudgetExhausted`` where a budget lets no more evaluation of a node start."""
        if (reason := self.budget.reason(starting=False)) is not None:
            raise BudgetExhausted(reason)

    @contextmanager
    def turns(self, each_run: bool) -> Iterator[Turns]:
        """One candidate's evaluation: a slot taken at once (the budget checked, as
        ``held``), then, with ``each_run``, one per run (``Turns.run``), else that one
        for all its runs; none held once it ends."""
        turns = Turns(self, each_run)
        try:
            yield turns
        finally:
            turns.release()

    def resize(self, n: int) -> None:
        with self.cond:
            self.limit = max(1, n)
            self._tell_filled()
            self.cond.notify_all()

    def _tell_filled(self) -> None:
        if self.used >= self.limit:
            for fut in self._filled:
                fut.set_result(None)
            self._filled.clear()

    def maybe(self, slot: bool) -> AbstractContextManager[None]:
        """A slot, or nothing (the final checks run when the search is over)."""
        return self.held() if slot else nullcontext()


class Turns:
    """The slots of one evaluation's runs (stages, repeats): the first is the slot taken
    as it began. With ``each_run`` (parallel 1, where ``Chain`` orders the records), each
    is let go as its run ends, before the run is recorded (the record may wait for the
    candidate before it, ``Chain.in_turn``, which may need a slot to verify), and the
    next run takes one again, with no second budget check (``Chain.in_turn`` checks it
    when the first run is recorded, as the slot would have one at a time). Else the one
    slot is held until the evaluation ends, its records included."""

    def __init__(self, slots: Slots, each_run: bool) -> None:
        self.slots, self.each_run = slots, each_run
        self._held: AbstractContextManager[None] | None = None
        self._take(check=True)

    def _take(self, check: bool) -> None:
        held = self.slots.held(check)
        held.__enter__()
        self._held = held

    @contextmanager
    def run(self) -> Iterator[None]:
        if self._held is None:
            self._take(check=False)
        try:
            yield
        finally:
            if self.each_run:
                self.release()

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.__exit__(None, None, None)


class AutoParallel:
    """``--parallel auto`` on a cluster: every ``AUTO_PERIOD`` seconds the sandbox's
    ``capacity()`` (how many evaluations of the task's request its nodes hold at once)
    is read again and the slots follow it, nodes joining and leaving; each change is
    told to the run's live log."""

    def __init__(self, capacity: Callable[[], int], slots: Slots, say: Callable[[str], Any]):
        self.capacity, self.slots, self.say = capacity, slots, say
        self.stopped, self.unreadable = threading.Event(), False
        self.thread = threading.Thread(target=self.follow, name="parallel-auto", daemon=True)

    def start(self) -> None:
        if not self.thread.is_alive() and not self.stopped.is_set():
            self.thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def follow(self) -> None:
        while not self.stopped.wait(AUTO_PERIOD):
            self.check()

    def check(self) -> None:
        try:
            n = min(AUTO_MAX, self.capacity())
        except Exception as e:  # the cluster briefly unreachable: keep the width
            if not self.unreadable:  # said once until it answers again
                self.say(f"parallel auto: cannot read the cluster's resources ({e})")
            self.unreadable = True
            return
        self.unreadable = False
        old = self.slots.limit
        if n != old:
            self.slots.resize(n)
            self.say(
                f"parallel auto: {n} evaluations at once (was {old}), as many as the "
                "cluster's free resources hold for the task's request"
            )


def auto_parallel(spec: TaskSpec, sandbox: Sandbox) -> int:
    """``--parallel auto`` now: what the sandbox's cluster holds (``capacity``), else
    this machine's CPUs divided by the CPUs each evaluation asks for."""
    if isinstance(sandbox, Capacity):
        return max(1, min(AUTO_MAX, int(sandbox.capacity())))
    cpus = spec.runner.cpus or 1.0
    return max(1, min(AUTO_MAX, int((os.cpu_count() or 1) / cpus)))


@dataclasses.dataclass
class Parts:
    store: Store
    run: RunInfo
    spec: TaskSpec
    paths: RunPaths
    git: GitStore
    choice: BackendChoice
    sandbox: Sandbox
    policy: Policy
    agents: Agents
    evaluator: Evaluator
    overlay: dict[str, bytes]  # the protected files every evaluation sees
    mirror: Mirror
    budget: Budget
    slots: Slots
    cancel: threading.Event
    parallel: int
    lookahead: int  # candidates prepared ahead of a free slot
    policy_lock: threading.Lock
    auto: AutoParallel | None = None  # --parallel auto on a cluster: follows its nodes

    @property
    def run_id(self) -> str:
        return self.run.id

    def claim(self) -> None:
        """Take the run for this process (``run.claim``): its row as it now stands."""
        self.run = claim(self.store, self.run_id)

    def width(self) -> int:
        """Candidates in flight: the slots, and those prepared ahead (with
        ``--parallel auto``, as many as the slots unless the task says)."""
        n = self.slots.limit
        if self.auto is None or self.spec.search.lookahead is not None:
            return n + self.lookahead
        return n + (0 if n == 1 else n)

    def chained(self) -> bool:
        """Whether the next candidate is prepared while one is evaluated, as
        reproducibly as one at a time (``tickets.Chain``): at parallel 1 with the default
        lookahead, no approval, and a policy that chooses without a model."""
        search = self.spec.search
        default = search.lookahead is None and self.lookahead == 0 and self.auto is None
        return default and search.approve == "off" and not self.policy.slow

    def parallel_text(self) -> str:
        return f"auto ({self.slots.limit} now)" if self.auto is not None else str(self.parallel)


def wire(
    store: Store,
    run_id: str,
    home: Path | None = None,
    sandbox: Sandbox | None = None,
    parallel: int | str | None = None,
) -> Parts:
    """The run's parts; ``parallel``: evaluations at once (default: the task's), or
    ``"auto"`` (see ``auto_parallel``; on a cluster, followed by ``AutoParallel``)."""
    run = store.get_run(run_id)
    spec = TaskSpec.stored(run.spec)
    paths = RunPaths(home or revtree_home(), run.id)
    git = GitStore(paths.repo)
    ray = spec.runner.kind == "ray" and sandbox is None
    choice = (
        BackendChoice(sandbox.name, "given by the caller")
        if sandbox is not None
        else sandbox_choice(spec)
    )
    if ray:
        sandbox = make_sandbox(
            "ray",
            runner=spec.runner,
            config=spec.sandbox,
            task_root=spec.root,
            on_event=lambda kind, message, node: store.add_event(run.id, kind, message, node),
        )
    elif sandbox is None:
        sandbox = make_sandbox(
            choice.name,
            base_dir=paths.work,
            config=spec.sandbox,
            task_root=spec.root,
            labels={"revtree.run": run.id},
            gpu_pool=GpuPool() if gpus_of(spec.sandbox) else None,
        )
    auto = parallel == "auto"
    parallel = auto_parallel(spec, sandbox) if auto else int(parallel or spec.search.parallel)
    look = spec.search.lookahead
    lookahead = (0 if parallel == 1 else parallel) if look is None else look
    policy = make_policy(spec.search)
    policy.load_state(run.policy_state or {})
    # the budget counts the mirror's nodes and the mirror's snapshots the budget's share
    mirror = Mirror(
        store,
        run.id,
        spec.maximize,
        store.nodes(run.id),
        lambda: budget.fraction(),
        (policy.update,),
    )
    cancel = threading.Event()
    overlay = protected_files(spec, git, mirror)
    evaluator = Evaluator(spec, sandbox, paths.logs, protected=overlay)
    evaluator.warm_up()  # (the fork server boots while the agents are made)
    agents = make_agents(store, spec, git, mirror, sandbox, cancel)
    budget = Budget(
        store, run.id, spec, run.wall_used, mirror.counted, agents.spent, lambda: len(mirror.twins)
    )
    if agents.ask is not None:  # a policy that asks a model (agentic) gets one
        policy.attach(agents.ask)
    mirror.subscribe(*agents.observers)  # told of each finished node
    slots = Slots(parallel, cancel, budget)
    follower = None
    if auto and isinstance(sandbox, Capacity):
        follower = AutoParallel(
            sandbox.capacity, slots, lambda message: store.add_event(run.id, "run", message, None)
        )
    return Parts(
        store,
        run,
        spec,
        paths,
        git,
        choice,
        sandbox,
        policy,
        agents,
        evaluator,
        overlay,
        mirror,
        budget,
        slots,
        cancel,
        parallel,
        lookahead,
        threading.Lock(),
        follower,
    )


def sandbox_choice(spec: TaskSpec, build: bool = True) -> BackendChoice:
    """The backend the task's candidates get (``choose_backend``, told who writes them:
    ``writers``; ``build``: the base image is built where it is missing and this machine
    can). The Ray runner: ``ray_choice``."""
    if spec.runner.kind == "ray":
        return ray_choice(spec)
    return choose_backend(spec.sandbox.backend, spec.sandbox, build=build, **writers(spec))


def writers(spec: TaskSpec) -> dict[str, Any]:
    """Who writes the candidates, for ``choose_backend``: ``knob_only`` where only the
    offline knob proposer sets the task's knobs in the user's own code (it may run
    locally where Docker cannot take it), else ``writer`` (LLM agents, or random code
    mutations: never run outside Docker unless the task or ``--sandbox local`` says)."""
    return driver(spec).writers()


def ray_choice(spec: TaskSpec) -> BackendChoice:
    """The Ray runner: each worker picks its own backend (``auto`` never downgrades)."""
    r = spec.runner
    gpus = r.gpus if r.gpus is not None else gpus_of(spec.sandbox)
    return BackendChoice(
        "ray",
        f"runner ray at {r.address}: each evaluation a Ray task ({r.cpus:g} CPU, {gpus} GPU) "
        f"in its worker's own {spec.sandbox.backend} sandbox",
    )


def protected_files(spec: TaskSpec, git: GitStore, mirror: Mirror) -> dict[str, bytes]:
    """The protected files every evaluation overlays: the task's own (a fork with
    ``--task``), else the root's; and the generated shims of imported task formats."""
    root = mirror.get(0)
    assert root.commit is not None
    protected_from = git.find(PROTECTED_REF) or root.commit
    overlay = {
        p: d for p, d in git.read_files(protected_from).items() if matches(p, spec.protected)
    }
    overlay.update({p: t.encode() for p, t in spec.support_files.items()})
    return overlay


def make_agents(
    store: Store,
    spec: TaskSpec,
    git: GitStore,
    mirror: Mirror,
    sandbox: Sandbox,
    cancel: threading.Event,
) -> Agents:
    """The run's agents, as :func:`driver` decides: on models, else offline (knobs, or
    code mutations); the static reviewer always reviews first."""
    checks = (StaticReviewer(spec),)
    chosen = driver(spec)
    if chosen.llm:
        return llm_agents(store, spec, git, mirror, sandbox, cancel, checks)
    baseline = None
    if chosen.knobs:  # an improve of the root starts from its values
        root = mirror.get(0)
        assert root.commit is not None
        knob_files = sorted({k.file for k in spec.knobs})
        baseline = read_knobs(spec.knobs, git.read_files(root.commit, knob_files))
    from revtree.agents.mutate import offline_agents  # Optuna: only where no model writes

    proposer, coder = offline_agents(spec, baseline)
    proposer.rebuild(mirror.nodes.values())
    return Agents(
        proposer, coder, (), None, chosen.label, checks=checks, observers=(proposer.observe,)
    )


def llm_agents(
    store: Store,
    spec: TaskSpec,
    git: GitStore,
    mirror: Mirror,
    sandbox: Sandbox,
    cancel: threading.Event,
    checks: tuple[Reviewer, ...],
) -> Agents:
    """The model roles, each its own agent over the run's shared ``Models``; the context
    source every job carries; the bandits rewarded as nodes finish."""
    models = Models.build(store, spec, mirror)
    context = ContextSource(store, spec, git, mirror, cancel)
    coder = CoderAgent(models, context.repo, sandbox, cancel)
    proposer = OneCallProposer(coder) if spec.agents.one_call else ProposerAgent(models)
    reviewers = (ReviewerAgent(models),) if "reviewer" in models.clients else ()
    analyst = AnalystAgent(models, context.evaluation) if "analyst" in models.clients else None
    return Agents(
        proposer,
        coder,
        reviewers,
        analyst,
        "LLM",
        models.meter.exhausted,
        PolicyModel(models, context.repo.prefix).ask,
        checks,
        context,
        (rewards(models.choice, mirror),),
    )
