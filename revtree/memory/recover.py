"""What survives a lost or damaged database, read back for ``revtree doctor --repair``.

- A run's nodes live on in its git store: one commit and one ref
  (``refs/revtree/nodes/<id>``) per node, whose message names the node, its operator,
  its parent and the hypothesis (``node 4: mutate from node 2`` + the hypothesis; node 0:
  ``<task>: baseline (untouched source)``). :func:`lost_nodes` reads back every node
  whose row is missing, once its commit vouches for it (the message names that node, and
  the commit's git parent is its parent node's commit).
- A run's row: the run folder keeps ``run.json`` (the run id, the database it was
  recorded in and its TaskSpec), written when the run is created (:func:`write_run_file`).
- A damaged SQLite file: :func:`salvage_sqlite` copies every row SQLite can still read
  into a fresh database of the same schema.

Scores, evaluations, model calls and the live log are not in git: they are lost with the
rows that held them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from revtree.memory.db import display_url
from revtree.memory.gitstore import GitStore

RUN_FILE = "run.json"
BASELINE = ": baseline (untouched source)"
NODE_LINE = re.compile(r"node (\d+): (\S+) from node (\d+)\s*$")
ATTEMPT_LINE = re.compile(r"^\(attempt (\d+), by `revtree retry`\)$", re.M)
TABLES = ("runs", "nodes", "evaluations", "llm_calls", "events")


@dataclasses.dataclass(frozen=True)
class Recovered:
    """A node read back from its commit."""

    id: int
    parent_id: int | None
    operator: str
    hypothesis: str
    commit: str
    created_at: float
    attempt: int = 1


def lost_nodes(git: GitStore, known: dict[int, str | None]) -> tuple[list[Recovered], list[str]]:
    """The nodes whose ref is in ``git`` but that ``known`` (node id -> commit of the
    rows that survive) lacks, parents first; and why each ref that does not vouch for a
    node was left out (its commit names another node, or its parent is unknown)."""
    refs = git.node_refs()
    commits = dict(known)
    found: list[Recovered] = []
    refused: list[str] = []
    for node_id in sorted(refs.keys() - known.keys()):
        sha = refs[node_id]
        try:
            parents, message, when = commit_info(git, sha)
        except Exception as e:  # a ref to a missing or unreadable object
            refused.append(f"ref of node {node_id}: commit {sha[:10]} unreadable ({e})")
            continue
        head, _, body = message.partition("\n")
        attempt = ATTEMPT_LINE.search(body)
        hypothesis = ATTEMPT_LINE.sub("", body).strip()
        if node_id == 0 and head.endswith(BASELINE) and not parents:
            node = Recovered(0, None, "baseline", "baseline: the untouched source", sha, when)
        elif (m := NODE_LINE.match(head)) and int(m[1]) == node_id:
            parent = int(m[3])
            if commits.get(parent) is None or parents[:1] != [commits[parent]]:
                refused.append(f"node {node_id}: its parent node {parent} is not known")
                continue
            node = Recovered(
                node_id,
                parent,
                m[2],
                hypothesis,
                sha,
                when,
                int(attempt[1]) if attempt else 1,
            )
        else:
            refused.append(f"ref of node {node_id}: its commit {sha[:10]} names no such node")
            continue
        commits[node_id] = sha
        found.append(node)
    return found, refused


def commit_info(git: GitStore, sha: str) -> tuple[list[str], str, float]:
    """A commit's parents, message and time."""
    c = git.repo.commit(sha)
    message = c.message if isinstance(c.message, str) else c.message.decode()
    return [p.hexsha for p in c.parents], message, float(c.committed_date)


def database_id(url: str) -> str:
    """The database a URL names, comparable across spellings (a SQLite file's resolved
    path; else the URL without its password)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        return "sqlite:///" + str(Path(str(parsed.database)).expanduser().resolve())
    return display_url(url)  # a password in the URL or its query string never written


def write_run_file(folder: Path, run_id: str, url: str, spec: dict[str, Any]) -> None:
    """Keep what rebuilds the run's row next to its git store (written once, at create)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = {"id": run_id, "database": database_id(url), "spec": spec}
    tmp = folder / f".{RUN_FILE}.tmp"
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(folder / RUN_FILE)


def read_run_file(folder: Path) -> dict[str, Any] | None:
    """``run.json`` of a run folder, or None where there is none (or it is unreadable)."""
    try:
        data = json.loads((folder / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("spec"), dict) else None


def salvage_sqlite(damaged: Path, fresh: Path) -> dict[str, int]:
    """Copy every row of revtree's tables that SQLite can still read from ``damaged``
    into ``fresh`` (a database already made with the current schema): table by table,
    row by row, a table stopping at its first unreadable page. Rows per table copied."""
    counts: dict[str, int] = {}
    src = sqlite3.connect(f"file:{damaged}?mode=ro", uri=True)
    dst = sqlite3.connect(fresh)
    try:
        for table in TABLES:
            counts[table] = 0
            try:
                want = [r[1] for r in dst.execute(f"PRAGMA table_info({table})")]
                have = {r[1] for r in src.execute(f"PRAGMA table_info({table})")}
                cols = [c for c in want if c in have]
                if not cols:
                    continue
                names = ", ".join(f'"{c}"' for c in cols)
                marks = ", ".join("?" for _ in cols)
                cursor = src.execute(f"SELECT {names} FROM {table}")
                while True:
                    row = cursor.fetchone()
                    if row is None:
                        break
                    with contextlib.suppress(sqlite3.DatabaseError):
                        dst.execute(
                            f"INSERT OR IGNORE INTO {table} ({names}) VALUES ({marks})", row
                        )
                        counts[table] += 1
            except sqlite3.DatabaseError:
                pass  # what was read so far is kept
        dst.execute(  # the live log goes on after the last event that survived
            "UPDATE runs SET last_event = max(last_event, "
            "(SELECT coalesce(max(seq), 0) FROM events WHERE events.run_id = runs.id))"
        )
        dst.commit()
    finally:
        src.close()
        dst.close()
    return counts
