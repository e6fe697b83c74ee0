"""The local sandbox's fork server: ``python zygote.py CONTROL_FD``.

A warm Python, started once per sandbox with the sandboxes' own environment, that forks
a fresh process for each evaluation: the evaluation's supervisor (``supervise.py``, the
same code, in the forked child), which forks the command. Each evaluation is still a
process of its own, started from the same clean image (this process has run no
evaluation; it only forks), so nothing passes from one evaluation to the next; what is
saved is the start of a supervisor, of a shell and of the command's Python (the
supervisor forks the script's process itself and ends as the shell would, ``_as_shell``).
The supervisor of the next evaluation is forked ahead (``_spare``: while no request's
descriptors are open here, its signals reset, killed with this process) and waits for
its request, which this process hands it (``_hand``); a spare gone or stopped (a
candidate of the same user can signal it) is killed and the request forked as before.

Requests come on CONTROL_FD (an ``AF_UNIX`` ``SOCK_SEQPACKET`` socket): one JSON header
(``cwd``, ``env``, ``memory``, ``cpu``, ``command``, ``script``, and what the server may
load or compile ahead: ``imports``, ``packages``, ``sources``) with four descriptors:
the command's stdout and stderr, its metrics file (descriptor 3 in the command) and a
status socket. The forked supervisor writes ``P<pid>`` on the status socket once it is
bound to this process, and ``S<wait status>`` when every descendant is dead (its copies
of the command's pipes closed first, so that they end then too), then exits as the
command did. The client reads a closed status socket with no ``S`` as a supervisor
killed (``SIGKILL``).

``script`` (a list: ``[path, *args]``) asks the command's process to run a Python
script itself, as ``python path args`` would (``__main__``, ``sys.argv``,
``sys.path[0]``, the exit code of ``SystemExit`` or 1 with the traceback), instead of
``/bin/sh -c command``. The client asks for it only where ``python`` on the request's
``PATH`` is this interpreter and the variables read at Python's start are the ones
this process started with (``forkserver.py``). This process compiles the script, and
the task's own module files the request names (``sources``), once per source
(``zygote_compile``): the fork runs, and imports, that code where its files hold the
same bytes. What this process loaded is frozen out of the garbage collector
(``gc.freeze``): the collection at a fork's exit walks only what the script made, not
every page inherited.

It exits when CONTROL_FD closes (the orchestrator ended or died); each supervisor gets
SIGTERM when this process dies (``PR_SET_PDEATHSIG``) and kills its command's tree. It
is non-dumpable, so a command of the same user cannot read its memory or descriptors
through ``/proc``; the command's process is made dumpable again, as after an exec.
"""

from __future__ import annotations

import builtins
import ctypes
import fcntl
import gc
import importlib
import importlib.machinery
import io
import json
import os
import resource  # noqa: F401  (the supervisor's limits: loaded once here, not per fork)
import select
import signal
import socket
import sys
import types

import supervise  # the sibling modules: this file runs as a script from its folder
import zygote_compile
import zygote_preload

# what a typical evaluation imports first, loaded once here (each fork still gets its
# own copy); nothing that starts a thread, opens a file or seeds a generator for good
PRELOAD = ("collections", "functools", "importlib.util", "math", "re", "traceback", "typing")
for _name in PRELOAD:
    importlib.import_module(_name)

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
HIGH = 10  # the status socket moves at or above this descriptor, out of the command's way
MAX_FD = 1 << 16  # a spare closes what it inherited below this (the server keeps few)
prctl = ctypes.CDLL(None, use_errno=True).prctl


def _python_signals() -> None:
    """The signal dispositions a fresh Python sets at start."""
    for sig in supervise.RESET:
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _as_shell(status: int) -> int:
    """The wait status ``/bin/sh -c "python FILE ..."`` ends with where the script ended
    with ``status``: the script's exit code, or 128 + the signal that killed it, named on
    stderr as the shell names it. The supervisor says it for the script it forked, so
    that no process stands between them as the shell would."""
    if not os.WIFSIGNALED(status):
        return status
    sig = os.WTERMSIG(status)
    if sig not in (signal.SIGINT, signal.SIGPIPE):
        core = " (core dumped)" if os.WCOREDUMP(status) else ""
        os.write(2, f"{signal.strsignal(sig)}{core}\n".encode())
    return (128 + sig) << 8


def _run_script(
    argv: list[str], ready: tuple[bytes, types.CodeType] | None = None
) -> None:  # never returns
    """Run ``python argv[0] argv[1:]`` in this process and exit as that would
    (``ready``: its source as read and compiled by the server, if it is unchanged)."""
    code, before = 0, set[str]()
    main: types.ModuleType | None = None
    program: types.CodeType | None = None
    error: BaseException | None = None
    try:
        _python_signals()
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        path = os.path.abspath(argv[0])
        sys.argv[:] = argv
        sys.path[0] = os.path.dirname(os.path.realpath(path))
        sys.modules.pop("supervise", None)  # ours, not modules the script may import
        sys.modules.pop("zygote_preload", None)
        sys.modules.pop("zygote_compile", None)
        zygote_preload.reseed()
        main = types.ModuleType("__main__")
        loader = importlib.machinery.SourceFileLoader("__main__", path)
        main.__dict__.update(
            __file__=path, __cached__=None, __builtins__=builtins, __loader__=loader
        )
        before.update(sys.modules)
        sys.modules["__main__"] = main
        with io.open_code(path) as src:
            source = src.read()
        zygote_compile.cached_imports()
        if ready is not None and ready[0] == source:
            program = zygote_compile.named(ready[1], path)
        else:
            program = compile(source, path, "exec", dont_inherit=True)
        exec(program, main.__dict__)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        error = sys.exception()
        assert error is not None
        tb = error.__traceback__
        error = error.with_traceback(tb.tb_next if tb is not None else None)  # the script's
        sys.excepthook(type(error), error, error.__traceback__)
        code = -signal.SIGINT if isinstance(error, KeyboardInterrupt) else 1
    main = program = error = None  # the script's, let go (its module lives where it does)
    try:
        # joins non-daemon threads, as Python's shutdown does: only where the script
        # imported threading (importing it here cost each evaluation 1-2 ms)
        if (threading := sys.modules.get("threading")) is not None:
            threading._shutdown()
        import atexit

        atexit._run_exitfuncs()
        _finalize(before)
    except BaseException:
        pass
    for f in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105  (contextlib is not loaded here)
            f.flush()
        except BaseException:
            pass
    if code == -signal.SIGINT:  # as Python does: an uncaught KeyboardInterrupt dies by it
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 128 + signal.SIGINT
    os._exit(code)


def _finalize(before: set[str]) -> None:
    """The script's modules (``__main__``, then those not in ``before``, last loaded
    first) finalized at its end, so that files left open are flushed and closed
    (descriptor 3's metrics too) and ``__del__`` runs, as after a fresh Python's: the
    script's signal handlers and exception hook let go (as Python's shutdown lets go of
    them), each module dropped from ``sys.modules``, then its names set to None, the last
    bound first, so that what the script made last goes first, while what it uses is
    still there (a ``__del__`` that writes a score with ``json``; a file it holds then
    closes by its count, its buffer written: in a collected cycle it could be lost),
    and None, not a missing name, is what a late callback finds (logging's handler
    refs). Then the rest is collected."""
    import gc

    for sig in signal.valid_signals():
        try:
            if callable(signal.getsignal(sig)) and sig != signal.SIGINT:
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    vars(sys)["excepthook"] = sys.__excepthook__
    mine = [n for n in sys.modules if n not in before and n != "__main__"]
    dicts = []
    for name in ["__main__", *reversed(mine)]:
        names = getattr(sys.modules.pop(name, None), "__dict__", None)
        if isinstance(names, dict):
            dicts.append(names)
    names = None
    for names in dicts:
        for key in reversed([k for k in names if k != "__builtins__"]):
            names[key] = None
    names = None
    dicts.clear()
    gc.collect()


def _shadows(folder: str) -> bool:
    """Whether ``folder`` (the script's, first on its ``sys.path``) holds a module or
    package named like one this process has loaded: a fresh Python would import the
    folder's, the fork would keep its own, so the command starts cold instead."""
    loaded = {name.partition(".")[0] for name in sys.modules}
    try:
        entries = os.listdir(folder)
    except OSError:
        return True
    return any(e.partition(".")[0] in loaded for e in entries if _module_like(e))


def _module_like(entry: str) -> bool:
    """A source, bytecode, an extension, or a folder (a package), by its name."""
    return "." not in entry or entry.endswith(zygote_preload.SUFFIXES[1:])


def _bind(control: int, zygote: int) -> None:
    """In a forked child, before its request: the signals a fresh process has, a
    subreaper that dies with the server: SIGKILL until it serves (a spare a candidate
    stopped dies too), SIGTERM once it does (``_serve``: its command's tree is killed)."""
    os.close(control)
    for sig in supervise.RESET:
        signal.signal(sig, signal.SIG_DFL)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if os.getppid() != zygote:
        os._exit(1)  # the fork server died before PDEATHSIG was set


def _spare(control: int, zygote: int) -> tuple[int, socket.socket] | None:
    """A child forked ahead and bound (``_bind``), that waits on a socket of its own for
    the next request (header and descriptors, as the server got them) and then serves
    it: a request is answered without a fork and a new process's first steps (about 2
    ms, most of the time to its ``P``). Forked only while the server holds no request's
    descriptors, and it closes every other it inherited. Its pid and that socket; None
    if no fork."""
    try:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except OSError:  # out of descriptors: requests are forked as they come
        return None
    try:
        pid = os.fork()
    except OSError:
        ours.close()
        theirs.close()
        return None
    if pid:
        theirs.close()
        return pid, ours
    try:  # the child: never returns
        ours.close()
        _bind(control, zygote)
        keep = theirs.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, MAX_FD)
        msg, fds, _, _ = socket.recv_fds(theirs, 1 << 20, 4)
        theirs.close()
        if not msg:  # the server ended
            os._exit(0)
        header = json.loads(msg)
        _serve(header, fds, zygote, zygote_compile.compiled(header))
    finally:
        os._exit(127)


def _state(pid: int) -> bytes | None:
    """The state letter of ``pid`` where it is this process's child, else None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0] if int(fields[1]) == os.getpid() else None
    except (OSError, IndexError, ValueError):
        return None


def _drop(pid: int) -> None:
    """Kill a spare of this process (stopped, it would wait forever), never another's."""
    if _state(pid) is not None:
        os.kill(pid, signal.SIGKILL)


def _hand(spare: tuple[int, socket.socket], msg: bytes, fds: list[int]) -> bool:
    """Give a request to the spare; False where it is gone or stopped (a candidate of
    the same user can signal it): killed then, and the server forks instead."""
    pid, sock = spare
    try:
        state = _state(pid)
        if state not in (None, b"T", b"t", b"Z", b"X"):
            socket.send_fds(sock, [msg], fds)
            return True
        if state is not None:  # ours, stopped or dead
            os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    finally:
        sock.close()
    return False


def _serve(
    header: dict, fds: list[int], zygote: int, ready: tuple[bytes, types.CodeType] | None
) -> None:  # never returns
    """In the forked child, bound: become the evaluation's supervisor (``ready``: its
    script as compiled before the fork)."""
    status_fd = -1
    try:
        os.setsid()  # out of the server's group and session
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # the supervisor's: it kills its tree
        if os.getppid() != zygote:
            os._exit(1)  # the server died meanwhile
        out, err, metrics, status = fds
        status_fd = fcntl.fcntl(status, fcntl.F_DUPFD_CLOEXEC, HIGH)
        os.close(status)
        null = os.open(os.devnull, os.O_RDONLY)
        for src, dst in ((null, 0), (out, 1), (err, 2)):
            os.dup2(src, dst)
            os.close(src)
        metrics_fd = fcntl.fcntl(metrics, fcntl.F_DUPFD_CLOEXEC, HIGH)
        os.close(metrics)
        os.chdir(header["cwd"])
        os.environ.clear()
        os.environ.update(header["env"])
        os.write(status_fd, b"P%d\n" % os.getpid())
        script = header.get("script")
        if script and _shadows(os.path.dirname(os.path.realpath(script[0]))):
            script = None  # a module of the workspace would lose to one loaded here
        if script and zygote_preload.LOADED and not zygote_preload.same_env(header["env"]):
            script = None  # what was loaded ahead read another environment

        def start(command: str) -> None:
            os.close(status_fd)
            if script:
                _run_script(script, ready)
            prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)

        st = supervise.supervise(
            metrics_fd, header["memory"], header["cpu"], header["command"], start=start
        )
        if script and st is not None:
            st = _as_shell(st)
        # the command's tree is dead: its pipes end (and its status is told) now, not
        # once this process has unmapped what it inherited (1-2 ms with numpy loaded)
        os.closerange(0, supervise.METRICS_FD + 1)
        if st is not None:
            os.write(status_fd, b"S%d\n" % st)
        supervise._exit_as(st)
    except BaseException as e:
        with open(2, "w", closefd=False) as f:
            f.write(f"revtree fork server: {e!r}\n")
    finally:
        os._exit(127)


def main(control: int) -> None:
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    me, sock = os.getpid(), socket.socket(fileno=control)
    # what is loaded now stays out of the forks' garbage collections (a fork's collection
    # at exit would otherwise walk, and so copy, every page of it)
    gc.freeze()
    spare = _spare(control, me)
    while True:
        ready, _, _ = select.select([control], [], [], 1.0)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass  # supervisors that ended
        except ChildProcessError:
            pass
        if not ready:
            continue
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 4)
        if not msg:  # the orchestrator closed its end, or died
            if spare is not None:
                _drop(spare[0])
            try:  # noqa: SIM105  (contextlib is not loaded here)
                os.rmdir(os.getcwd())  # its own empty home, left by a killed orchestrator
            except OSError:
                pass
            return
        try:
            header = json.loads(msg)
            if len(fds) != 4:
                raise ValueError(f"{len(fds)} descriptors, not 4")
        except ValueError:
            for fd in fds:
                os.close(fd)
            continue
        compiled = zygote_compile.compiled(header)  # (here first: the next spare has it)
        if spare is None or not _hand(spare, msg, fds):
            try:
                child = os.fork()
            except OSError:
                child = -1  # no fork (a fork bomb's EAGAIN): that request fails, not the server
            if child == 0:
                try:
                    _bind(control, me)
                    _serve(header, fds, me, compiled)
                finally:
                    os._exit(127)
        for fd in fds:
            os.close(fd)
        zygote_compile.compile_sources(header)  # (after the hand-off: so has the next spare)
        if zygote_preload.learn(header):  # what the task's files import, for the next forks
            gc.freeze()
        spare = _spare(control, me)  # no request's descriptor is open here now


if __name__ == "__main__":
    main(int(sys.argv[1]))
