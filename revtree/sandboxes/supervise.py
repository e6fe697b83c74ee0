"""The supervisor of one local execution:
``python -I -S supervise.py FD MEMORY CPU COMMAND [SEED BACK FSIZE]``.

It makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so whatever the command
leaves behind (a background job, a ``setsid`` double-forked daemon) is reparented to it,
never to init, and asks for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``; if the
parent named in ``REVTREE_SUPERVISOR_PARENT`` is already gone, it stops at once). It
does so itself, first thing, rather than have the sandbox do it between fork and exec:
a ``preexec_fn`` makes Python fork the whole orchestrator instead of spawning, about
40 ms per evaluation for a 200 MB process (the namespace sandbox, which must enter its
cgroup before exec, still does; it sets no parent, and this step is skipped). It:

- runs ``/bin/sh -c COMMAND`` with descriptor FD as its ``METRICS_FD`` (3) and, when not
  0, ``RLIMIT_AS`` = MEMORY bytes and ``RLIMIT_CPU`` = CPU seconds (on the command only);
- reaps every process handed to it while the command runs;
- when the command ends, or on SIGTERM, SIGHUP, SIGINT or SIGUSR1 (a timeout, a cancel,
  the orchestrator's death through ``PR_SET_PDEATHSIG``), SIGKILLs every descendant it
  finds in ``/proc``, again and again until it has no child left: with a subreaper, no
  child left means no descendant left;
- then exits as the command did: the same exit code, or killed by the same signal
  (SIGKILL when it was told to stop).

Inside the namespace sandbox (``bwrap.py``) it is given SEED and BACK, descriptors of
the host's workspace folder and of an empty host folder, and FSIZE: it makes itself
non-dumpable (so the command cannot open them through ``/proc/<pid>/fd``), copies SEED
into its working folder (a size-capped tmpfs) and closes it before the command starts,
sets ``RLIMIT_FSIZE`` = FSIZE on the command (descriptor 3 included), and once every
descendant is dead copies the working folder into BACK (``cp -a``: links and fifos
copied as such, never followed or read), from where the sandbox collects the outputs.

What it does not cover: a descendant that kills this process (same user) escapes it;
the sandbox then kills the process group, which a ``setsid`` leaves. Without ``/proc``
(not Linux) it only reaps and exits; the sandbox's group kill is all there is.

Built-in modules only (``posix``, ``_signal``, ``time``; ``resource`` when limits are
set; ``ctypes`` for ``prctl``), so that with ``-S`` it starts in a few milliseconds.
"""

from __future__ import annotations

import _signal
import posix
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    Start = Callable[[str], None]  # runs a command in the forked child instead of exec

STOP = (_signal.SIGTERM, _signal.SIGHUP, _signal.SIGINT, _signal.SIGUSR1)
RESET = (*STOP, _signal.SIGPIPE, _signal.SIGXFSZ)  # Python ignores the last two
METRICS_FD = 3
PARENT_ENV = "REVTREE_SUPERVISOR_PARENT"  # the pid whose death stops the supervisor


class Stop(Exception):
    """Raised by the handler of the STOP signals."""


def _on_stop(signum: int, frame: object) -> None:
    raise Stop(signum)


def _child(
    command: str, memory: int, cpu: int, fsize: int = 0, start: Start | None = None
) -> None:  # never returns
    try:
        for sig in RESET:
            _signal.signal(sig, _signal.SIG_DFL)
        if memory or cpu or fsize:
            import resource

            if fsize:
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

            if memory:
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            if cpu:
                resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        if start is not None:
            start(command)  # the fork server's: runs the command here and exits
        posix.execv("/bin/sh", ["/bin/sh", "-c", command])
    finally:
        posix._exit(127)


def _descendants(root: int) -> list[int]:
    """Every live process under ``root``, from one pass over ``/proc``."""
    kids: dict[int, list[int]] = {}
    for name in posix.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for pid in kids.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


def kill_all() -> None:
    """SIGKILL every descendant until no child is left (reaping them as they die)."""
    have_proc = posix.access("/proc/self/stat", posix.F_OK)
    me, pause = posix.getpid(), 0.0005
    while True:
        try:
            while posix.waitpid(-1, posix.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        if not have_proc:
            return
        for pid in _descendants(me):
            try:  # noqa: SIM105  (contextlib would cost start-up time)
                posix.kill(pid, _signal.SIGKILL)
            except OSError:
                pass
        time.sleep(pause)
        pause = min(2 * pause, 0.01)


def _copy(src: str, dst: str, keep: int) -> bool:
    """``cp -a src/. dst`` with descriptor ``keep`` open in cp; True if it succeeded."""
    pid = posix.fork()
    if pid == 0:
        try:
            posix.set_inheritable(keep, True)
            posix.execv("/bin/cp", ["/bin/cp", "-a", "--", src + "/.", dst])
        finally:
            posix._exit(127)
    _, status = posix.waitpid(pid, 0)
    return posix.WIFEXITED(status) and posix.WEXITSTATUS(status) == 0


def _bind_to_parent() -> None:
    """Subreaper, and SIGTERM on the parent's death, where the launcher asked for it
    (``PARENT_ENV``, removed from the command's environment); Stop if it died already."""
    parent = posix.environ.get(PARENT_ENV.encode())
    if parent is None:
        return
    posix.unsetenv(PARENT_ENV)
    import ctypes

    try:
        prctl = ctypes.CDLL(None).prctl
    except (AttributeError, OSError):
        return  # not Linux: the sandbox's group kill is all there is (as without /proc)
    prctl(1, _signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    if posix.getppid() != int(parent):
        raise Stop(_signal.SIGTERM)  # the parent died before PDEATHSIG was set


def _undumpable() -> None:
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError("cannot make the supervisor non-dumpable")


def _exit_as(status: int | None) -> None:
    if status is not None and posix.WIFEXITED(status):
        posix._exit(posix.WEXITSTATUS(status))
    sig = posix.WTERMSIG(status) if status is not None else _signal.SIGKILL
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # die by the signal, leave no core
    if sig not in (_signal.SIGKILL, _signal.SIGSTOP):
        _signal.signal(sig, _signal.SIG_DFL)
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [sig])
    posix.kill(posix.getpid(), sig)
    posix._exit(128 + sig)  # a signal whose default is not to terminate


def main(argv: list[str]) -> None:
    fd, memory, cpu, command = int(argv[1]), int(argv[2]), int(argv[3]), argv[4]
    seed, back, fsize = (int(a) for a in argv[5:8]) if len(argv) > 7 else (-1, -1, 0)
    _exit_as(supervise(fd, memory, cpu, command, seed, back, fsize))


def supervise(
    fd: int,
    memory: int,
    cpu: int,
    command: str,
    seed: int = -1,
    back: int = -1,
    fsize: int = 0,
    start: Start | None = None,
) -> int | None:
    """Run ``command`` as described above; its wait status (None: it was stopped). The
    caller exits as it did (``_exit_as``). ``start``: the fork server's way to run the
    command in the forked child (``zygote.py``), instead of ``/bin/sh -c``."""
    status = None
    try:
        for sig in STOP:
            _signal.signal(sig, _on_stop)
        _bind_to_parent()
        if seed >= 0:
            _undumpable()
            posix.set_inheritable(back, False)
            if not _copy(f"/proc/self/fd/{seed}", ".", seed):
                raise OSError("cannot copy the workspace in")
            posix.close(seed)
        if fd != METRICS_FD:
            posix.dup2(fd, METRICS_FD)
            posix.close(fd)
        posix.set_inheritable(METRICS_FD, True)
        pid = posix.fork()
        if pid == 0:
            _child(command, memory, cpu, fsize, start)
        while status is None:
            reaped, st = posix.waitpid(-1, 0)
            if reaped == pid:
                status = st
    except Stop:
        pass
    except Exception as e:  # a broken start: still kill what may have started
        posix.write(2, f"revtree supervisor: {e!r}\n".encode())
    while True:
        try:
            for sig in STOP:
                _signal.signal(sig, _signal.SIG_IGN)
            kill_all()
            break
        except Stop:
            continue
    if back >= 0 and status is not None and not _copy(".", f"/proc/self/fd/{back}", back):
        posix.write(2, b"revtree supervisor: cannot copy the workspace out\n")
    return status


if __name__ == "__main__":
    import sys

    main(sys.argv)
