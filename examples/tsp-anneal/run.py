"""The run step of tsp-anneal (untrusted: it runs the candidate's solver).

``python run.py [--holdout]`` solves the dev instances (or the holdout's) with
solver.solve and writes the tours to ``answers.json``: ``{"tours": [[city, ...], ...]}``.
It computes no score: grade.py does, in a fresh sandbox that holds no candidate code,
so nothing this process (or the solver) prints or writes can become the score.
A crash of the solver: exit code 1.
"""

import json
import os
import sys

from evaluate import instances_for, make_instance


def main(argv):
    instances = instances_for(argv)
    sys.path.insert(0, os.getcwd())
    import solver

    base = int(os.environ.get("REVTREE_SEED", 0))
    tours = []
    for k, (seed, n) in enumerate(instances):
        try:
            tours.append(list(solver.solve(make_instance(seed, n), seed=base + 1000 * k)))
        except Exception as e:  # any solver failure fails the evaluation
            print(f"error: solve() raised on instance {k} ({n} cities): {e!r}", file=sys.stderr)
            return 1
    with open("answers.json", "w", encoding="utf-8") as f:
        json.dump({"tours": tours}, f)
    print(f"wrote answers.json: {len(tours)} tours")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
