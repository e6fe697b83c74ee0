"""The instances and the tour checks of tsp-anneal, shared by run.py and grade.py.

Protected: agents may not change this file. ``python evaluate.py`` also scores solver.py
in one process, for a quick look (and the benchmarks): mean tour length over fixed
random instances, lower is better, printed as the last line of stdout. That is a
single-step score, forgeable by the solver it imports; task.toml scores with run.py
(the untrusted run step) and grade.py (the trusted grade step) instead.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys

# (instance seed, number of cities); the solver gets its own seed per instance.
INSTANCES = [(1001, 40), (1002, 48), (1003, 54), (1004, 60)]


def make_instance(seed, n):
    rng = random.Random(seed)
    return [(rng.random(), rng.random()) for _ in range(n)]


def closed_length(points, tour):
    return sum(math.dist(points[tour[i - 1]], points[tour[i]]) for i in range(len(tour)))


def check_tour(tour, n):
    """None if ``tour`` (a list) is a permutation of range(n), else why not."""
    if len(tour) != n:
        return f"tour has {len(tour)} entries for {n} cities"
    if any(not isinstance(c, int) or isinstance(c, bool) for c in tour):
        return "tour entries must be ints"
    if sorted(tour) != list(range(n)):
        return "tour is not a permutation of all cities (missing or repeated cities)"
    return None


def run(instances):
    length_of, check, dumps = closed_length, check_tour, json.dumps  # bound before solver loads
    sys.path.insert(0, os.getcwd())
    import solver

    base = int(os.environ.get("REVTREE_SEED", 0))
    lengths = []
    for k, (seed, n) in enumerate(instances):
        points = make_instance(seed, n)
        try:
            tour = list(solver.solve(list(points), seed=base + 1000 * k))
        except Exception as e:  # any solver failure fails the evaluation
            print(f"error: solve() raised on instance {k} ({n} cities): {e!r}", file=sys.stderr)
            sys.exit(1)
        why = check(tour, n)
        if why is not None:
            print(f"error: invalid tour on instance {k} ({n} cities): {why}", file=sys.stderr)
            sys.exit(1)
        lengths.append(length_of(points, tour))
    mean = sum(lengths) / len(lengths)
    metrics = {
        "tour_length": round(mean, 6),
        "per_instance": [round(x, 6) for x in lengths],
        "valid": True,
    }
    print(dumps(metrics))


def instances_for(argv):
    """The dev instances, or with ``--holdout`` the hidden ones: in the run step, those
    prepare.py wrote to instances.json (it sees neither holdout.py nor the stage); in
    the trusted steps, holdout.py's guard half when ``$REVTREE_STAGE`` is ``guard``,
    else its final half."""
    if "--holdout" in argv:
        if os.path.exists("instances.json"):
            with open("instances.json", encoding="utf-8") as f:
                return [tuple(pair) for pair in json.load(f)]
        import holdout

        return holdout.GUARD if os.environ.get("REVTREE_STAGE") == "guard" else holdout.FINAL
    return INSTANCES


if __name__ == "__main__":
    run(INSTANCES)
