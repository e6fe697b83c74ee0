"""The grade step of tsp-anneal (trusted): score the tours the run step wrote.

``python grade.py [--holdout]`` runs in a fresh sandbox holding only the protected files
and the run step's declared outputs, under ``$REVTREE_OUTPUTS`` (``outputs/``): no code
of the candidate. It reads ``answers.json``, checks that each tour is a permutation of
its instance's cities and computes every length itself; nothing but the tours is taken
from the candidate. The metrics JSON goes to file descriptor 3 and is printed as the
last line of stdout. A missing, malformed or invalid answer: exit code 1.
"""

import contextlib
import json
import os
import sys

from evaluate import check_tour, closed_length, instances_for, make_instance


def fail(why):
    print(f"error: {why}", file=sys.stderr)
    sys.exit(1)


def report(metrics):
    line = json.dumps(metrics)
    with contextlib.suppress(OSError):  # not in a sandbox: the printed line is the report
        os.write(3, line.encode())
    print(line)


def main(argv):
    instances = instances_for(argv)
    path = os.path.join(os.environ.get("REVTREE_OUTPUTS", "outputs"), "answers.json")
    try:
        with open(path, encoding="utf-8") as f:
            answers = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read {path}: {e}")
    tours = answers.get("tours") if isinstance(answers, dict) else None
    if not isinstance(tours, list) or len(tours) != len(instances):
        fail(f'answers.json must hold {{"tours": [...]}} with {len(instances)} tours')
    lengths = []
    for k, ((seed, n), tour) in enumerate(zip(instances, tours, strict=True)):
        why = check_tour(tour, n) if isinstance(tour, list) else "tour is not a list"
        if why is not None:
            fail(f"invalid tour on instance {k} ({n} cities): {why}")
        lengths.append(closed_length(make_instance(seed, n), tour))
    mean = sum(lengths) / len(lengths)
    report(
        {
            "tour_length": round(mean, 6),
            "per_instance": [round(x, 6) for x in lengths],
            "valid": True,
        }
    )


if __name__ == "__main__":
    main(sys.argv[1:])
