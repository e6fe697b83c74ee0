"""The one exception tree of revtree.

Errors are raised where they happen and caught only at a boundary: the candidate
(recorded as a failed node, the run goes on) or the run (recorded as its status).
"""

from __future__ import annotations


class RevtreeError(Exception):
    """Base of every error revtree raises on purpose."""


class TaskSpecError(RevtreeError, ValueError):
    """A task file (or folder) is malformed. The message names the file and key."""


class SandboxError(RevtreeError, RuntimeError):
    """The sandbox itself failed (not the evaluated code)."""


class InfrastructureError(RevtreeError, RuntimeError):
    """Something outside the candidate failed: an unreachable model endpoint or a key it
    refuses, a full disk, a failing database. Never counted against a candidate: the
    node stays unfinished, and after a few in a row the run stops ``failed``, resumable.
    The message names the URL or path."""


class LLMUnreachable(InfrastructureError):
    """The model endpoint cannot be reached, or refuses the key (the URL is named)."""


class InfraFailure(InfrastructureError):
    """A step of a candidate failed for a reason outside it (the cause, an
    ``InfrastructureError``, a full disk, a failing database, is chained): raised at the
    candidate boundary, its node stays unfinished; the run counts them in a row."""


class BaselineFailed(RevtreeError, RuntimeError):
    """The baseline (node 0) cannot be scored: nothing can be compared, the run stops
    ``failed``."""


class Cancelled(RevtreeError):
    """Work was cancelled because the run is stopping; nothing was recorded for it."""


class EditError(RevtreeError, ValueError):
    """A proposed edit cannot be applied (unknown file, pattern not found, ...)."""


class EditRefused(EditError):
    """An answer whose edits cannot be applied; carries the answer, which a repair
    round (an edge of the pipeline graph) shows back to the coder."""

    def __init__(self, message: str, answer: str = "") -> None:
        super().__init__(message)
        self.answer = answer


class EditUnreadable(EditRefused):
    """An answer from which no edit could be read at all (no blocks, malformed ones), as
    opposed to edits that were read and do not apply. Repaired like any refused answer;
    several candidates in a row ending so are the parser's failure, not theirs."""


class StoreError(RevtreeError, RuntimeError):
    """The SQL memory or the git store failed or is inconsistent."""


class RunNotFound(StoreError, LookupError):
    """No run matches the id (or prefix) given."""


class RunBusy(RevtreeError, RuntimeError):
    """The run is already being driven by a live process."""
