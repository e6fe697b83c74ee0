"""The model review beside the evaluation, against the review before it (issue 24).

    python benchmarks/review_beside.py [--n 8] [--sleep 0.5] [--latency 0.5] [--reps 2]

One task (``X`` in prog.py; the evaluator sleeps S seconds and scores ``X``) in the
namespace sandbox (bwrap), LLM agents in one call per candidate against the fake server
on 127.0.0.1 whose reviewer answers after L seconds. The same run twice per repetition,
interleaved: the review beside the evaluation (bwrap contains the candidate), and the
review first (the same sandbox told it contains nothing: what the local sandbox does).
Prints the wall time per candidate of each; the ideal saving is min(S, L) per candidate.
Measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import textwrap
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from revtree.agents.llm.fake_server import FakeLLMServer, FakeRequest, current_file
from revtree.memory import Store
from revtree.orchestrator import Orchestrator, create_run
from revtree.sandboxes.bwrap import BwrapSandbox, usable
from revtree.tasks import load_task

PROGRAM = "X = {x}\n"
EVALUATOR = """\
import json, os, time
time.sleep({sleep})
ns = {{}}
exec(open("prog.py").read(), ns)
os.write(3, json.dumps({{"score": float(ns["X"])}}).encode())
"""


def task(root: Path, n: int, sleep: float) -> Path:
    root.mkdir(parents=True)
    (root / "prog.py").write_text(PROGRAM.format(x=1.0))
    (root / "ev.py").write_text(EVALUATOR.format(sleep=sleep))
    (root / "task.toml").write_text(
        textwrap.dedent(f"""\
        name = "beside"
        goal = "Raise X."
        editable = ["prog.py"]
        protected = ["ev.py"]
        [evaluate]
        command = "python ev.py"
        metric = "score"
        direction = "maximize"
        timeout = 60
        [search]
        policy = "greedy"
        num_drafts = 1
        novelty_threshold = 1.0
        [budget]
        max_nodes = {n + 1}
        [sandbox]
        backend = "bwrap"
        [agents]
        mode = "llm"
        calls = "one"
        model = "openai-compatible:m"
        max_retries = 0
        timeout = 30
        [agents.proposer]
        enabled = false
        [agents.reviewer]
        enabled = true
        """)
    )
    return root


class Model:
    """The coder raises X by one; the reviewer accepts after ``latency`` seconds."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    def __call__(self, req: FakeRequest) -> str:
        if "review a change" in req.system:
            time.sleep(self.latency)
            return "VERDICT: accept\nKIND: none\nREASONS: fine"
        shown = re.search(r"X = ([0-9.]+)", current_file(req, "prog.py") or "")
        x = float(shown.group(1) if shown else 1.0) + 1
        return "HYPOTHESIS: raise X\n=== FILE: prog.py ===\n```python\n" + f"X = {x}\n```\n"


def run_once(root: Path, n: int, sleep: float, url: str) -> float:
    home = root / "home"
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    spec = load_task(task(root / "task", n, sleep)).with_overrides(agents={"base_url": url})
    run = create_run(store, spec, home)
    t0 = time.monotonic()
    Orchestrator(store, run.id, home=home).drive()
    wall = time.monotonic() - t0
    store.close()
    return wall / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=8, help="candidates per run")
    parser.add_argument("--sleep", type=float, default=0.5, help="S: evaluation seconds")
    parser.add_argument("--latency", type=float, default=0.5, help="L: reviewer seconds")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    if (why := usable()) is not None:
        raise SystemExit(f"the namespace sandbox cannot run here: {why}")
    per: dict[str, list[float]] = {"beside": [], "before": []}
    with (
        tempfile.TemporaryDirectory(prefix="revtree-beside-") as d,
        FakeLLMServer(Model(args.latency)) as srv,
    ):
        for rep in range(args.reps):
            for mode in per:
                BwrapSandbox.contained = mode == "beside"
                root = Path(d) / f"{mode}-{rep}"
                per[mode].append(run_once(root, args.n, args.sleep, srv.openai_url))
    BwrapSandbox.contained = True
    table = Table(
        "review",
        "wall per candidate (s)",
        "runs",
        title=f"review beside vs before: N={args.n}, S={args.sleep:g} s, L={args.latency:g} s",
    )
    for mode, walls in per.items():
        table.add_row(mode, f"{statistics.fmean(walls):.2f}", " ".join(f"{w:.2f}" for w in walls))
    Console().print(table)
    saved = statistics.fmean(per["before"]) - statistics.fmean(per["beside"])
    ideal = min(args.sleep, args.latency)
    print(f"saved per candidate: {saved:.2f} s (ideal min(S, L) = {ideal:g} s)")


if __name__ == "__main__":
    main()
