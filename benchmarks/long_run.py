"""A long run: does each candidate cost more as the run grows? revtree against
OpenEvolve 0.4.0 on ``peer.py``'s folder and fake model, S = 0, K = 1.

    python benchmarks/long_run.py [--n 3000] [--window 500] [--baseline REV]
                                  [--no-openevolve] [--cache ~/.cache/revtree-bench]

For revtree (this tree, and with ``--baseline`` that revision too, checked out in a git
worktree that is removed after: ``worktree.py``; the run says which package it imported,
checked): the mean time per candidate in each window of ``--window`` candidates, in the
order they finished (from a window's first ``finished_at`` to the next window's first;
the baseline left out), the run's wall over N (the baseline's evaluation and the
verifications in it) and its disk per candidate (``peer.disk``: the SQLite file with its
WAL and the runs' git repository). For OpenEvolve: its wall over N, per candidate (its
loop reports no time per iteration; its first run installs it under ``--cache``). A
prompt that read every node, or a check over every evaluated node, shows here as
windows that grow; ``peer.py``'s 48 candidates do not show it. Measured here, never
asserted in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))

import peer
from worktree import worktree

console = Console(width=160)


@contextlib.contextmanager
def checkout(rev: str | None) -> Iterator[Path | None]:
    """A worktree of ``rev`` (``worktree.py``), removed after; None: this tree."""
    if rev is None:
        yield None
        return
    with worktree(rev) as tree:
        yield tree


def windows(db: Path, size: int) -> list[float]:
    """Milliseconds per candidate in each window of ``size`` candidates (the baseline
    left out), from one window's first finish to the next window's first (the last:
    to its own last finish)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT finished_at FROM nodes WHERE finished_at IS NOT NULL AND id > 0"
            " ORDER BY finished_at"
        )
        t = [r[0] for r in rows]
    out = []
    for i in range(0, len(t) - 1, size):
        j = min(i + size, len(t) - 1)
        out.append((t[j] - t[i]) / (j - i) * 1000)
    return out


def revtree_run(
    tmp: Path, n: int, size: int, tree: Path | None
) -> tuple[dict[str, Any], list[float]]:
    """One run of ``tree`` (None: this one; ``peer.run_revtree`` checks what it ran)."""
    with peer.served(peer.Model(seed=0)) as (url, count):
        folder = peer.make_folder(tmp / "task", 0.0, n, 1, url)
        r = peer.run_revtree(tmp, folder, n, 1, 0.0, url, count, None, tree)
    return r, windows(tmp / "home" / "revtree.db", size)


def openevolve_run(tmp: Path, n: int, py: Path) -> dict[str, float]:
    with peer.served(peer.Model(seed=0)) as (url, count):
        folder = peer.make_folder(tmp / "task", 0.0, n, 1, url)
        return peer.run_openevolve(tmp, folder, n, 0.0, py, count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="candidates per run")
    parser.add_argument("--window", type=int, default=500, help="candidates per window")
    parser.add_argument("--baseline", help="a revision of revtree to run first, for a ratio")
    parser.add_argument("--no-openevolve", action="store_true")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "revtree-bench")
    args = parser.parse_args()
    table = Table(
        "system",
        "wall (s)",
        "ms/cand",
        f"ms/cand by window of {args.window} (first ... last)",
        "disk/cand (KB)",
        title=f"a run of {args.n} candidates, S = 0, K = 1",
    )
    with tempfile.TemporaryDirectory(prefix="revtree-long-") as d:
        tmp = Path(d)
        trees = ([(f"revtree {args.baseline}", args.baseline)] if args.baseline else []) + [
            ("revtree (this tree)", None)
        ]
        for name, rev in trees:
            with checkout(rev) as path:
                r, wins = revtree_run(tmp / name.replace(" ", "-"), args.n, args.window, path)
            table.add_row(
                name,
                f"{r['wall']:.1f}",
                f"{r['wall'] / args.n * 1000:.1f}",
                " ".join(f"{w:.1f}" for w in wins),
                f"{r['disk'] / args.n / 1024:.2f}",
            )
        if not args.no_openevolve:
            r = openevolve_run(tmp / "openevolve", args.n, peer.oe_python(args.cache))
            table.add_row(
                f"OpenEvolve {peer.OE_VERSION}",
                f"{r['wall']:.1f}",
                f"{r['wall'] / args.n * 1000:.1f}",
                "(no time per iteration)",
                f"{r['disk'] / args.n / 1024:.2f}",
            )
    console.print(table)


if __name__ == "__main__":
    main()
