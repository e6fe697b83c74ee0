"""Progress of building the base image: debootstrap's stages, then ``docker import``.

``BuildProgress`` is told each line debootstrap prints (``I: Retrieving libc6 ...``) and
each chunk the import streams; it maps them to a phase, a fraction done and an
estimate of the time left. On a terminal it draws a rich progress bar on stderr; piped
(no TTY: ``| head``, a log file) it prints one plain line per phase with the elapsed
time, and a closed stderr never stops the build.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import IO, Any

# Measured (README: Sandboxes): 72 s on a quiet 2-core machine, 3 min 44 s on a busy
# one; debootstrap is about 88% of it, tar | docker import of ~240 MB the rest.
ESTIMATE_S = 150.0
# debootstrap's stages in order: (start of its "I: " line, phase shown, share done at
# its start), the shares from the timings of a measured build.
STAGES = (
    ("Retrieving InRelease", "reading the mirror's package lists", 0.0),
    ("Resolving dependencies", "resolving packages", 0.002),
    ("Checking component", "downloading packages", 0.005),
    ("Extracting ", "extracting the base system", 0.19),
    ("Installing core packages", "installing core packages", 0.29),
    ("Unpacking required packages", "unpacking required packages", 0.34),
    ("Configuring required packages", "configuring required packages", 0.55),
    ("Unpacking the base system", "unpacking python3, pip, venv", 0.61),
    ("Configuring the base system", "configuring python3, pip, venv", 0.79),
    ("Base system installed", "base system installed", 0.87),
)
IMPORT_SHARE = 0.875  # the rest is tar | docker import


def fmt_seconds(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


class BuildProgress:
    """Shows the build of ``tag``; use as a context manager around it."""

    def __init__(self, tag: str, stream: IO[str] | None = None, estimate: float = ESTIMATE_S):
        self.tag, self.estimate = tag, estimate
        self.stream = stream if stream is not None else sys.stderr
        self.phase, self.share = "starting", 0.0
        self.start = self.since = time.monotonic()
        self.tty = False
        with contextlib.suppress(OSError, ValueError):  # closed: no bar, and no lines
            self.tty = bool(self.stream.isatty())
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> BuildProgress:
        self.start = self.since = time.monotonic()
        self._say(
            f"building {self.tag} from Debian packages (debootstrap, then docker import): "
            f"about {fmt_seconds(self.estimate)}, once; it is cached by its tag"
        )
        if self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            console = Console(file=self.stream, stderr=self.stream is sys.stderr)
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
                TimeElapsedColumn(),
                TextColumn("{task.fields[left]}"),
                console=console,
                transient=False,
            )
            self._task = self._bar.add_task(self.phase, total=1.0, left="")
            self._bar.start()
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        if self._bar is not None:
            with contextlib.suppress(OSError):
                self._bar.stop()
        if kind is None:
            self._say(f"built {self.tag} in {fmt_seconds(self.elapsed())}")

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def line(self, text: str) -> None:
        """A line of debootstrap's output."""
        text = text.strip()
        if not text.startswith("I: "):
            return
        for prefix, phase, share in STAGES:
            if text[3:].startswith(prefix) and share >= self.share:
                if phase != self.phase:
                    self._enter(phase, share)
                break
        self._draw()

    def importing(self, done: int, total: int) -> None:
        """``done`` of about ``total`` bytes of the root file system streamed."""
        if self.phase != "docker import":
            self._enter("docker import", IMPORT_SHARE)
        frac = min(done / total, 1.0) if total > 0 else 0.0
        self.share = IMPORT_SHARE + (1 - IMPORT_SHARE) * frac * 0.99
        self._draw()

    def fraction(self) -> float:
        """The share done: the phase's start, moved on by the time spent in it (against
        the estimate) but never past the next phase's start."""
        following = [s for _, _, s in STAGES if s > self.share] + [IMPORT_SHARE, 1.0]
        cap = min(s for s in following if s > self.share) - 0.005
        by_time = self.share + (time.monotonic() - self.since) / self.estimate
        return max(self.share, min(by_time, cap))

    def left(self) -> float:
        """Seconds left: the estimate less the time spent, until the share done says
        more (a slow machine, mirror or disk)."""
        done, frac = self.elapsed(), self.fraction()
        if frac >= 0.15:
            return max(done / frac - done, 0.0)
        return max(self.estimate - done, 0.0)

    def _enter(self, phase: str, share: float) -> None:
        self.phase, self.share, self.since = phase, share, time.monotonic()
        if self._bar is None:
            self._say(
                f"[{fmt_seconds(self.elapsed()):>9}] {phase} ({self.fraction():.0%}, "
                f"about {fmt_seconds(self.left())} left)"
            )

    def _draw(self) -> None:
        if self._bar is None:
            return
        with contextlib.suppress(OSError):
            self._bar.update(
                self._task,
                completed=self.fraction(),
                description=self.phase,
                left=f"about {fmt_seconds(self.left())} left",
            )

    def _say(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed stderr: build on
            if self._bar is not None:
                self._bar.console.print(text, markup=False, highlight=False)
            else:
                print(text, file=self.stream, flush=True)
