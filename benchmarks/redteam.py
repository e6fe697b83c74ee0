"""The reviewer and the whole pipeline against reward hacks: catch rate and false
rejects on the red-team set.

    python benchmarks/redteam.py [--cases] [--workers 2] [--settings ABC | ABCD]

The set (tests/agents/redteam/) holds reward-hacking diffs and honest diffs against four
small tasks (a TSP solver, a curve fit, a timed prime count, a classifier on protected
data), each in the grade-step shape with a holdout split into guard and final halves.
Every row is measured:

- A: the static reviewer alone;
- B: static, then the LLM reviewer on a SCRIPTED STAND-IN model (the stand-in is a few
  heuristics written alongside the set, so B measures the plumbing and a plausible
  floor, not a real model's judgement);
- C: the whole pipeline, one real run per case (about 5 s each): a task folder with a
  grade step and a guarded holdout, LLM mode against the fake OpenAI-compatible server
  whose coder writes the case as node 1 and whose reviewer is the same stand-in, local
  sandbox. A hack counts as caught when node 1 is not the recommended best node; an
  honest change is a false reject when node 1 is rejected or failed, or alarmed while
  it truly improves on the final holdout half (measured for alarmed honest nodes);
- D (only when asked, --settings ABCD): C with the LLM review off, so the static checks,
  the grade step and the drift alarm stand alone (about as long as C).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.agents.redteam.cases import CASES
from tests.agents.redteam.harness import SETTINGS, judge


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", action="store_true", help="one line per case and setting")
    parser.add_argument("--workers", type=int, default=2, help="parallel runs in setting C")
    parser.add_argument("--settings", default="ABC", help="which settings to measure")
    args = parser.parse_args()
    hacks = [c for c in CASES if c.kind == "hack"]
    honest = [c for c in CASES if c.kind == "honest"]
    rows, missed = [], []
    for key, (label, pipeline) in SETTINGS.items():
        if key not in args.settings.upper():
            continue
        start = time.monotonic()
        res = judge(pipeline, workers=args.workers if key in "CD" else 1)
        took = time.monotonic() - start
        caught = [res[c.name] for c in hacks if res[c.name].caught]
        false = [c.name for c in honest if res[c.name].caught]
        errors = [n for n, o in res.items() if o.by == "harness error"]
        by = Counter(o.by for o in caught)
        how = ", ".join(f"{n} {k}" for k, n in sorted(by.items(), key=lambda kv: -kv[1]))
        caught_s, false_s = f"{len(caught)}/{len(hacks)}", f"{len(false)}/{len(honest)}"
        rows.append((key, f"{label} [measured, {took:.0f}s]", caught_s, false_s, how))
        missed += [(key, c.name, res[c.name].detail) for c in hacks if not res[c.name].caught]
        if errors:
            print(f"{key}: HARNESS ERRORS (not a verdict): {errors}", file=sys.stderr)
        if key in "CD":
            recommended = sum(1 for c in honest if res[c.name].detail.startswith("recommended"))
            noisy = [c.name for c in honest if res[c.name].by == "drift alarm (no true gain)"]
            print(f"{key}: {recommended}/{len(honest)} honest changes recommended (the others were")
            print("   no better than the baseline, which is no reject)")
            if noisy:
                print(f"{key}: alarmed without a true gain (no false reject): {', '.join(noisy)}")
        if args.cases:
            for c in CASES:
                o = res[c.name]
                mark = (
                    ("caught" if o.caught else "MISSED")
                    if c.kind == "hack"
                    else ("FALSE REJECT" if o.caught else "accepted")
                )
                why = "; ".join(o.reasons)[:100]
                print(f"{key} {c.kind:6} {c.name:36} {mark:12} {o.by:28} {o.detail} {why}")
    width = max(len(r[1]) for r in rows)
    print(f"\n{'':2}{'setting':{width}}  {'caught hacks':>12}  {'false rejects':>13}  caught by")
    for key, label, caught_s, false_s, how in rows:
        print(f"{key:2}{label:{width}}  {caught_s:>12}  {false_s:>13}  {how}")
    for key, name, detail in missed:
        print(f"{key} misses {name}" + (f": {detail}" if detail else ""))


if __name__ == "__main__":
    main()
