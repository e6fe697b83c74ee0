"""revtree against OpenEvolve 0.4.0 on one OpenEvolve-format folder and one fake model.

    python benchmarks/peer.py [--n 48] [--reps 3] [--sleep 0 1] [--parallel 1 2 4]
                              [--cache ~/.cache/revtree-bench] [--lookahead L]
                              [--noise SIGMA] [--evaluator plain|numpy] [--baseline REV]
                              [--workspaces DIR]

Both search the same folder (``initial_program.py`` with ``A`` in its EVOLVE-BLOCK,
``evaluator.py`` that sleeps S seconds and scores ``-(A - 3)^2``, plus Gaussian noise
with ``--noise``; with ``--evaluator numpy`` it imports numpy at its top and scores with
it, as OpenEvolve's own examples' evaluators do; one ``config.yaml``),
against one fake OpenAI-compatible server (``revtree.agents.llm.fake_server``, in a
process of its own, so that neither system shares an interpreter lock with it) that
answers each in the format it asks for (OpenEvolve: a SEARCH/REPLACE diff; revtree's
one-call mode: the whole file), moving ``A`` by the same seeded steps. Runs are
interleaved (revtree, OpenEvolve, revtree, ...) for each S and K (candidates in flight),
N candidates each. Per cell, means over the repetitions:

- start-up: from a fresh interpreter to the start of its loop, imports included (revtree:
  importing it (LangGraph, SQLAlchemy), opening its store, making the run and
  ``Orchestrator(...)``, which wires the agents and imports the model SDK; OpenEvolve:
  importing ``openevolve`` and ``OpenEvolve(...)``), each in a process of its own that
  then runs the loop;
- 1st call: from the start of that start-up (before the imports) to the first model
  request the server gets (OpenEvolve evaluates its initial program first; revtree at
  K = 1 proposes one candidate while the baseline is evaluated, K > 1 several);
- overhead per candidate: (wall of the candidate loop - N*S/K) / N, where the loop is
  ``Orchestrator.drive()`` (baseline, candidates, verification, final checks) for
  revtree and ``OpenEvolve.run()`` (initial evaluation and iterations) for OpenEvolve;
  and the same with the trust cost counted apart: (wall - (N + T)*S/K) / N, where T is
  the verification evaluations (each S long, in one of the K slots);
- utilisation: (N*S/K) / wall, the share of the loop spent in candidate sleeps; and
  counting candidate evaluations only: (N*S/K) / (wall - T*S/K);
- model calls per candidate (counted at the server); a run whose count is not N, or
  (revtree) with a node that did not succeed, is named under the table as not
  comparable (its wall is not N candidates' work);
- trust cost: evaluations spent re-running bests (revtree's verification; OpenEvolve
  has none);
- disk per candidate: what the run left on disk over N (revtree: its home, the SQLite
  file with its WAL and the runs' git repository; OpenEvolve: its output folder, where
  it writes a checkpoint only every ``checkpoint_interval`` iterations, none in these
  runs: nothing it could resume from).

Then the median time of ``revtree --version``, ``revtree ls`` and
``openevolve-run --help``. OpenEvolve lives in a venv under ``--cache`` (created on the
first run from PyPI, reused after). With ``--baseline REV``, revtree at that revision
(a git worktree, ``worktree.py``, first on ``PYTHONPATH``; the package each run imported
is checked) runs too, interleaved with the others in every repetition, as the row
``rt REV`` (its first seven characters). Measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from worktree import worktree

from revtree.agents.llm.fake_server import FakeLLMServer, FakeRequest, current_file

OE_VERSION = "0.4.0"
LIMIT = 600  # seconds a run may take beyond 4 N S (its sleeps, verification included)
console = Console(width=160)

PROGRAM = "# EVOLVE-BLOCK-START\nA = 0.0\n# EVOLVE-BLOCK-END\n\n\ndef value():\n    return A\n"
EVALUATOR = """\
import importlib.util
import time
{imports}

def evaluate(program_path):
    time.sleep({sleep})
    spec = importlib.util.spec_from_file_location("p", program_path)
    p = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(p)
    return {{"combined_score": {score}{noise}}}
"""
NOISE = " + __import__('random').gauss(0, {sigma})"  # --noise: a noisy evaluator
# the evaluator's imports and score: the standard library only, or (--evaluator numpy)
# as OpenEvolve's own examples write theirs, numpy at the top
EVALUATORS = {
    "plain": ("", "-((p.value() - 3.0) ** 2)"),
    "numpy": ("\nimport numpy as np\n", "float(-np.sum((np.array([p.value()]) - 3.0) ** 2))"),
}
CONFIG = """\
max_iterations: {n}
random_seed: 42
checkpoint_interval: 100000
log_level: WARNING
diff_based_evolution: true
llm:
  api_base: {url}
  api_key: fake
  models:
    - name: fake-model
      weight: 1.0
  temperature: 0.7
  retries: 0
  timeout: 60
evaluator:
  timeout: 60
  parallel_evaluations: {k}
  cascade_evaluation: false
database:
  random_seed: 42
  num_islands: 1
"""
OE_DRIVER = """\
import json, sys, time
t0, t0_wall = time.monotonic(), time.time()
import asyncio
from openevolve import OpenEvolve
from openevolve.config import load_config
folder, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
oe = OpenEvolve(f"{folder}/initial_program.py", f"{folder}/evaluator.py",
                load_config(f"{folder}/config.yaml"), output_dir=out)
t1 = time.monotonic()
best = asyncio.run(oe.run(iterations=n))
wall = time.monotonic() - t1
score = best.metrics.get("combined_score") if best else None
print(json.dumps({"wall": wall, "start": t1 - t0, "best": score, "t0": t0_wall}))
"""


class Model:
    """The fake model both systems talk to: each answer moves ``A`` of the program in
    the prompt by a seeded step, in the format the asker wants."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(self, req: FakeRequest) -> str:
        step = self.rng.uniform(-0.5, 1.0)
        if "# Current Program" in req.user:  # OpenEvolve's diff prompt
            section = req.user.split("# Current Program\n", 1)[1]
            a = _a(section)
            return (
                f"Move A closer.\n\n<<<<<<< SEARCH\nA = {a!r}\n=======\n"
                f"A = {a + step!r}\n>>>>>>> REPLACE\n"
            )
        a = _a(current_file(req, "initial_program.py") or req.user)
        body = PROGRAM.replace("A = 0.0", f"A = {a + step!r}")
        return (
            f"HYPOTHESIS: move A by {step:+.3f}\n\n"
            f"=== FILE: initial_program.py ===\n```python\n{body}```\n"
        )


class Counted:
    """A responder that counts its calls in memory shared with the benchmark, and notes
    when the first came (``first``: wall-clock seconds, 0 before any)."""

    def __init__(self, model: Model, count: Any, first: Any) -> None:
        self.model, self.count, self.first = model, count, first

    def __call__(self, req: FakeRequest) -> str:
        with self.count.get_lock():
            self.count.value += 1
            if not self.first.value:
                self.first.value = time.time()
        return self.model(req)


def _serve(responder: Callable[[FakeRequest], str], ready: Any, stop: Any) -> None:
    with FakeLLMServer(responder) as srv:
        ready.put(srv.openai_url)
        stop.wait(3600)


@contextlib.contextmanager
def forked_server(responder: Callable[[FakeRequest], str]) -> Iterator[str]:
    """The fake server answering with ``responder`` in a forked process, so that neither
    system shares an interpreter lock with it: its URL. What the responder notes must go
    to memory shared before the fork (``multiprocessing``'s values and arrays)."""
    ctx = multiprocessing.get_context("fork")
    ready, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_serve, args=(responder, ready, stop), daemon=True)
    proc.start()
    try:
        yield ready.get(timeout=60)
    finally:
        stop.set()
        proc.join(10)
        if proc.is_alive():
            proc.kill()


@contextlib.contextmanager
def served(model: Model) -> Iterator[tuple[str, Counted]]:
    """The fake server in a forked process: its URL and its shared call counter (with
    the time of the first call, ``count.first``)."""
    ctx = multiprocessing.get_context("fork")
    responder = Counted(model, ctx.Value("i", 0), ctx.Value("d", 0.0))
    with forked_server(responder) as url:
        yield url, responder


def _a(text: str) -> float:
    m = re.search(r"^A = ([-+0-9.e]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def make_folder(
    root: Path,
    sleep: float,
    n: int,
    k: int,
    url: str,
    noise: float = 0.0,
    evaluator: str = "plain",
) -> Path:
    root.mkdir(parents=True)
    (root / "initial_program.py").write_text(PROGRAM)
    noisy = NOISE.format(sigma=noise) if noise else ""
    imports, score = EVALUATORS[evaluator]
    (root / "evaluator.py").write_text(
        EVALUATOR.format(imports=imports, sleep=sleep, score=score, noise=noisy)
    )
    (root / "config.yaml").write_text(CONFIG.format(n=n, k=k, url=url))
    return root


def oe_python(cache: Path) -> Path:
    """The OpenEvolve venv's python, created under ``cache`` if missing."""
    venv = cache / f"openevolve-{OE_VERSION}"
    py = venv / "bin" / "python"
    if not (venv / "bin" / "openevolve-run").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "pip"), "install", "-q", f"openevolve=={OE_VERSION}"]
        subprocess.run(pip, check=True)
    return py


REVTREE_DRIVER = """\
import json, sys, time, warnings
from pathlib import Path
t0, t0_wall = time.monotonic(), time.time()
from revtree import collector
collector.hold()  # as `revtree run`'s main() does first (revtree.collector)
import revtree
from revtree.memory import Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.tasks import load_task
folder, home, n, k, url, lookahead, spaces = json.loads(sys.argv[1])
home = Path(home)
store = Store(f"sqlite:///{home}/revtree.db")
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    spec = load_task(folder)
spec = spec.with_overrides(
    budget={"max_nodes": n + 1},  # the baseline and N candidates
    search={"parallel": k, **({} if lookahead is None else {"lookahead": lookahead})},
    sandbox={"backend": "local", **({"workspaces": spaces} if spaces else {})},
    agents={
        "mode": "llm",
        "model": "openai-compatible:fake-model",
        "base_url": url,
        "max_retries": 0,
        "reviewer": {"enabled": False},
    },
)
run = create_run(store, spec, home)
orchestrator = Orchestrator(store, run.id, home=home)
t1 = time.monotonic()
orchestrator.drive()
wall = time.monotonic() - t1
kinds = store.evaluations_by_kind(run.id, spec.evaluate.repeats)
nodes = store.nodes(run.id)
best = max(x.score for x in nodes if x.score is not None)
failed = sum(x.status.value != "succeeded" for x in nodes)
store.close()
print(json.dumps({"wall": wall, "start": t1 - t0, "best": best, "t0": t0_wall, "failed": failed,
                  "trust": kinds.get("verify", 0), "revtree": revtree.__file__}))
"""


def first(tree: Path | None) -> dict[str, str]:
    """``PYTHONPATH`` with ``tree`` first (nothing where None)."""
    if tree is None:
        return {}
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}


def child_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of either system's process: HOME in ``tmp``, and PYTHONPATH kept
    (where revtree is importable through it rather than installed)."""
    kept = {k: v for k, v in os.environ.items() if k == "PYTHONPATH"}
    return {**kept, "HOME": str(tmp), **extra}


def run_revtree(
    tmp: Path,
    folder: Path,
    n: int,
    k: int,
    sleep: float,
    url: str,
    count: Counted,
    lookahead: int | None,
    tree: Path | None = None,
    workspaces: str | None = None,
) -> dict[str, Any]:
    """One revtree run in a fresh interpreter, as OpenEvolve's: its start-up counts its
    imports (LangGraph, SQLAlchemy, the model SDK) as OpenEvolve's counts its own. It
    runs in ``tmp``: ``python -c`` puts its working folder first on ``sys.path``, where a
    checkout of revtree would shadow the one ``PYTHONPATH`` names (a baseline's).
    ``revtree``: the package it imported. ``tree``: a checkout of revtree to run instead
    of this one (first on ``PYTHONPATH``; refused if another was imported)."""
    home = tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    before = count.count.value
    params = json.dumps([str(folder), str(home), n, k, url, lookahead, workspaces])
    out = subprocess.run(
        [sys.executable, "-c", REVTREE_DRIVER, params],
        capture_output=True,
        text=True,
        timeout=LIMIT + 4 * n * sleep,
        env=child_env(tmp, PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin", **first(tree)),
        cwd=tmp,
    )
    if out.returncode != 0:
        raise RuntimeError(f"revtree failed:\n{out.stderr[-3000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    want = (tree or Path(__file__).resolve().parent.parent).resolve()
    if Path(r["revtree"]).resolve().parent.parent != want:
        raise RuntimeError(f"the run imported {r['revtree']}, not revtree from {want}")
    return {
        "wall": r["wall"],
        "start": r["start"],
        "first": count.first.value - r["t0"],
        "calls": count.count.value - before,
        "trust": r["trust"],
        "best": r["best"],
        "failed": r["failed"],
        "disk": disk(home),
        "revtree": r["revtree"],
    }


def disk(folder: Path) -> int:
    """Bytes of the files under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def run_openevolve(
    tmp: Path, folder: Path, n: int, sleep: float, py: Path, count: Counted
) -> dict[str, float]:
    driver = tmp / "oe_driver.py"
    driver.write_text(OE_DRIVER)
    before = count.count.value
    out = subprocess.run(
        [str(py), str(driver), str(folder), str(tmp / "oe-out"), str(n)],
        capture_output=True,
        text=True,
        timeout=LIMIT + 4 * n * sleep,
        env=child_env(tmp, PATH="/usr/bin:/bin", OPENAI_API_KEY="fake"),
    )
    if out.returncode != 0:
        raise RuntimeError(f"OpenEvolve failed:\n{out.stderr[-3000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    calls, used = count.count.value - before, disk(tmp / "oe-out")
    return {
        "wall": r["wall"],
        "start": r["start"],
        "first": count.first.value - r["t0"],
        "calls": calls,
        "trust": 0,
        "best": r["best"],
        "disk": used,
    }


def cli_times(py: Path, reps: int) -> dict[str, float]:
    oe_run = py.parent / "openevolve-run"
    with tempfile.TemporaryDirectory() as home:
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "REVTREE_HOME": home}
        cmds = {
            "revtree --version": [sys.executable, "-m", "revtree", "--version"],
            "revtree ls": [sys.executable, "-m", "revtree", "ls"],
            "openevolve-run --help": [str(oe_run), "--help"],
        }
        out = {}
        for name, cmd in cmds.items():
            walls = []
            for _ in range(reps):
                t0 = time.monotonic()
                subprocess.run(cmd, capture_output=True, env=env, check=True, timeout=120)
                walls.append(time.monotonic() - t0)
            out[name] = statistics.median(walls)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=48, help="candidates per run")
    parser.add_argument("--reps", type=int, default=3, help="runs of each system per cell")
    parser.add_argument("--sleep", type=float, nargs="+", default=[0.0, 1.0])
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "revtree-bench")
    parser.add_argument("--cli-reps", type=int, default=5)
    parser.add_argument(
        "--lookahead",
        type=int,
        default=None,
        help="revtree's [search] lookahead (default: the task's: 0 at K = 1, else K)",
    )
    parser.add_argument(
        "--noise",
        type=float,
        default=0.0,
        help="the evaluator adds Gaussian noise of this sigma to each score (default: none)",
    )
    parser.add_argument(
        "--evaluator",
        choices=sorted(EVALUATORS),
        default="plain",
        help="plain: the standard library only; numpy: numpy imported at the top, as "
        "OpenEvolve's examples do (default: plain)",
    )
    parser.add_argument(
        "--baseline", help="a revision of revtree that runs too, interleaved (a git worktree)"
    )
    parser.add_argument(
        "--workspaces",
        help="revtree's [sandbox] workspaces (e.g. /dev/shm) for this tree's runs, not the "
        "baseline's (default: the run's own folder)",
    )
    args = parser.parse_args()
    py = oe_python(args.cache)
    with contextlib.ExitStack() as stack:
        base = stack.enter_context(worktree(args.baseline)) if args.baseline else None
        run_all(args, py, base)


def run_all(args: argparse.Namespace, py: Path, base: Path | None) -> None:
    """Every cell's runs, interleaved, and the tables (``base``: a baseline's tree)."""
    odd: list[str] = []  # runs that do not compare: a candidate failed or called no model
    table = Table(
        "S (s)",
        "K",
        "system",
        "start-up (s)",
        "1st call (s)",
        "wall (s)",
        "overhead/cand (ms)",
        "w/o trust (ms)",
        "utilisation",
        "util. w/o trust",
        "calls/cand",
        "trust cost (evals)",
        "disk/cand (KB)",
        "best",
        title=f"revtree vs OpenEvolve {OE_VERSION}, N={args.n}, {args.reps} interleaved reps"
        + (f", evaluator noise sigma {args.noise:g}" if args.noise else "")
        + (f", {args.evaluator} evaluator" if args.evaluator != "plain" else "")
        + (f", revtree's workspaces in {args.workspaces}" if args.workspaces else ""),
        caption="disk: revtree keeps every candidate (resumable); OpenEvolve writes a "
        "checkpoint only every checkpoint_interval iterations (100 by default, none here): "
        "what it leaves is no run it could resume",
    )
    with tempfile.TemporaryDirectory(prefix="revtree-peer-") as d:
        tmp = Path(d)
        for sleep in args.sleep:
            for k in args.parallel:
                names = ["revtree", "openevolve"] + ([f"rt {args.baseline[:7]}"] if base else [])
                rows: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
                for rep in range(args.reps):
                    for system in rows:
                        where = tmp / f"{system}-{sleep}-{k}-{rep}"
                        with served(Model(seed=rep)) as (url, count):
                            folder = make_folder(
                                where / "task", sleep, args.n, k, url, args.noise, args.evaluator
                            )
                            if system != "openevolve":
                                tree = None if system == "revtree" else base
                                r = run_revtree(
                                    where,
                                    folder,
                                    args.n,
                                    k,
                                    sleep,
                                    url,
                                    count,
                                    args.lookahead,
                                    tree,
                                    args.workspaces if tree is None else None,
                                )
                            else:
                                r = run_openevolve(where, folder, args.n, sleep, py, count)
                        rows[system].append(r)
                        shutil.rmtree(where, ignore_errors=True)
                for system, rs in rows.items():
                    for r in rs:  # a cell compares N candidates evaluated by each
                        if r["calls"] != args.n or r.get("failed"):
                            odd.append(
                                f"S = {sleep:g}, K = {k}, {system}: {r['calls']} model calls "
                                f"for {args.n} candidates, {r.get('failed', '?')} nodes not "
                                "succeeded"
                            )
                    wall = statistics.fmean(r["wall"] for r in rs)
                    ideal = args.n * sleep / k
                    trust = statistics.fmean(r["trust"] for r in rs)
                    apart = (wall - (args.n + trust) * sleep / k) / args.n * 1000
                    table.add_row(
                        f"{sleep:g}",
                        str(k),
                        system,
                        f"{statistics.fmean(r['start'] for r in rs):.2f}",
                        f"{statistics.fmean(r['first'] for r in rs):.2f}",
                        f"{wall:.2f}",
                        f"{(wall - ideal) / args.n * 1000:.0f}",
                        f"{apart:.0f}",
                        f"{ideal / wall:.2f}" if ideal else "-",
                        f"{ideal / (wall - trust * sleep / k):.2f}" if ideal else "-",
                        f"{statistics.fmean(r['calls'] for r in rs) / args.n:.2f}",
                        f"{trust:.1f}",
                        f"{statistics.fmean(r['disk'] for r in rs) / args.n / 1024:.1f}",
                        f"{statistics.fmean(r['best'] for r in rs):.3g}",
                    )
    console.print(table)
    for line in odd:
        console.print(f"[red]not comparable[/red]: {line}", markup=True, highlight=False)
    cli = Table("command", "median wall (s)", title=f"CLI start ({args.cli_reps} runs each)")
    for name, wall in cli_times(py, args.cli_reps).items():
        cli.add_row(name, f"{wall:.3f}")
    console.print(cli)


if __name__ == "__main__":
    main()
