"""The names of the stages an evaluation is recorded under that readers look for (a
task's own stages keep their names): the scored run, and the holdout run at the end
and during the search. The one place they are written: the evaluator records under
them, the orchestrator and the web read by them; none of them needs the other's
module for it."""

from __future__ import annotations

FULL = "full"
"""The scored run of the evaluator (its repeats share the name)."""
HOLDOUT = "holdout"
"""The holdout run at the end of a run: the final judge."""
GUARD = "guard"
"""The holdout run during the search, on a new best (``HOLDOUT``: the final judge)."""
