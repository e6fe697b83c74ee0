"""The dashboard's actions: each one is the real ``revtree`` command run in a subprocess
(``python -m revtree ...`` with ``REVTREE_DB=URL``, not ``--db URL``, so that the
database's password is not on a command line that any user's ``ps`` shows; the same
``REVTREE_HOME``), never through a shell, with its inputs checked first. Its own words
come back, the password masked: the trimmed output, or an :class:`ActionError`
carrying them when it exits non-zero."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from revtree.errors import RevtreeError
from revtree.orchestrator.run import RunPaths
from revtree.web.views import hidden_password

SET_ITEM = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*=[^\n\r\x00]*$")
RUN_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$")
FORKED = re.compile(r"^run (\S+) forked from ", re.MULTILINE)
STEPS = ("propose", "code", "evaluate")
MAX_WHY = 4000
MAX_NODE = 2**62  # beyond SQLite's 64-bit integers a lookup fails rather than misses
RETRY_GRACE = 3.0  # seconds a background retry is watched for an early failure


class ActionError(RevtreeError):
    """An action refused, or a command that failed (HTTP 400, with its words)."""


def node_arg(body: dict[str, Any]) -> int:
    node = body.get("node")
    if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node <= MAX_NODE:
        raise ActionError('"node" must be a node id (an integer >= 0)')
    return node


def sets_arg(body: dict[str, Any]) -> list[str]:
    sets = body.get("set", [])
    if sets is None:
        return []
    if not isinstance(sets, list) or not all(isinstance(s, str) for s in sets):
        raise ActionError('"set" must be a list of "key=value" strings')
    bad = [s for s in sets if not SET_ITEM.match(s)]
    if bad:
        raise ActionError(f'"set" items must look like key=value: {bad[0]!r}')
    return sets


def text_arg(body: dict[str, Any], key: str, limit: int = MAX_WHY) -> str:
    value = body.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit or "\x00" in value:
        raise ActionError(f'"{key}" must be a text of at most {limit} characters')
    return value


def _clean(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


class Actions:
    """Runs ``revtree`` commands against one database and home."""

    def __init__(self, db_url: str, home: Path) -> None:
        self.db_url, self.home = db_url, home

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "REVTREE_DASHBOARD_TOKEN"}
        env.update(REVTREE_HOME=str(self.home), COLUMNS="200", PYTHONUNBUFFERED="1")
        env["REVTREE_DB"] = self.db_url
        return env

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "revtree", *args]

    def words(self, text: str) -> str:
        """A command's output as the page may show it: trimmed, the password masked."""
        return _clean(text.replace(self.db_url, hidden_password(self.db_url)))

    def cli(self, *args: str, timeout: float = 120.0) -> str:
        """Run ``revtree ARGS``; its message, or :class:`ActionError` with its words."""
        try:
            proc = subprocess.run(
                self.command(*args),
                capture_output=True,
                text=True,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise ActionError(f"`revtree {args[0]}` did not answer within {timeout:.0f}s") from None
        words = self.words(
            proc.stdout + ("\n" if proc.stdout and proc.stderr else "") + proc.stderr
        )
        if proc.returncode != 0:
            raise ActionError(words or f"`revtree {args[0]}` exited {proc.returncode}")
        return words

    # -- the actions ----------------------------------------------------------------
    def stop(self, run_id: str) -> dict[str, Any]:
        return {"message": self.cli("stop", check_run(run_id))}

    def resume(self, run_id: str) -> dict[str, Any]:
        return {"message": self.cli("resume", check_run(run_id), "--detach")}

    def fork(self, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        args = ["fork", check_run(run_id), "--node", str(node_arg(body))]
        for item in sets_arg(body):
            args += ["--set", item]
        message = self.cli(*args, "--detach")
        found = FORKED.search(message)
        return {"message": message, "run": found.group(1) if found else None}

    def approve(self, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"message": self.cli("approve", check_run(run_id), str(node_arg(body)))}

    def reject(self, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        args = ["reject", check_run(run_id), str(node_arg(body))]
        return {"message": self.cli(*args, "--why", text_arg(body, "why"))}

    def retry(self, run_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """``revtree retry`` in the background, its output in the run's folder; a retry
        that fails within a few seconds (a bad node, a run being driven) answers 400."""
        run_id, node = check_run(run_id), node_arg(body)
        args = ["retry", run_id, str(node), "--quiet"]
        step = body.get("from")
        if step is not None:
            if step not in STEPS:
                raise ActionError(f'"from" must be one of {", ".join(STEPS)}')
            args += ["--from", step]
        for item in sets_arg(body):
            args += ["--set", item]
        log = RunPaths(self.home, run_id).dir / f"retry-{node}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        start = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                self.command(*args),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=self.env(),
            )
        deadline = time.monotonic() + RETRY_GRACE
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        if proc.returncode is None:
            # reaped when it ends, by a thread of its own (not a zombie until the next Popen)
            threading.Thread(target=proc.wait, name=f"retry-{node}", daemon=True).start()
            return {"message": f"retry of node {node} started (pid {proc.pid}), log {log}"}
        with open(log, "rb") as f:
            f.seek(start)
            words = self.words(f.read().decode(errors="replace"))[-4000:]
        if proc.returncode != 0:
            raise ActionError(words or f"`revtree retry` exited {proc.returncode}")
        return {"message": words}


def check_run(run_id: str) -> str:
    """A run id that cannot be read as an option (the app resolved it already)."""
    if not RUN_ID.match(run_id):
        raise ActionError(f"not a run id: {run_id!r}")
    return run_id
