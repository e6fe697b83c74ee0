"""Serving the dashboard: bind the socket first (so ``--port 0`` knows its port and a
busy port is one clear error), then run uvicorn on it, in this thread (``revtree
dashboard``) or a background one (``revtree run --dashboard``)."""

from __future__ import annotations

import errno
import ipaddress
import os
import secrets
import socket
import threading
from pathlib import Path

import uvicorn

from revtree.errors import RevtreeError
from revtree.web.app import create_app

DEFAULT_PORT = 8765


class PortBusy(RevtreeError):
    """The dashboard's port is taken (or cannot be bound)."""


def dashboard_token() -> str:
    """``$REVTREE_DASHBOARD_TOKEN``, else a fresh random token."""
    return os.environ.get("REVTREE_DASHBOARD_TOKEN") or secrets.token_urlsafe(16)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: any free port)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise PortBusy(f"cannot bind the dashboard to {host}:{port}: {e}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        sock.close()
        why = "is already in use" if e.errno == errno.EADDRINUSE else f"cannot be bound: {e}"
        raise PortBusy(f"port {port} on {host} {why}; pick another with --port") from None
    sock.set_inheritable(False)
    return sock


def allowed_hosts(host: str, extra: list[str] | None = None) -> list[str]:
    """The names a request's Host header may give, whatever the bind address: the address
    itself, this machine's loopback names where it is a loopback address (all of 127/8 is,
    on Linux), and the ``--allow-host`` names. Never any name: a web page that re-points
    its own name at the address would read the API (DNS rebinding)."""
    name = host.strip("[]")
    names = [name, f"[{name}]"] if ":" in name else [name]
    if is_loopback(name):
        names += ["127.0.0.1", "localhost", "[::1]", "::1"]
    return list(dict.fromkeys(names + [h.strip() for h in extra or [] if h.strip()]))


def is_loopback(name: str) -> bool:
    try:
        return name == "localhost" or ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


class Dashboard:
    """A bound dashboard: ``url`` (with the token unless read-only), ``serve()``."""

    def __init__(
        self,
        db: str | None,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        read_only: bool = False,
        token: str | None = None,
        home: Path | None = None,
        allow_hosts: list[str] | None = None,
    ) -> None:
        self.token = None if read_only else (token or dashboard_token())
        self.sock = bind(host, port)
        real = self.sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        self.base = f"http://{shown}:{real}"
        self.url = self.base + "/" + ("" if self.token is None else f"?token={self.token}")
        self.hosts = allowed_hosts(host, allow_hosts)
        app = create_app(db, read_only=read_only, token=self.token, home=home, hosts=self.hosts)
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        self.thread: threading.Thread | None = None

    def serve(self) -> None:
        """Serve until SIGINT or SIGTERM (in the main thread) or :meth:`stop`."""
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.sock.close()

    def start(self) -> None:
        """Serve in a daemon thread."""
        self.thread = threading.Thread(target=self.serve, name="dashboard", daemon=True)
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout)
