"""The namespace sandbox: the local supervisor inside bubblewrap (``--sandbox bwrap``).

Each evaluation runs as ``bwrap ... python -I -S supervise.py ...`` (Debian's
``bubblewrap``), with:

- no network (``--unshare-net``: not even 127.0.0.1; no DNS), and its own IPC, UTS and
  cgroup namespaces;
- its own PID namespace (``--unshare-pid``) and ``/proc``: the orchestrator and every
  other host process are invisible (no ``/proc/<pid>/environ``); when the supervisor
  (or bwrap, or the orchestrator: ``--die-with-parent``) dies, the kernel kills every
  process of the namespace, so a ``setsid`` daemon cannot outlive its evaluation;
- a read-only view of the system (``/`` bound read-only, each top-level folder on its
  own, less the folders where a container engine mounts and unmounts its containers'
  filesystems: ``/var/lib/docker`` and the like, whose mounts come and go under a
  recursive bind and made it fail with "Unable to apply mount flags", and which hold
  other containers' files besides) with tmpfs over ``/tmp``,
  ``/var/tmp``, ``/dev/shm``, ``/run`` (the Docker socket), the user's home folder
  (``~/.ssh``, credentials), ``REVTREE_HOME`` (the store, the runs' ``repo.git``) and
  the sandbox's own host folder; the Python that runs the evaluation is the
  orchestrator's (``sys.executable``), its installation bound back read-only, so the
  evaluator's packages import and nothing (a ``.pth``) can be written there;
- the workspace a size-capped tmpfs: the supervisor copies the extracted workspace in
  through a descriptor, and out (links and fifos as such) once every process is dead;
  ``/tmp`` and ``/dev/shm`` are capped alike, descriptor 3 by ``RLIMIT_FSIZE``;
- capabilities dropped (bwrap's default), so the read-only mounts hold for root too;
- one cgroup per evaluation for memory and processes where this process may make one
  (``cgroups.py``), else ``RLIMIT_AS`` per process only: ``enforced()`` says which.

``usable()`` says whether bwrap is installed and can make namespaces here (None) or
why not; ``auto`` prefers this backend to refusing code a model wrote when Docker
cannot take it (``revtree/sandboxes/__init__.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from revtree.sandboxes import cgroups
from revtree.sandboxes.base import ExecRequest, SandboxContext
from revtree.sandboxes.env import sandbox_env
from revtree.sandboxes.local import Launch, LocalSandbox, prctl, supervised
from revtree.tasks.sandbox import BwrapConfig

Config = BwrapConfig
"""The namespace backend's ``[sandbox]`` keys: the common ones (its caps are options)."""

DISK_CAP = 1 << 30  # bytes each of the workspace, /tmp and /dev/shm may hold
PIDS_CAP = 512  # processes per evaluation, where a cgroup enforces it
HIGH_FD = 100  # the workspace descriptors are moved to or above this


PROGRAM_ENV = "REVTREE_BWRAP"  # the bwrap program (a path, or a name on PATH)


def program() -> str:
    return os.environ.get(PROGRAM_ENV) or "bwrap"


def usable() -> str | None:
    """None if bwrap runs here with the namespaces this backend uses, else why not."""
    return _usable(program())


@functools.lru_cache(maxsize=4)
def _usable(name: str) -> str | None:
    path = shutil.which(name)
    if path is None:
        return f"bubblewrap ({name}) is not installed (Debian: apt-get install bubblewrap)"
    try:
        probe = subprocess.run(
            [path, *_namespaces(), *_system_view(), "--proc", "/proc", "true"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return f"bwrap cannot start: {e}"
    if probe.returncode != 0:
        why = probe.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
        return f"bwrap cannot make namespaces here: {why[0]}"
    return None


def enforced(memory: bool = True) -> str:
    """One line: what this machine lets the namespace sandbox enforce, and what not."""
    group = cgroups.available()
    disk = f"disk {DISK_CAP >> 20} MiB each for the workspace, /tmp and /dev/shm (tmpfs)"
    if group is not None:
        limits = f"memory and processes per evaluation ({group})"
    else:
        limits = (
            "memory per process only (RLIMIT_AS: no writable cgroup here, so several "
            "processes of one evaluation may use more together); processes not capped"
        )
    return (
        f"sandbox bwrap: no network, read-only system, only the workspace writable, "
        f"REVTREE_HOME, home and /run hidden, own PIDs and /proc; {limits}; {disk}"
    )


def _namespaces() -> list[str]:
    return [
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
    ]


# never bound: mounted anew (/proc, /dev), a tmpfs (/tmp, /run), or folders where a
# container engine mounts its containers' filesystems while we bind (a recursive bind
# of / then fails on a mount that vanished) and which hold other containers' files
UNBOUND = (
    "/proc",
    "/dev",
    "/tmp",
    "/run",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containers",
    "/var/lib/containerd",
    "/var/lib/kubelet",
    "/var/lib/rancher",  # k3s's containerd
    "/var/snap/docker",  # Ubuntu's snap of Docker
)


def _system_view(unbound: tuple[str, ...] = UNBOUND) -> list[str]:
    """bwrap arguments that bind ``/`` read-only less ``unbound``: each folder that
    holds no unbound path is bound whole, the others entry by entry (links as links)."""
    skip = [Path(u) for u in unbound]
    args: list[str] = []

    def cover(path: Path) -> None:
        if path in skip:
            return
        if not any(path in s.parents for s in skip):
            args.extend(["--ro-bind", str(path), str(path)])
            return
        try:
            children = sorted(path.iterdir())
        except OSError:
            return  # unreadable here: not shown
        for child in children:
            try:
                if child.is_symlink():
                    args.extend(["--symlink", os.readlink(child), str(child)])
                elif child.is_dir() or child.is_file():
                    cover(child)
            except OSError:  # e.g. a stale FUSE mount (ENOTCONN): not shown
                continue

    cover(Path("/"))
    return args


def _hidden() -> list[Path]:
    """Host folders the evaluation must not see: home, the store, the runtime dir."""
    home = os.environ.get("REVTREE_HOME") or str(Path.home() / ".revtree")
    found = []
    for p in (str(Path.home()), home, "/run", "/var/run", "/root"):
        path = Path(p).expanduser()
        if path.is_dir() and not path.is_symlink() and path != Path("/"):
            found.append(path.resolve())
    return sorted(set(found))


def _python_roots() -> list[Path]:
    """The folders of the Python that runs evaluations, and revtree's own package (the
    supervisor; evaluators may import revtree): bound back read-only where a hidden
    folder covers them (a clone and its venv under /tmp or the home folder)."""
    package = Path(__file__).resolve().parent.parent
    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent}
    roots.add(package)
    found = sorted({r.resolve() for r in roots if r.exists()})
    return [r for r in found if not any(o in r.parents for o in found)]


def _argv(inner: list[str], tmp: Path, ws: Path, disk: int) -> list[str]:
    """The bwrap command line that runs ``inner`` in ``ws`` (a tmpfs) under ``tmp``."""
    size = ["--size", str(disk)]
    argv = [shutil.which(program()) or program(), *_namespaces(), *_system_view()]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += [*size, "--tmpfs", "/dev/shm", *size, "--tmpfs", "/tmp"]
    argv += [*size, "--tmpfs", "/var/tmp"] if Path("/var/tmp").is_dir() else []
    hidden = _hidden()
    for path in hidden:
        argv += ["--tmpfs", str(path)]
    covered = [*hidden, Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), tmp]
    for root in _python_roots():
        if any(h == root or h in root.parents for h in covered):
            argv += ["--ro-bind", str(root), str(root)]
    argv += ["--tmpfs", str(tmp), *size, "--tmpfs", str(ws), "--chdir", str(ws)]
    argv += ["--setenv", "TMPDIR", "/tmp", "--", *inner]
    return argv


def as_supervisor() -> None:
    """In the child, before exec (bwrap must enter its cgroup there, so it is forked with
    a preexec anyway): SIGTERM when we die, and a subreaper."""
    if prctl is not None:
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        prctl(36, 1)  # PR_SET_CHILD_SUBREAPER


def _high(fd: int) -> int:
    """A copy of ``fd`` at or above ``HIGH_FD`` (clear of descriptor 3)."""
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)


def build(
    context: SandboxContext, disk_bytes: int = DISK_CAP, pids: int = PIDS_CAP
) -> LocalSandbox:
    """The namespace backend (``[sandbox] backend = "bwrap"``): the context's
    ``base_dir``; ``disk_bytes`` and ``pids`` cap each evaluation's workspace and tasks."""
    return BwrapSandbox(context.base_dir, disk_bytes=disk_bytes, pids=pids)


class BwrapSandbox(LocalSandbox):
    """The local sandbox's supervisor in Linux namespaces; see the module's docstring."""

    name = "bwrap"
    contained = True  # namespaces: a read-only view, no network (sandboxes.base.Contained)
    warm = False  # each command gets namespaces of its own: no fork server outside them

    def __init__(
        self,
        base_dir: str | Path | None = None,
        *,
        disk_bytes: int = DISK_CAP,
        pids: int = PIDS_CAP,
    ) -> None:
        super().__init__(base_dir)
        if (why := usable()) is not None:
            from revtree.errors import SandboxError

            raise SandboxError(f"sandbox bwrap: {why}")
        self.disk_bytes, self.pids = disk_bytes, pids

    @contextlib.contextmanager
    def _launch(self, request: ExecRequest, tmp: Path, fd: int) -> Iterator[Launch]:
        ws, back = tmp / "ws", tmp / "back"
        back.mkdir()
        env = sandbox_env(request.env, home=ws, tmp="/tmp")
        seed = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
        out = os.open(back, os.O_RDONLY | os.O_DIRECTORY)
        try:
            seed_hi, out_hi = _high(seed), _high(out)
        finally:
            os.close(seed)
            os.close(out)
        try:
            memory = request.limits.memory_bytes
            with cgroups.Jail.make(tmp.name, memory, self.pids) as jail:
                inner = supervised(request.command, fd, request.limits)
                inner += [str(seed_hi), str(out_hi), str(self.disk_bytes)]

                def before_exec() -> None:  # in the child, before bwrap starts
                    jail.enter()
                    as_supervisor()

                argv = _argv(inner, tmp, ws, self.disk_bytes)
                yield Launch(argv, env, tmp, back, (fd, seed_hi, out_hi), before_exec)
        finally:
            os.close(seed_hi)
            os.close(out_hi)
