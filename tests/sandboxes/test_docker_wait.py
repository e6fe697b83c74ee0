"""A slow engine ``wait`` is asked again, never recorded as the candidate's crash
(issue 23, item 9): after a 100,000-file output, the engine's ``wait`` on a resident
box timed out after 30 s and the next honest evaluation was recorded as a crash with
exit code -1.

At the Docker SDK's edge: the real ``docker.APIClient`` talks HTTP to an engine stand-in
on 127.0.0.1 whose ``/containers/ID/wait`` answers after a delay longer than the
configured wait timeout (a real container slow to report its exit is not cheap to make
on a machine with no images). What is under test, ``Containers.exit_code`` and its
retry, is the real code."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import docker
import pytest

from revtree.errors import SandboxError
from revtree.sandboxes.docker.containers import Box, Containers
from revtree.tasks.sandbox import DockerConfig


class Engine(ThreadingHTTPServer):
    slow_waits = 0  # how many waits answer late
    delay = 1.0
    waits = 0


class Handler(BaseHTTPRequestHandler):
    server: Engine

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        if "/wait" not in self.path:
            self.send_error(404)
            return
        self.server.waits += 1
        if self.server.waits <= self.server.slow_waits:
            time.sleep(self.server.delay)  # longer than the client's wait timeout
        body = json.dumps({"StatusCode": 3, "Error": None}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up on this one
            pass


@pytest.fixture
def engine() -> Iterator[Engine]:
    server = Engine(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def containers(engine: Engine) -> Containers:
    api = docker.APIClient(base_url=f"tcp://127.0.0.1:{engine.server_port}", version="1.41")
    c = Containers(api, "img", DockerConfig(), {}, [], 64, False)
    c.wait_timeout = 0.3
    return c


def test_a_wait_that_times_out_is_asked_again(engine: Engine) -> None:
    engine.slow_waits = 2
    code = containers(engine).exit_code(Box("c0ffee", "vol", (), resident=True), "")
    assert code == 3  # the command's own exit code, not -1
    assert engine.waits == 3


def test_an_engine_that_never_answers_is_a_sandbox_error(engine: Engine) -> None:
    engine.slow_waits = 100
    with pytest.raises(SandboxError, match="waiting for c0ffee"):
        containers(engine).exit_code(Box("c0ffee", "vol", (), resident=True), "")
