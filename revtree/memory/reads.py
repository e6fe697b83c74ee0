"""The reads of one run that its summary needs (``report.summarize``), as a protocol.

:class:`~revtree.memory.store.Store` satisfies it structurally (no subclassing, no
registration), and so does the dashboard's lean read model
(``revtree.web.queries.SummaryView``), which has no write methods at all. A function
that takes a :class:`RunReads` cannot write to the database through it.
"""

from __future__ import annotations

from typing import Protocol

from revtree.memory.records import Decision, EvalResult, Event, LLMCall, Node


class RunReads(Protocol):
    """What ``summarize`` reads of a run, all by its id."""

    def nodes(self, run_id: str) -> list[Node]:
        """The run's nodes in id order."""
        ...

    def evaluations(
        self, run_id: str, node_id: int | None = None, stage: str | None = None
    ) -> list[EvalResult]:
        """The run's evaluations in the order stored, of one node and one stage if given
        (a lean reader may return, for a whole run, only those the summary reads)."""
        ...

    def sandbox_seconds(self, run_id: str) -> float:
        """The sandbox time of all the run's evaluations."""
        ...

    def decisions(self, run_id: str, nodes: dict[int, int]) -> dict[int, Decision]:
        """The approval decision on each of ``nodes`` (node -> attempt), for that attempt."""
        ...

    def events_since(self, run_id: str, after: int = 0, limit: int = 1000) -> list[Event]:
        """The run's events after seq ``after``, at most ``limit``."""
        ...

    def llm_calls(self, run_id: str) -> list[LLMCall]:
        """The run's model calls in the order made."""
        ...
