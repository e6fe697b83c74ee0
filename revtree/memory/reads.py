"""The reads of one run that its summary needs (``report.summarize``), as a protocol;
and :class:`StoreReads`, those and the runs table: what the commands that only read
(ls, show, watch, stop, compare) take.

:class:`~revtree.memory.store.Store` satisfies both structurally (no subclassing, no
registration), and so do the dashboard's lean read model
(``revtree.web.queries.SummaryView``, a :class:`RunReads`) and the light reads of a
SQLite home (``revtree.memory.sqlite_reads.SqliteReads``, a :class:`StoreReads`), which
have no write methods at all. A function that takes one cannot write to the database
through it.
"""

from __future__ import annotations

from typing import Protocol

from revtree.memory.records import Decision, EvalResult, Event, LLMCall, Node, RunInfo


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


class StoreReads(RunReads, Protocol):
    """A run's reads and the runs table: what the read-only commands take."""

    url: str

    def get_run(self, run_id: str) -> RunInfo:
        """The run with this id, or the only one whose id starts with it, or 'last'."""
        ...

    def list_runs(self) -> list[RunInfo]:
        """Every run, oldest first."""
        ...

    def node(self, run_id: str, node_id: int) -> Node:
        """One node of the run."""
        ...
