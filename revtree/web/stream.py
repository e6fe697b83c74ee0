"""The live log as Server-Sent Events, read from the events table (the live log of
every run, see ``memory.store``): a bounded loop of ``Store.events_since`` that sends
each event as ``event: log`` with ``id: SEQ``, in batches, and ``event: end`` once the
run is finished and every event is sent. A client that reconnects with
``Last-Event-ID`` goes on after it."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from revtree.errors import RevtreeError
from revtree.memory import Event, Store

POLL = 0.2  # seconds between reads once caught up
BATCH = 500  # events per read (a backlog is drained without sleeping)
SEQ = re.compile(r"-?[0-9]{1,40}")  # ASCII digits only: int() takes others too
MAX_SEQ = 2**62  # SQLite's integers are 64-bit


def event_json(ev: Event) -> dict[str, Any]:
    return {
        "seq": ev.seq,
        "ts": ev.ts,
        "kind": ev.kind,
        "message": ev.message,
        "node_id": ev.node_id,
        "data": ev.data,
    }


def start_seq(request: Request) -> int:
    """Where a stream starts: after ``?after=SEQ`` or the ``Last-Event-ID`` header
    (anything else is 0; a number beyond the database's integers is ``MAX_SEQ``)."""
    after = 0
    for raw in (request.query_params.get("after"), request.headers.get("last-event-id")):
        if raw is not None and SEQ.fullmatch(raw.strip()):
            after = max(after, min(int(raw), MAX_SEQ))
    return after


async def log_events(
    request: Request, store: Store, run_id: str, after: int, poll: float = POLL
) -> AsyncIterator[dict[str, Any]]:
    """The SSE messages of run ``run_id`` after ``after``; stops when the client goes."""
    seq = after
    while not await request.is_disconnected():
        try:
            run = await run_in_threadpool(store.get_run, run_id)
        except RevtreeError:  # deleted while streamed: the end, not a broken stream
            yield {"event": "end", "id": str(seq), "data": json.dumps({"status": "deleted"})}
            return
        batch = await run_in_threadpool(store.events_since, run_id, seq, BATCH)
        for ev in batch:
            yield {"event": "log", "id": str(ev.seq), "data": json.dumps(event_json(ev))}
        if batch:
            seq = batch[-1].seq
        if len(batch) == BATCH:
            continue  # a backlog: read on at once
        if run.status.is_finished():  # read before the events: every event of it is sent
            yield {"event": "end", "id": str(seq), "data": json.dumps({"status": run.status})}
            return
        await asyncio.sleep(poll)
