"""The one place that builds a run's components from its stored spec.

``wire`` returns ``Parts``: the sandbox (chosen with its reason), the policy with its
stored state, the agents (offline or on models, behind one protocol), the evaluator
with the protected files it overlays, the mirror of the nodes, the budget and the
evaluation slots. The pipeline steps, the trust checks and the scheduler share them;
none of them builds anything.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from revtree.agents import Evaluator, KnobProposer, StaticReviewer, read_knobs
from revtree.agents.base import Agents
from revtree.agents.llm import BudgetExhausted
from revtree.agents.mutate import MutationProposer, offline_agents
from revtree.errors import Cancelled
from revtree.memory import GitStore, RunInfo, Store
from revtree.memory.db import revtree_home
from revtree.memory.gitstore import PROTECTED_REF
from revtree.orchestrator.budget import Budget
from revtree.orchestrator.gpus import GpuPool
from revtree.orchestrator.llm_team import Team, uses_llm
from revtree.orchestrator.mirror import Mirror
from revtree.orchestrator.policies import make_policy
from revtree.orchestrator.policies.base import Policy
from revtree.orchestrator.run import RunPaths
from revtree.sandboxes import BackendChoice, Sandbox, choose_backend, make_sandbox
from revtree.tasks import TaskSpec, matches


class Slots:
    """The evaluation slots: ``parallel`` evaluations at once. Candidates prepared ahead
    queue here; the budget is checked again once a slot is had (preparing may have
    taken long), and a stopping run stops the wait."""

    def __init__(self, n: int, cancel: threading.Event, budget: Budget) -> None:
        self.sem, self.cancel, self.budget = threading.Semaphore(n), cancel, budget

    @contextmanager
    def held(self) -> Iterator[None]:
        while not self.sem.acquire(timeout=0.1):
            if self.cancel.is_set():
                raise Cancelled("the run is stopping")
        try:
            reason = self.budget.reason(starting=False)
            if reason is not None:
                raise BudgetExhausted(reason)
            yield
        finally:
            self.sem.release()

    def maybe(self, slot: bool) -> AbstractContextManager[None]:
        """A slot, or nothing (the final checks run when the search is over)."""
        return self.held() if slot else nullcontext()


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

    @property
    def run_id(self) -> str:
        return self.run.id


def wire(
    store: Store,
    run_id: str,
    home: Path | None = None,
    sandbox: Sandbox | None = None,
    parallel: int | None = None,
) -> Parts:
    run = store.get_run(run_id)
    spec = TaskSpec.model_validate(run.spec)
    paths = RunPaths(home or revtree_home(), run.id)
    parallel = parallel or spec.search.parallel
    look = spec.search.lookahead
    lookahead = (0 if parallel == 1 else parallel) if look is None else look
    git = GitStore(paths.repo)
    ray = spec.runner.kind == "ray" and sandbox is None
    choice = (
        BackendChoice(sandbox.name, "given by the caller")
        if sandbox is not None
        else ray_choice(spec)
        if ray
        else choose_backend(spec.sandbox.backend, spec.sandbox)
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
        extra: dict[str, Any] = {"gpu_pool": GpuPool()} if spec.sandbox.gpus else {}
        sandbox = make_sandbox(
            choice.name,
            base_dir=paths.work,
            config=spec.sandbox,
            task_root=spec.root,
            labels={"revtree.run": run.id},
            **extra,
        )
    policy = make_policy(spec.search)
    policy.load_state(run.policy_state or {})
    mirror = Mirror(store, run.id, spec.maximize, store.nodes(run.id))
    cancel = threading.Event()
    overlay = protected_files(spec, git, mirror)
    evaluator = Evaluator(spec, sandbox, paths.logs, protected=overlay)
    agents = make_agents(store, spec, git, mirror, sandbox, cancel)
    budget = Budget(store, run.id, spec, run.wall_used, lambda: len(mirror.nodes), agents.spent)
    mirror.fraction = budget.fraction
    if agents.ask is not None:  # a policy that asks a model (agentic) gets one
        policy.attach(agents.ask)
    mirror.observers.append(agents.proposer.observe)  # told of each finished node
    mirror.updaters.append(policy.update)  # under the tree lock, with the best
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
        Slots(parallel, cancel, budget),
        cancel,
        parallel,
        lookahead,
        threading.Lock(),
    )


def ray_choice(spec: TaskSpec) -> BackendChoice:
    """The Ray runner: each worker picks its own backend (``auto`` never downgrades)."""
    r = spec.runner
    gpus = r.gpus if r.gpus is not None else spec.sandbox.gpus
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
    """The run's agents: on models where the task uses them (``uses_llm``), else offline
    (knobs, or code mutations); the static reviewer always reviews first."""
    static = StaticReviewer(spec)
    if uses_llm(spec):
        team = Team(store, spec, git, mirror, sandbox, cancel)
        return Agents(
            team, team, (static, team), team, "LLM", team.meter.exhausted, team.ask_policy
        )
    proposer, coder = offline_agents(spec)
    if isinstance(proposer, KnobProposer):  # an improve of the root starts from its values
        root = mirror.get(0)
        assert root.commit is not None
        knob_files = sorted({k.file for k in spec.knobs})
        proposer.baseline = read_knobs(spec.knobs, git.read_files(root.commit, knob_files))
    proposer.rebuild(mirror.nodes.values())
    label = (
        "offline code mutations"
        if isinstance(proposer, MutationProposer)
        else "offline Optuna knobs"
    )
    return Agents(proposer, coder, (static,), None, label)
