"""How long the ``revtree`` command takes to start, and how much it loads to do so.

    python benchmarks/cli_start.py [--n 5]

Records one tiny real run (two candidates of a knob task, local sandbox, SQLite in a
temporary home), then runs each command ``--n`` times as ``python -m revtree ...`` in a
fresh interpreter and prints, per command, the median wall time, the modules it had
loaded when it ended, and its import time (the top-level entries of ``-X importtime``,
summed, one run). The commands are interleaved round by round, so that a change of the
machine's load hits all alike; the 1-minute load average is in the title.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runnable as a plain script
from tests.orchestrator.conftest import cli_env, loaded_modules, make_task, revtree

COMMANDS = (
    ("--version",),
    ("--help",),
    ("show", "--help"),
    ("ls",),
    ("show", "last"),
    ("watch", "last"),
)
TOP_LEVEL = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \| \S")


def wall_s(home: Path, args: tuple[str, ...]) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "revtree", *args],
        capture_output=True,
        env=cli_env(home, REVTREE_SANDBOX="local"),
        check=True,
    )
    return time.perf_counter() - t0


def import_ms(home: Path, args: tuple[str, ...]) -> float:
    """The cumulative microseconds of ``-X importtime``'s top-level imports, in ms."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "revtree", *args],
        capture_output=True,
        text=True,
        env=cli_env(home, REVTREE_SANDBOX="local"),
    )
    return sum(int(m[1]) for m in map(TOP_LEVEL.match, proc.stderr.splitlines()) if m) / 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        task = make_task(Path(tmp) / "task", budget=2)
        revtree(home, "run", str(task), "--quiet", REVTREE_SANDBOX="local")
        load0 = os.getloadavg()[0]
        times: dict[tuple[str, ...], list[float]] = {c: [] for c in COMMANDS}
        for _ in range(args.n):
            for command in COMMANDS:
                times[command].append(wall_s(home, command))
        load1 = os.getloadavg()[0]
        table = Table(title=f"revtree start, n={args.n}, load {load0:.1f} → {load1:.1f}")
        for col in ("command", "median wall ms", "modules", "import ms"):
            table.add_column(col, justify="left" if col == "command" else "right")
        for command in COMMANDS:
            _, names = loaded_modules(home, *command, REVTREE_SANDBOX="local")
            table.add_row(
                "revtree " + " ".join(command),
                f"{statistics.median(times[command]) * 1000:.0f}",
                str(len(names)),
                f"{import_ms(home, command):.0f}",
            )
    Console().print(table)


if __name__ == "__main__":
    main()
