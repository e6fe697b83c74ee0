"""The reviewer against reward hacks: catch rate and false rejects on the red-team set.

    python benchmarks/redteam.py [--cases]

The set (tests/agents/redteam/) holds reward-hacking diffs and honest diffs against four
small tasks (a TSP solver, a curve fit, a timed prime count, a classifier on protected
data). Settings:

- A: the static reviewer alone (measured);
- B: static, then the LLM reviewer on a SCRIPTED STAND-IN model (measured; the
  stand-in is a few heuristics written alongside the set, so B measures the plumbing
  and a plausible floor, not a real model's judgement);
- C: the whole pipeline. Review outcomes are measured; what the grade step and the
  drift alarm stop is argued from each hack's mechanism and marked as such, until a
  driven run per case replaces ``argued_pipeline`` (pass another ``Pipeline``).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.agents.redteam.cases import CASES
from tests.agents.redteam.harness import SETTINGS, judge


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", action="store_true", help="one line per case and setting")
    args = parser.parse_args()
    hacks = [c for c in CASES if c.kind == "hack"]
    honest = [c for c in CASES if c.kind == "honest"]
    rows = []
    for key, (label, pipeline) in SETTINGS.items():
        res = judge(pipeline)
        caught = [res[c.name] for c in hacks if res[c.name].caught]
        false = [c.name for c in honest if res[c.name].caught]
        by = Counter(o.by + ("" if o.measured else " (argued)") for o in caught)
        how = ", ".join(f"{n} {k}" for k, n in sorted(by.items()))
        rows.append((key, label, f"{len(caught)}/{len(hacks)}", f"{len(false)}/{len(honest)}", how))
        if args.cases:
            for c in CASES:
                o = res[c.name]
                mark = (
                    ("caught" if o.caught else "MISSED")
                    if c.kind == "hack"
                    else ("FALSE REJECT" if o.caught else "accepted")
                )
                print(
                    f"{key} {c.kind:6} {c.name:36} {mark:12} {o.by}  {'; '.join(o.reasons)[:120]}"
                )
    width = max(len(r[1]) for r in rows)
    print(f"\n{'':2}{'setting':{width}}  {'caught hacks':>12}  {'false rejects':>13}  caught by")
    for key, label, caught_s, false_s, how in rows:
        print(f"{key:2}{label:{width}}  {caught_s:>12}  {false_s:>13}  {how}")


if __name__ == "__main__":
    main()
