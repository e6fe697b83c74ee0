"""Score model.py: root-mean-square error against a hidden curve (lower is better).

Protected: agents may not change this file. Deterministic (the same code always gets the
same score). A model that raises or returns a non-finite value fails: exit code 1. Prints
the metrics JSON as the last line of stdout and writes it to $REVTREE_METRICS when set.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys

POINTS = [-3 + 0.1 * i for i in range(61)]  # includes 0.0


def target(x):
    return 0.5 + 0.3 * x + 1.2 * math.sin(1.5 * x) - 0.15 * x * x


def main():
    sys.path.insert(0, os.getcwd())
    from model import model

    errors = []
    for x in POINTS:
        try:
            y = float(model(x))
        except Exception as e:  # any failure of the model fails the evaluation
            print(f"error: model({x:.1f}) raised {e!r}", file=sys.stderr)
            sys.exit(1)
        if not math.isfinite(y):
            print(f"error: model({x:.1f}) = {y}", file=sys.stderr)
            sys.exit(1)
        errors.append((y - target(x)) ** 2)
    line = json.dumps({"rmse": round(math.sqrt(sum(errors) / len(errors)), 6)})
    with contextlib.suppress(OSError):  # not in a sandbox: the printed line stands alone
        os.write(3, line.encode())  # revtree's metrics channel, file descriptor 3
    print(line)


if __name__ == "__main__":
    main()
