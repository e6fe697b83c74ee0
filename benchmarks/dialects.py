"""The edit-dialect corpus: the share of answers that behave as expected, per dialect.

    python benchmarks/dialects.py

"Well-formed" dialects must land with exactly the expected files; the ``refused`` row
counts out-of-scope or ill-posed edits that were refused with the expected message
(none may land). The corpus is ``tests/agents/test_dialects.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.agents.test_dialects import CORPUS, acceptance, outcome


def main() -> None:
    rates = acceptance()
    print(f"{'dialect':<10} {'as expected':>12} {'rate':>7}")
    for dialect, (ok, n) in rates.items():
        print(f"{dialect:<10} {f'{ok}/{n}':>12} {ok / n:>7.0%}")
    good = [c for c in CORPUS if not c.out_of_scope]
    landed = sum(outcome(c)[0] for c in good)
    leaked = [c.name for c in CORPUS if c.out_of_scope and "applied" in outcome(c)[1]]
    print(f"well-formed answers landed: {landed}/{len(good)} ({landed / len(good):.0%})")
    print(f"out-of-scope edits landed: {len(leaked)} {leaked or ''}")


if __name__ == "__main__":
    main()
