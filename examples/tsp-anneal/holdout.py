"""Holdout check of solver.py: mean tour length on instances the agents never see.

Hidden from the agents (task.toml [holdout] files): it never enters the candidates'
code. It reuses the protected evaluator (copied fresh into every workspace) on other
instance seeds, so the protocol is the same: metrics JSON to $REVTREE_METRICS and as
the last stdout line; an invalid tour or a crash: exit code 1.
"""

import os
import sys

sys.path.insert(0, os.getcwd())
from evaluate import run

INSTANCES = [(2001, 42), (2002, 50), (2003, 56), (2004, 60)]

if __name__ == "__main__":
    run(INSTANCES)
