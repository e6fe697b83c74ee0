"""The static reviewer: a candidate may change editable files only.

It runs before any evaluation. A diff that touches a protected or otherwise
non-editable file is rejected with the offending paths named.
"""

from __future__ import annotations

from collections.abc import Iterable

from revtree.agents.base import Verdict
from revtree.tasks.load import matches
from revtree.tasks.spec import TaskSpec


class StaticReviewer:
    def __init__(self, spec: TaskSpec) -> None:
        self.editable, self.protected = spec.editable, spec.protected

    def review(self, changed_paths: Iterable[str]) -> Verdict:
        changed = list(changed_paths)
        reasons = []
        protected = [p for p in changed if matches(p, self.protected)]
        if protected:
            reasons.append(f"touches protected file(s) {protected}")
        other = [p for p in changed if not matches(p, self.editable) and p not in protected]
        if other:
            reasons.append(f"touches non-editable file(s) {other}")
        return Verdict(accepted=not reasons, reasons=tuple(reasons))
