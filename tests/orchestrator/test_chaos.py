"""Chaos: ``kill -9`` a real ``revtree run`` / ``revtree resume`` many times, at seeded
moments, then check that nothing was lost, nothing was done twice, ``revtree doctor``
finds nothing, and the tree equals the one an uninterrupted run grows.

The killed processes are real CLI subprocesses on a real database (SQLite, and
PostgreSQL under the ``postgres`` marker). Each loads a ``sitecustomize`` (from
``PYTHONPATH``) that wraps four product methods without changing what they do: a knob
proposal, a git commit, an evaluation and a SQL write transaction. It writes the phase
the process is in to a file on every transition (so the test knows where each kill
landed), lingers a few milliseconds in the middle of each (so random kills can land
there), and, when told to, sends itself SIGKILL in the middle of the k-th occurrence
of one: after the proposal is made but before it is stored, after a commit's objects
are written but before its ref, after an evaluation ran but before it is recorded,
after a transaction's statements ran but before its commit. Rounds mix three kinds:
killed from outside at a random delay once the session claimed the run, killed by
itself at an aimed moment, and killed inside its first SQL writes (start-up: the
creation of the run, the claim).

Why the comparison uses git *trees*: a commit's sha includes its time, and the root
commit is made when the run is created, so two runs never share shas; equal trees on
equal parents mean the same revisions.
"""

from __future__ import annotations

import collections
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from revtree.memory import NodeStatus, RunStatus, Store
from revtree.orchestrator import Orchestrator, RunPaths, create_run
from revtree.orchestrator.commands.doctor import doctor
from revtree.tasks import load_task

from .conftest import cli_env, make_task

pytestmark = pytest.mark.slow(seconds=30)
KILLS = 14  # rounds 1, 2, 8 and 14 at start-up; 4, 6, 10 and 12 aimed, one at each target
BUDGET = 28
SEED = 20261202
TARGETS = ("propose", "git-commit", "evaluate", "db-write")
# rounds that kill inside the k-th SQL write of the session, before it claimed the run:
# round 1 inside the creation of the run (nothing is stored: round 2 runs it again),
# round 2 inside its second write; later ones inside a resume's first writes
STARTUP = {1: 1, 2: 2, 8: 1, 14: 2}

SITECUSTOMIZE = '''\
"""Chaos instrumentation (test only): record the phase; die in it when told to."""
import os, signal, threading, time

DIR = os.environ.get("REVTREE_CHAOS_DIR")
if DIR:
    from revtree.agents.evaluator import Evaluator
    from revtree.agents.knobs import KnobProposer
    from revtree.memory.gitstore import GitStore
    from revtree.memory.store import Store

    PATH = os.path.join(DIR, f"phase-{os.getpid()}")
    TARGET, _, K = os.environ.get("REVTREE_CHAOS_KILL", "").partition(":")
    DELAY = {"db-write": 0.01, "git-commit": 0.02, "propose": 0.02}
    lock, stacks, seq, left = threading.Lock(), {}, [0], [int(K or 0)]

    def _show():
        tops = sorted({s[-1] for s in stacks.values() if s})
        seq[0] += 1
        with open(PATH + ".tmp", "w") as f:
            f.write(f"{seq[0]} {','.join(tops) or 'between'}")
        os.replace(PATH + ".tmp", PATH)  # atomic: a kill never leaves half a line

    def push(phase):
        with lock:
            stacks.setdefault(threading.get_ident(), []).append(phase)
            _show()

    def pop():
        with lock:
            stacks[threading.get_ident()].pop()
            _show()

    def inside(phase):
        """The middle of a phase: SIGKILL ourselves at the K-th, else linger a moment."""
        with lock:
            left[0] -= phase == TARGET
            if phase == TARGET and left[0] == 0:
                os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(DELAY.get(phase, 0.0))

    def wrap(cls, name, phase):
        orig = getattr(cls, name)

        def wrapper(*args, **kwargs):
            push(phase)
            try:
                out = orig(*args, **kwargs)
                inside(phase)  # done, not yet stored (a commit: its objects, no ref)
                return out
            finally:
                pop()

        setattr(cls, name, wrapper)

    wrap(KnobProposer, "propose", "propose")
    wrap(GitStore, "commit", "git-commit")
    wrap(Evaluator, "run_one", "evaluate")
    orig_write = Store._write

    class _Tx:
        def __init__(self, tx):
            self.tx = tx

        def __enter__(self):
            conn = self.tx.__enter__()
            push("db-write")
            return conn

        def __exit__(self, *exc):
            try:
                if exc[0] is None:
                    inside("db-write")  # statements run, not yet committed
                return self.tx.__exit__(*exc)
            finally:
                pop()

    Store._write = lambda self: _Tx(orig_write(self))
'''


def _tree(store: Store, home: Path, run_id: str) -> list[tuple[Any, ...]]:
    """(id, parent, operator, knobs, git tree, score, status) per node."""
    repo = RunPaths(home, run_id).repo
    out = []
    for n in store.nodes(run_id):
        tree = _git(repo, "rev-parse", f"{n.commit}^{{tree}}") if n.commit else None
        knobs = (n.proposal or {}).get("knobs")
        out.append((n.id, n.parent_id, n.operator, knobs, tree, n.score, n.status.value))
    return out


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


class Chaos:
    """Kills revtree sessions of one run and keeps the books."""

    def __init__(self, home: Path, db_url: str, store: Store, tmp: Path) -> None:
        self.home, self.db, self.store = home, db_url, store
        self.dir = tmp / "chaos"
        self.dir.mkdir()
        (self.dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.rng = random.Random(SEED)
        self.run_id: str | None = None
        self.phases: collections.Counter[str] = collections.Counter()
        self.seen_evals: dict[tuple[int, str, int, int], Any] = {}
        self.seen_nodes: dict[int, tuple[Any, ...]] = {}

    def spawn(self, *args: str, kill: str = "") -> subprocess.Popen[bytes]:
        env = cli_env(
            self.home,
            PYTHONPATH=str(self.dir),
            REVTREE_CHAOS_DIR=str(self.dir),
            REVTREE_CHAOS_KILL=kill,
        )
        return subprocess.Popen(
            [sys.executable, "-m", "revtree", *args, "--db", self.db, "--quiet"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )

    def phase(self, pid: int) -> tuple[int, str]:
        try:
            seq, _, phase = (self.dir / f"phase-{pid}").read_text().partition(" ")
            return int(seq), phase
        except (OSError, ValueError):
            return 0, "startup"

    def claimed(self, proc: subprocess.Popen[bytes]) -> bool:
        """Wait until this session holds the run; False if it ended first."""
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            self.find_run()
            if self.run_id is not None and self.store.get_run(self.run_id).pid == proc.pid:
                return True
            time.sleep(0.02)
        return False

    def find_run(self) -> None:
        if self.run_id is None:
            runs = self.store.list_runs()
            self.run_id = runs[0].id if runs else None

    def strike(self, proc: subprocess.Popen[bytes]) -> str | None:
        """Kill the session at a random delay; the phase it died in, or None if it
        ended on its own first."""
        deadline = time.monotonic() + self.rng.uniform(0.0, 0.8)
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.005)
        if proc.poll() is not None:
            return None
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        return self.phase(proc.pid)[1]

    def died(self, proc: subprocess.Popen[bytes]) -> str | None:
        """Wait for a session told to kill itself; the phase it died in, or None if it
        ended on its own."""
        if proc.wait(timeout=120) != -signal.SIGKILL:
            return None
        return self.phase(proc.pid)[1]

    def book(self) -> None:
        """Remember every stored result: none may change or vanish later."""
        assert self.run_id is not None
        for e in self.store.evaluations(self.run_id):
            self.seen_evals.setdefault((e.node_id, e.stage, e.repeat, e.attempt), e)
        for n in self.store.nodes(self.run_id):
            if n.status.is_finished():
                self.seen_nodes.setdefault(
                    n.id, (n.status, (n.score, n.n_evals), n.commit, n.proposal)
                )

    def lost(self) -> list[str]:
        assert self.run_id is not None
        evals = {
            (e.node_id, e.stage, e.repeat, e.attempt): e
            for e in self.store.evaluations(self.run_id)
        }
        nodes = {n.id: n for n in self.store.nodes(self.run_id)}
        out = [f"evaluation {k}" for k, e in self.seen_evals.items() if evals.get(k) != e]
        for i, (status, (score, n_evals), commit, proposal) in self.seen_nodes.items():
            n = nodes.get(i)
            # a score may change only by verification: the mean over more repeats
            same_score = n is not None and (n.score == score or n.n_evals > n_evals)
            if (
                n is None
                or not same_score
                or (n.status, n.commit, n.proposal)
                != (
                    status,
                    commit,
                    proposal,
                )
            ):
                out.append(f"node {i}")
        return out


def _reference(tmp: Path, home: Path) -> list[tuple[Any, ...]]:
    """The tree of the same task grown without a kill, in its own database."""
    store = Store(f"sqlite:///{tmp / 'reference.db'}")
    try:
        run = create_run(store, load_task(make_task(tmp / "ref-task", budget=BUDGET)), home)
        Orchestrator(store, run.id, home=home).drive()
        return _tree(store, home, run.id)
    finally:
        store.close()


@pytest.mark.timeout(900)  # about 60 s on an idle machine; 300+ under a loaded one
def test_kill_9_at_random_moments_loses_nothing(tmp_path: Path, home: Path, db_url: str) -> None:
    started = time.monotonic()
    expected = _reference(tmp_path, home)
    reference_s = time.monotonic() - started
    store = Store(db_url)
    chaos = Chaos(home, db_url, store, tmp_path)
    task = make_task(tmp_path / "task", budget=BUDGET)
    kills, rounds, aimed = 0, 0, 0
    try:
        while kills < KILLS:
            rounds += 1
            args = ("run", str(task)) if chaos.run_id is None else ("resume", chaos.run_id)
            if rounds in STARTUP:  # inside the session's k-th SQL write, before it claims
                proc = chaos.spawn(*args, kill=f"db-write:{STARTUP[rounds]}")
                phase, where = chaos.died(proc), " at start-up"
            elif rounds % 2:  # from outside, at a random moment of its work
                proc = chaos.spawn(*args)
                assert chaos.claimed(proc), f"round {rounds}: the session ended before claiming"
                phase, where = chaos.strike(proc), ""
            else:  # by itself, inside the k-th occurrence of the aimed-at phase
                target = TARGETS[aimed % len(TARGETS)]
                aimed += 1
                k = chaos.rng.randint(3, 8) if target == "db-write" else chaos.rng.randint(1, 3)
                proc = chaos.spawn(*args, kill=f"{target}:{k}")
                phase, where = chaos.died(proc), " (aimed)"
                assert phase is None or target in phase.split(","), (target, phase)
            assert phase is not None, f"round {rounds}: the run ended after only {kills} kills"
            kills += 1
            chaos.phases[phase + where] += 1
            chaos.find_run()
            if chaos.run_id is not None:
                chaos.book()
        assert chaos.run_id is not None
        killing_s = time.monotonic() - started - reference_s
        final = subprocess.run(
            [sys.executable, "-m", "revtree", "resume", chaos.run_id, "--db", db_url, "--quiet"],
            env=cli_env(home),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert final.returncode == 0, final.stdout + final.stderr
        run = store.get_run(chaos.run_id)
        assert run.status is RunStatus.COMPLETED and run.pid is None
        lost = chaos.lost()
        counts = store.evaluation_counts(run.id)
        duplicated = {k: c for k, c in counts.items() if c != 1}
        nodes = store.nodes(run.id)
        findings = doctor(store, home, run.id)
        cli_doctor = subprocess.run(
            [sys.executable, "-m", "revtree", "doctor", run.id, "--db", db_url],
            env=cli_env(home),
            capture_output=True,
            text=True,
            timeout=120,
        )
        got = _tree(store, home, run.id)
        seconds = (reference_s, killing_s, time.monotonic() - started)
        _report(db_url, kills, rounds, chaos.phases, lost, duplicated, seconds)

        assert lost == [] and duplicated == {} and findings == []
        assert cli_doctor.returncode == 0 and "no problems found" in cli_doctor.stdout
        assert len(nodes) == BUDGET and all(n.status is NodeStatus.SUCCEEDED for n in nodes)
        assert {n.id for n in nodes} == {k[0] for k in counts}  # every node evaluated
        assert all(n.attempt == 1 for n in nodes)
        assert got == expected
        seqs = [e.seq for e in store.events_since(run.id, limit=100_000)]
        assert seqs == list(range(1, len(seqs) + 1))
        assert not list((RunPaths(home, run.id).work).glob("revtree-*"))
        landed = {p for label in chaos.phases for p in label.split(" ")[0].split(",")}
        assert set(TARGETS) <= landed, chaos.phases
    finally:
        store.close()


def _report(
    db_url: str,
    kills: int,
    rounds: int,
    phases: collections.Counter[str],
    lost: list[str],
    duplicated: dict[Any, int],
    seconds: tuple[float, float, float],
) -> None:
    backend = db_url.split(":", 1)[0]
    ref, killing, total = seconds
    print(
        textwrap.dedent(f"""
        chaos on {backend}: {kills} kills in {rounds} rounds; {total:.1f}s in all
          (reference run {ref:.1f}s, kill rounds {killing:.1f}s, final resume and checks
          {total - ref - killing:.1f}s)
          landed in: {dict(sorted(phases.items()))}
          lost results: {len(lost)} {lost[:5]}
          duplicated evaluations: {len(duplicated)}
        """)
    )
