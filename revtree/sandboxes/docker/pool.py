"""A sandbox's background work: the warm pool (boxes created and started ahead of use,
refilled after each execution) and the remover thread (a used box is removed after its
result is returned, so results never wait for removal). Both wait for a quiet moment,
:class:`Phases`, rather than slow the next launch."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

from revtree.errors import SandboxError
from revtree.sandboxes.base import Limits
from revtree.sandboxes.docker.containers import Box, Containers, limits_key
from revtree.sandboxes.docker.engine import WARM


class WarmPool:
    """Up to ``size`` boxes made by ``containers`` for ``limits`` (none when ``size`` is
    0), and the remover of used boxes; :meth:`close` removes what is left."""

    def __init__(self, containers: Containers, size: int, limits: Limits) -> None:
        self.containers, self.size, self.limits = containers, size, limits
        self.phases = Phases()
        self._closed = threading.Event()
        self._warm: queue.Queue[Box] = queue.Queue()
        self._filler: threading.Thread | None = None
        self._want_warm = threading.Event()
        self._refilling = threading.Event()  # the filler is making a box (not waiting)
        self._trash: queue.Queue[Box | None] = queue.Queue()
        self._remover = threading.Thread(target=self._remove_loop, daemon=True, name="remover")
        self._remover.start()
        self.key = limits_key(limits)
        if size:
            self._filler = threading.Thread(target=self._fill, daemon=True, name="warm-pool")
            self._filler.start()
            self._want_warm.set()

    def take(self, limits: Limits, patience: float = 5.0) -> Box | None:
        """A pooled box for ``limits``, or None. The pool is refilled after the
        execution (see ``execute``), so that container start-ups do not compete with
        the command for the CPU. Should it run dry while the filler is making a box,
        that box is awaited (up to ``patience`` seconds) rather than a second one made
        beside it: under load two start-ups at once take longer than one."""
        if self._filler is None:
            return None
        try:
            box = self._warm.get_nowait()
        except queue.Empty:
            self._want_warm.set()
            if not self._refilling.is_set() or limits_key(limits) != self.key:
                return None
            try:
                box = self._warm.get(timeout=patience)
            except queue.Empty:
                return None
        if box.key != limits_key(limits):
            self._trash.put(box)
            return None
        return box

    def remove_later(self, box: Box) -> None:
        """Hand a used box to the remover thread."""
        self._trash.put(box)

    def refill(self) -> None:
        """Wake the filler to top the pool up, if there is a pool."""
        self._want_warm.set()

    def drain(self) -> None:
        """Wait until every container and volume handed to the remover is removed."""
        self._trash.join()

    def close(self) -> None:
        """Stop filling the pool; remove its boxes (side by side) and wait for every
        removal in flight."""
        self._closed.set()
        self.phases.stop()  # background work waits for no execution any more
        self._want_warm.set()
        if self._filler is not None:
            self._filler.join(timeout=30)
        removals = []
        while True:
            try:
                box = self._warm.get_nowait()
            except queue.Empty:
                break
            removals.append(
                threading.Thread(target=self.containers.remove, args=(box,), daemon=True)
            )
            removals[-1].start()
        self._trash.put(None)
        self._remover.join()
        for thread in removals:
            thread.join()

    def pooled(self) -> set[str]:
        """Ids of the warm pool's containers and names of their volumes (none has run
        any command), for tests that look for leftovers."""
        with self._warm.mutex:
            return {x for box in self._warm.queue for x in (box.cid, box.volume)}

    def ready(self, timeout: float = 30.0) -> bool:
        """Wait until the warm pool is full (for benchmarks and tests); True at once
        when there is no pool."""
        if self._filler is None:
            return True
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self._warm.qsize() >= self.size:
                return True
            time.sleep(0.02)
        return False

    def _remove_loop(self) -> None:
        while (box := self._trash.get()) is not None:
            try:
                if not self._closed.is_set():
                    self.phases.wait_quiet()
                self.containers.remove(box)
            finally:
                self._trash.task_done()
        self._trash.task_done()

    def _fill(self) -> None:
        limits = self.limits
        while not self._closed.is_set():
            self._want_warm.wait()
            self._want_warm.clear()
            while not self._closed.is_set() and self._warm.qsize() < self.size:
                self.phases.wait_quiet()
                if self._closed.is_set():
                    return
                self._refilling.set()
                try:
                    box = self.containers.new_box(limits, {WARM: "1"}, ())
                    (self._trash if self._closed.is_set() else self._warm).put(box)
                except SandboxError:
                    time.sleep(1.0)
                    break
                finally:
                    self._refilling.clear()


class Phases:
    """Counts executions launching (up to their command's start) and running, so that
    background work (removals, pool refills: container start-ups and kills that load
    the engine and the CPU) waits for none launching, and for one running or an idle
    spell, rather than slowing the next launch. Never more than ``at_most`` seconds."""

    def __init__(self, idle: float = 0.3, at_most: float = 1.0) -> None:
        self.cond = threading.Condition()
        self.starting = self.running = 0
        self.stopped = False
        self.idle_since, self.idle, self.at_most = time.monotonic(), idle, at_most

    def launching(self) -> Phase:
        with self.cond:
            self.starting += 1
        return Phase(self)

    def move(self, starting: int, running: int) -> None:
        with self.cond:
            self.starting += starting
            self.running += running
            if self.starting == self.running == 0:
                self.idle_since = time.monotonic()
            self.cond.notify_all()

    def stop(self) -> None:
        """From now on :meth:`wait_quiet` returns at once (the sandbox is closing)."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def wait_quiet(self) -> None:
        end = time.monotonic() + self.at_most
        with self.cond:
            while not self.stopped and (now := time.monotonic()) < end:
                idle = self.running == 0 and now - self.idle_since >= self.idle
                if self.starting == 0 and (self.running > 0 or idle):
                    return
                self.cond.wait(min(0.05, end - now))


@dataclass
class Phase:
    """One execution's place in :class:`Phases`: launching, then running, then ended."""

    phases: Phases
    state: str = "starting"

    def launched(self) -> None:
        if self.state == "starting":
            self.state = "running"
            self.phases.move(-1, +1)

    def end(self) -> None:
        if self.state != "ended":
            starting, running = (-1, 0) if self.state == "starting" else (0, -1)
            self.state = "ended"
            self.phases.move(starting, running)
