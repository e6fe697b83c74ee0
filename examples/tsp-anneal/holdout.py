"""The holdout instances of tsp-anneal: instances the agents never see.

Hidden from the agents (task.toml [holdout] files): it never enters the candidates'
code. ``python run.py --holdout`` solves these and ``python grade.py --holdout`` grades
them, as for the dev instances. Two halves: the guard, consulted on every new best
during the search (``$REVTREE_STAGE`` is ``guard``), and the final set, run once on the
recommended node (``$REVTREE_STAGE`` is ``holdout``), which so stays a clean judge.
"""

GUARD = [(3001, 44), (3002, 48), (3003, 54), (3004, 58)]
FINAL = [(2001, 42), (2002, 50), (2003, 56), (2004, 60)]
INSTANCES = FINAL
