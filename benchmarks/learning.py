"""Search that learns: a bandit over the coder's models, the near-twin check, a bandit
over the policy's operators.

    python benchmarks/learning.py [--seeds 3] [--budget 31] [--policy-budget 10]
                                  [--part models|novelty|embeddings|operators|policies|both]

Real runs (``Orchestrator``, local sandbox, SQLite in a temporary home) of a task that
maximises X in prog.py, against the fake model server over HTTP on 127.0.0.1, whose
coder answers come from ``revtree.agents.llm.fake_models.Climber``:

- models: three models whose edits raise the score with chances 0.9, 0.3 and 0.05,
  equal weights; per seed, the share of the coder's calls that went to the best model
  with ``model_selection = "bandit"`` and with ``"weights"``.
- novelty: one model (chance 0.6) that repeats one of its earlier answers a third of the
  time; per seed, with ``novelty_threshold`` 0.98 and 1.0 (off), at an equal budget of
  candidates (``max_nodes``, which near twins do not count toward; with
  ``--sandbox-seconds``, of sandbox seconds): the candidates
  evaluated, those refused as near twins (evaluations saved) or as identical to their
  parent (refused either way), the evaluations run (the final checks of the best
  included), the sandbox seconds and the best score.
- embeddings: one model (chance 0.6) that, 40% of the time, gives again an answer it gave
  to a parent with the same X, its number written otherwise (``12.30`` for ``12.3``);
  the text check at 0.98 with and without the embeddings check (0.99, ``[agents]
  embeddings_model`` at the fake server, whose vectors see a number by its value: the
  test's ``by_meaning``); the same columns as novelty.
- operators: one model (chance 0.6) a third of whose edits also break the program and
  which finds the bug in a broken parent with the chance 0.8 (a debug that pays);
  greedy and evolution with ``operators = "policy"`` (their fixed chances) and
  ``"bandit"``: per seed, the operators chosen after the baseline and the best score;
  then the same two policies on the simulated landscapes (``policies/sim``, 60
  evaluations, 8 seeds): the mean normalised best quality with and without.
- policies: the agentic policy against greedy, mcts, evolution and bgmcts on the bundled
  examples, offline (the examples' own offline agents propose and code; the agentic
  policy asks ``policies.sim.SimulatedPolicyModel``, the seeded stand-in for its model,
  as ``benchmarks/policies.py`` does on the simulated landscapes): per example, the
  relative improvement over the baseline (``revtree tune``'s measure), mean ± standard
  error over the seeds, at ``--policy-budget`` nodes and ``parallel = 1``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runnable as a plain script
from revtree.agents.llm.fake_models import Climber
from revtree.agents.llm.fake_server import FakeLLMServer
from revtree.memory import Store
from revtree.memory.records import TWIN
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task
from tests.orchestrator.test_model_bandit import QUALITY, climb_task

os.environ.setdefault("REVTREE_SANDBOX", "local")  # the fake model's code is harmless


def run_once(
    home: Path, task: Path, climber: Climber, server: FakeLLMServer | None = None
) -> tuple[Store, str]:
    store = Store(f"sqlite:///{home / 'db.sqlite'}")
    with server or FakeLLMServer(climber) as srv:
        spec = load_task(task).with_overrides(agents={"base_url": srv.openai_url})
        run = create_run(store, spec, home)
        Orchestrator(store, run.id, home=home).drive()
    return store, run.id


def models(seeds: int, budget: int, work: Path) -> Table:
    table = Table("seed", "bandit: share to best", "weights: share to best", "best weight")
    got: dict[str, list[float]] = {"bandit": [], "weights": []}
    for seed in range(seeds):
        row = []
        for selection in ("bandit", "weights"):
            home = work / f"m{seed}{selection}"
            task = climb_task(home / "task", selection=selection, budget=budget)
            text = (task / "task.toml").read_text().replace("seed = 1", f"seed = {seed}")
            (task / "task.toml").write_text(text)
            store, run_id = run_once(home, task, Climber(QUALITY, seed=seed))
            calls = [c.model for c in store.llm_calls(run_id) if c.role == "coder" and c.ok]
            got[selection].append(calls.count("good") / len(calls))
            row.append(f"{got[selection][-1]:.2f} ({calls.count('good')}/{len(calls)})")
        table.add_row(str(seed), *row, "1/3")
    table.add_row(
        "mean", *(f"{statistics.mean(got[s]):.2f}" for s in ("bandit", "weights")), "0.33"
    )
    return table


NOVELTY_COLUMNS = (
    "seed",
    "novelty",
    "candidates",
    "evaluated",
    "twins refused",
    "same as parent",
    "evaluations",
    "sandbox s",
    "best score",
)


def novelty(seeds: int, budget: int, work: Path, seconds: float | None) -> Table:
    """``seconds``: an equal budget of sandbox seconds instead of candidates."""
    table = Table(
        *NOVELTY_COLUMNS,
        title=f"equal budget: {seconds:g} sandbox seconds"
        if seconds
        else f"equal budget: {budget - 1} candidates (near twins not counted)",
    )
    for seed in range(seeds):
        for threshold in (0.98, 1.0):
            home = work / f"n{seed}{threshold}{seconds}"
            task = novelty_task(home, seed, budget, threshold, seconds)
            climber = Climber({"one": 0.6}, seed=seed, repeat=1 / 3)
            store, run_id = run_once(home, task, climber)
            label = "off" if threshold >= 1 else f"{threshold:g}"
            table.add_row(str(seed), label, *novelty_row(store, run_id))
    return table


def embeddings(seeds: int, budget: int, work: Path, seconds: float | None) -> Table:
    """The paraphrasing model, with the embeddings check on (0.99) and off."""
    from revtree.agents.llm.fake_embeddings import EmbeddingsFakeLLMServer
    from tests.orchestrator.test_novelty import by_meaning

    what = f"{seconds:g} sandbox seconds" if seconds else f"{budget - 1} candidates"
    table = Table(*NOVELTY_COLUMNS, title=f"paraphrases, equal budget: {what}")
    for seed in range(seeds):
        for threshold in (0.99, 1.0):
            home = work / f"e{seed}{threshold}{seconds}"
            task = novelty_task(home, seed, budget, 0.98, seconds)
            text = (task / "task.toml").read_text()
            text = text.replace('mode = "llm"', 'mode = "llm"\nembeddings_model = "emb"')
            text = text.replace(
                "novelty_threshold",
                f"novelty_embeddings_threshold = {threshold}\nnovelty_threshold",
            )
            (task / "task.toml").write_text(text)
            climber = Climber({"one": 0.6}, seed=seed, paraphrase=0.4)
            server = EmbeddingsFakeLLMServer(climber, embed=by_meaning)
            store, run_id = run_once(home, task, climber, server)
            label = "text only" if threshold >= 1 else f"embeddings {threshold:g}"
            table.add_row(str(seed), label, *novelty_row(store, run_id))
    return table


def novelty_task(
    home: Path, seed: int, budget: int, threshold: float, seconds: float | None
) -> Path:
    """The climb task on one model, at ``budget`` candidates or ``seconds``."""
    task = climb_task(
        home / "task",
        selection="weights",
        budget=1000 if seconds else budget,
        novelty=threshold,
        extra=f"max_sandbox_seconds = {seconds}" if seconds else "",
    )
    text = (task / "task.toml").read_text()
    text = text.split("[[agents.coder.ensemble]]")[0].replace("seed = 1", f"seed = {seed}")
    (task / "task.toml").write_text(text + '[agents.coder]\nmodel = "openai-compatible:one"\n')
    return task


def novelty_row(store: Store, run_id: str) -> list[str]:
    nodes = [n for n in store.nodes(run_id) if n.id > 0]
    evals = [e for e in store.evaluations(run_id) if e.node_id != 0]
    best = max((n.score for n in nodes if n.score is not None), default=None)
    return [
        str(len(nodes)),
        str(sum(n.n_evals > 0 for n in nodes)),
        str(sum(n.error_kind == TWIN for n in nodes)),
        str(sum("changes nothing" in (n.error or "") for n in nodes)),
        str(len(evals)),
        f"{sum(e.duration for e in evals):.2f}",
        "-" if best is None else f"{best:.4g}",
    ]


def operators(seeds: int, budget: int, work: Path) -> Table:
    table = Table(
        "policy", "operators", "seed", "draft", "improve", "debug", "crossover", "failed", "best",
        title=f"operators: {budget - 1} candidates, one model (0.6 up, 1/3 broken, 0.8 fixed)",
    )  # fmt: skip
    means: dict[tuple[str, str], list[float]] = {}
    for policy in ("greedy", "evolution"):
        for mode in ("policy", "bandit"):
            for seed in range(seeds):
                home = work / f"o{policy}{mode}{seed}"
                task = climb_task(home / "task", selection="weights", budget=budget)
                text = (task / "task.toml").read_text().split("[[agents.coder.ensemble]]")[0]
                text = text.replace("seed = 1", f'seed = {seed}\noperators = "{mode}"')
                if policy != "greedy":
                    text = text.replace('policy = "greedy"\nnum_drafts = 1', f'policy = "{policy}"')
                (task / "task.toml").write_text(
                    text + '[agents.coder]\nmodel = "openai-compatible:one"\n'
                )
                climber = Climber({"one": 0.6}, seed=seed, crash=1 / 3, fix=0.8)
                store, run_id = run_once(home, task, climber)
                nodes = [n for n in store.nodes(run_id) if n.id > 0]
                ops = Counter(n.operator for n in nodes)
                best = max((n.score for n in nodes if n.score is not None), default=10.0)
                means.setdefault((policy, mode), []).append(best)
                table.add_row(
                    policy, mode, str(seed),
                    *(str(ops[o]) for o in ("draft", "improve", "debug", "crossover")),
                    str(sum(n.status.value == "failed" for n in nodes)), f"{best:.4g}",
                )  # fmt: skip
    for (policy, mode), bests in means.items():
        se = statistics.stdev(bests) / len(bests) ** 0.5 if len(bests) > 1 else 0.0
        mean = f"{statistics.fmean(bests):.4g} ± {se:.2g}"
        table.add_row(policy, mode, "mean", "", "", "", "", "", mean)
    return table


def operators_sim(seeds: int = 8, budget: int = 60) -> Table:
    from pydantic import TypeAdapter

    from revtree.orchestrator.policies import make_policy
    from revtree.orchestrator.policies.sim import LANDSCAPES, Simulator, normalised
    from revtree.tasks.spec import SearchConfig

    table = Table(
        "landscape", "greedy", "greedy + bandit", "evolution", "evolution + bandit",
        title=f"operators on the simulated landscapes: normalised best, mean of {seeds} seeds, "
        f"{budget} evaluations",
    )  # fmt: skip
    for land in LANDSCAPES:
        row = []
        for policy in ("greedy", "evolution"):
            for mode in ("policy", "bandit"):
                table_ = {"policy": policy, "operators": mode}
                got = [
                    normalised(
                        Simulator(land, s, budget).run(
                            make_policy(TypeAdapter(SearchConfig).validate_python(
                                {**table_, "seed": s}
                            ))
                        ),
                        True,
                    )
                    for s in range(seeds)
                ]  # fmt: skip
                row.append(f"{statistics.fmean(got):.3f}")
        table.add_row(land.name, *row)
    return table


POLICIES = ("agentic", "greedy", "mcts", "evolution", "bgmcts")


def policy_run(home: Path, store: Store, spec: Any, seed: int) -> tuple[float, int, int]:
    """One run: its relative improvement, and (agentic) the model's calls and fallbacks."""
    from revtree.orchestrator.policies.agentic import AgenticPolicy
    from revtree.orchestrator.policies.sim import SimulatedPolicyModel
    from revtree.orchestrator.tune import improvement

    run = create_run(store, spec, home)
    orch = Orchestrator(store, run.id, home=home)
    model = SimulatedPolicyModel(seed)
    if isinstance(orch.policy, AgenticPolicy):
        orch.policy.attach(model.ask)
    try:
        orch.drive()
    finally:
        orch.close()
    ok = [n for n in store.nodes(run.id) if n.score is not None and n.status.value == "succeeded"]
    base = next((n.score for n in ok if n.id == 0), None)
    best = (max if spec.maximize else min)((n.score for n in ok), default=None)
    fallbacks = getattr(orch.policy, "fallbacks", 0)
    return improvement(best, base, spec.maximize), model.calls, fallbacks


def policies(seeds: int, budget: int, work: Path) -> Table:
    from revtree.orchestrator.tune import load_suite, mean_se, suite_folders

    specs = load_suite(suite_folders(None))
    table = Table("example", *POLICIES, title=(
        f"relative improvement over the baseline, mean ± se over {seeds} seeds, {budget} "
        "nodes, offline agents; agentic asks the simulated policy model"
    ))  # fmt: skip
    store = Store(f"sqlite:///{work / 'policies.sqlite'}")
    per: dict[str, list[list[float]]] = {p: [[] for _ in range(seeds)] for p in POLICIES}
    asked = [0, 0]
    for name, spec in specs.items():
        row = []
        for policy in POLICIES:
            got = []
            for seed in range(seeds):
                one = spec.with_overrides(
                    budget={"max_nodes": budget},
                    search={"policy": policy, "seed": seed, "parallel": 1},
                ).model_copy(update={"holdout": None})
                value, calls, fallbacks = policy_run(work, store, one, seed)
                got.append(value)
                per[policy][seed].append(value)
                if policy == "agentic":
                    asked[0], asked[1] = asked[0] + calls, asked[1] + fallbacks
            m, se = mean_se(got)
            row.append(f"{m:+.4f} ± {se:.4f}")
        table.add_row(name, *row)
    means = []
    for policy in POLICIES:
        m, se = mean_se([statistics.fmean(v) for v in per[policy]])
        means.append(f"{m:+.4f} ± {se:.4f}")
    table.add_row("mean", *means)
    table.caption = f"agentic: {asked[0]} model calls, {asked[1]} fell back to greedy"
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=31, help="max_nodes (the root included)")
    ap.add_argument(
        "--part",
        choices=("models", "novelty", "embeddings", "operators", "policies", "both"),
        default="both",
    )
    ap.add_argument("--policy-budget", type=int, default=10, help="policies: max_nodes")
    ap.add_argument(
        "--sandbox-seconds", type=float, help="novelty: also at this equal sandbox-seconds budget"
    )
    args = ap.parse_args()
    console = Console(width=150)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["REVTREE_HOME"] = tmp
        if args.part in ("models", "both"):
            console.print(models(args.seeds, args.budget, Path(tmp)))
        if args.part in ("novelty", "both"):
            console.print(novelty(args.seeds, args.budget, Path(tmp), None))
            if args.sandbox_seconds:
                console.print(novelty(args.seeds, args.budget, Path(tmp), args.sandbox_seconds))
        if args.part == "embeddings":
            console.print(embeddings(args.seeds, args.budget, Path(tmp), None))
            if args.sandbox_seconds:
                console.print(embeddings(args.seeds, args.budget, Path(tmp), args.sandbox_seconds))
        if args.part == "operators":
            console.print(operators(args.seeds, args.budget, Path(tmp)))
            console.print(operators_sim())
        if args.part == "policies":
            console.print(policies(args.seeds, args.policy_budget, Path(tmp)))


if __name__ == "__main__":
    main()
