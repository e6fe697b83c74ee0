"""Where a candidate's model review runs: before its evaluation, or beside it (issue 24).

The pure checks (the near-twin check, the static reviewer) always run first: they cost
nothing and a twin must not cost an evaluation. The reviewers that call a model take a
model's latency, which the candidate's evaluation would otherwise wait for. Where the
sandbox contains what a candidate does (``sandboxes.base.Contained``: Docker, the
namespace sandbox, Ray workers), the review runs in a thread of its own while the
candidate is evaluated, and the evaluation step waits for its verdict before the node is
recorded: a rejection still keeps the node out of the tree's scores, the prompts and the
recommendation (it is recorded ``rejected``; its evaluation rows stay, as spent sandbox
time). In the local sandbox, which contains nothing, and where a person approves each
candidate (who should see the reviewer's verdict first), the review comes first, as
before. A verdict is stored on the node as it is given (``Node.review``: a rejection,
or a model's acceptance), beside an evaluation or before it: a process killed before
the node is recorded loses no verdict, and ``resume`` asks no reviewer again, whatever
the sandbox it resumes in; a review beside an evaluation lost in flight (none stored)
is started again beside the evaluation.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from revtree.sandboxes.base import Contained, Sandbox

Key = tuple[int, int]  # (node, attempt)
BESIDE = "reviewer beside"  # the ``by`` of a rejection given beside an evaluation


def rejection(review: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stored review as the graph state holds verdicts: its rejection, else None."""
    if review is None or review.get("accepted"):
        return None
    return {"accepted": False, "reasons": list(review.get("reasons", ()))} | (
        {"by": review["by"]} if "by" in review else {}
    )


def contains(sandbox: Sandbox) -> bool:
    """Whether ``sandbox`` contains what a candidate does (a plugin says so itself)."""
    return isinstance(sandbox, Contained) and bool(sandbox.contained)


class Beside:
    """The model reviews running beside evaluations, by (node, attempt)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.lock = threading.Lock()
        self.running: dict[Key, Future[dict[str, Any] | None]] = {}

    def start(self, key: Key, review: Callable[[], dict[str, Any] | None]) -> bool:
        """Start ``review`` in a thread of its own, if reviews run beside evaluations:
        it gives its rejection as the graph state holds verdicts, or None."""
        if not self.enabled:
            return False
        future: Future[dict[str, Any] | None] = Future()

        def work() -> None:
            try:
                future.set_result(review())
            except BaseException as e:  # re-raised in the step that waits for it
                future.set_exception(e)

        with self.lock:
            self.running[key] = future
        threading.Thread(target=work, name=f"review-{key[0]}", daemon=True).start()
        return True

    @contextlib.contextmanager
    def dropped_on_error(self, key: Key) -> Iterator[None]:
        """Forget the review of ``key`` where its evaluation raises: no step will wait
        for it (the thread ends with its model call)."""
        try:
            yield
        except BaseException:
            with self.lock:
                self.running.pop(key, None)
            raise

    def started(self, key: Key) -> bool:
        with self.lock:
            return key in self.running

    def verdict(self, key: Key) -> dict[str, Any] | None:
        """The rejection the review started for ``key`` gave, as the graph state holds
        verdicts (None: accepted); the review's exception, raised."""
        with self.lock:
            future = self.running.pop(key)
        return future.result()
