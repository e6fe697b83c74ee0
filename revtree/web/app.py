"""The dashboard's Starlette app: the routes of docs/dashboard.md over one Store.

GET routes answer JSON built by :class:`~revtree.web.views.Views`; the stream is SSE
(:mod:`revtree.web.stream`); POST routes are actions (:mod:`revtree.web.actions`),
each needing the ``X-Revtree-Token`` header, and all refused on a read-only
dashboard. Files come only from the packaged ``static`` folder."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from revtree.errors import RevtreeError
from revtree.memory import Store
from revtree.memory.home import revtree_home
from revtree.web.actions import Actions, node_arg
from revtree.web.stream import MAX_SEQ, SEQ, event_json, log_events, start_seq
from revtree.web.views import NotFound, Views, hidden_password

STATIC = Path(__file__).resolve().parent / "static"
EVERY = {  # on every answer, static files included
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the page's URL carries the token
    "X-Frame-Options": "DENY",
}
HEADERS = {"Cache-Control": "no-store"}  # JSON and the page
LOOPBACK = ["127.0.0.1", "localhost", "[::1]", "::1"]
MAX_BODY = 64 * 1024  # an action's JSON body: a few fields
MAX_COMPARE = 20  # runs of one /api/compare
ID = re.compile(r"[0-9]{1,18}")  # a node id of a URL (int() takes other digits too)


class SecurityHeaders:
    """ASGI middleware: the ``EVERY`` headers on every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for k, v in EVERY.items():
                    headers.setdefault(k, v)
            await send(message)

        await self.app(scope, receive, send_with)


Handler = Callable[[Request], Awaitable[Response]]


async def capped_body(request: Request) -> bytes | None:
    """The request's body, or None once it is over ``MAX_BODY`` (read no further: a
    declared length over it is refused before a byte is read)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=HEADERS)


def create_app(
    store_url: str | None = None,
    read_only: bool = False,
    token: str | None = None,
    home: Path | None = None,
    poll: float = 0.2,
    hosts: list[str] | None = None,
) -> Starlette:
    """The dashboard over the store at ``store_url`` (default: $REVTREE_DB or the home's
    SQLite). Actions need ``token`` (none: every action is refused) and run ``revtree``
    with the same database and ``home`` (default $REVTREE_HOME). ``hosts``: the names
    a request's Host header may give (default: this machine's loopback names, which
    keeps a web page that re-points its own name at 127.0.0.1 from reading the API)."""
    store = Store(store_url)
    views = Views(store, home)
    actions = Actions(store.url, home or revtree_home())

    def json_route(fn: Callable[..., Any]) -> Handler:
        async def handler(request: Request) -> Response:
            try:
                data = await run_in_threadpool(fn, request)
            except NotFound as e:
                return error(404, str(e))
            except RevtreeError as e:
                return error(400, str(e))
            return JSONResponse(data, headers=HEADERS)

        return handler

    def action(fn: Callable[[str, dict[str, Any]], dict[str, Any]]) -> Handler:
        async def handler(request: Request) -> Response:
            if read_only:
                return error(403, "read-only dashboard")
            given = request.headers.get("x-revtree-token", "")
            if not token or not secrets.compare_digest(given.encode(), token.encode()):
                return error(403, "missing or wrong X-Revtree-Token header")
            body: Any = {}
            raw = await capped_body(request)
            if raw is None:
                return error(413, f"the body is over {MAX_BODY // 1024} KiB")
            if raw:
                try:
                    body = json.loads(raw)
                except ValueError:
                    return error(400, "the body must be JSON")
            if not isinstance(body, dict):
                return error(400, "the body must be a JSON object")
            try:
                run = await run_in_threadpool(views.run, request.path_params["run"])
                if "node" in body:  # a valid id of a node of the run (404 otherwise)
                    await run_in_threadpool(views.node_of, run, node_arg(body))
                done = await run_in_threadpool(fn, run.id, body)
            except NotFound as e:
                return error(404, str(e))
            except RevtreeError as e:
                return error(400, str(e))
            return JSONResponse({"ok": True, **done}, headers=HEADERS)

        return handler

    def node_id(request: Request) -> int:
        raw = request.path_params["node"]
        if not ID.fullmatch(raw):  # ASCII digits that fit the database's integers
            raise NotFound(f"no node {raw!r}: a node id is a number")
        return int(raw)

    def events(request: Request) -> dict[str, Any]:
        run = views.run(request.path_params["run"])
        q = request.query_params
        try:
            after, limit = int(q.get("after", "0")), int(q.get("limit", "1000"))
        except ValueError:
            raise RevtreeError("after and limit must be integers") from None
        after = max(0, min(after, MAX_SEQ))  # a larger one: after every event
        evs = store.events_since(run.id, after, max(1, min(limit, 5000)))
        return {"events": [event_json(e) for e in evs]}

    async def stream(request: Request) -> Response:
        try:
            run = await run_in_threadpool(views.run, request.path_params["run"])
        except NotFound as e:
            return error(404, str(e))
        gen = log_events(request, store, run.id, start_seq(request), poll)
        return EventSourceResponse(gen, ping=10, headers={"Cache-Control": "no-store"})

    def nodes(request: Request) -> dict[str, Any]:
        raw = request.query_params.get("since")
        if raw is None:
            return views.nodes(request.path_params["run"])
        if not SEQ.fullmatch(raw.strip()):
            raise RevtreeError("since must be an event seq (an integer)")
        since = max(0, min(int(raw), MAX_SEQ))
        return views.nodes(request.path_params["run"], since)

    def compare(request: Request) -> dict[str, Any]:
        ids = [i for i in request.query_params.get("runs", "").split(",") if i.strip()]
        if len(ids) > MAX_COMPARE:  # each run is a summary to build: bound one request's work
            raise RevtreeError(f"at most {MAX_COMPARE} runs can be compared at once")
        return views.compare([i.strip() for i in ids])

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=HEADERS)

    async def favicon(request: Request) -> Response:  # browsers ask for it unprompted
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")

    async def api_missing(request: Request) -> Response:
        return error(404, f"no such route: {request.method} {request.url.path}")

    run_ = "/api/runs/{run}"
    routes = [
        Route("/", index),
        Route("/favicon.ico", favicon),
        Route(
            "/api/info",
            json_route(
                lambda r: {
                    "version": version("revtree"),
                    "read_only": read_only,
                    "db": hidden_password(store.url),
                }
            ),
        ),
        Route("/api/runs", json_route(lambda r: views.runs())),
        Route("/api/compare", json_route(compare)),
        Route(run_, json_route(lambda r: views.run_detail(r.path_params["run"]))),
        Route(run_ + "/nodes", json_route(nodes)),
        Route(
            run_ + "/nodes/{node}",
            json_route(
                lambda r: views.node(
                    r.path_params["run"], node_id(r), r.query_params.get("against", "parent")
                )
            ),
        ),
        Route(run_ + "/events", json_route(events)),
        Route(run_ + "/stream", stream),
        Route(run_ + "/islands", json_route(lambda r: views.islands(r.path_params["run"]))),
        Route(run_ + "/stop", action(lambda run, body: actions.stop(run)), methods=["POST"]),
        Route(run_ + "/resume", action(lambda run, body: actions.resume(run)), methods=["POST"]),
        Route(run_ + "/fork", action(actions.fork), methods=["POST"]),
        Route(run_ + "/retry", action(actions.retry), methods=["POST"]),
        Route(run_ + "/approve", action(actions.approve), methods=["POST"]),
        Route(run_ + "/reject", action(actions.reject), methods=["POST"]),
        Route("/api/{rest:path}", api_missing, methods=["GET", "POST"]),
        Mount("/static", StaticFiles(directory=STATIC, check_dir=False), name="static"),
        Mount("/", StaticFiles(directory=STATIC, check_dir=False), name="files"),
    ]

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return error(exc.status_code, exc.detail)

    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error},
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(TrustedHostMiddleware, allowed_hosts=hosts or LOOPBACK),
        ],
    )
    app.state.store = store
    return app
