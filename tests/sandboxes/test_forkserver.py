"""The local sandbox's fork server (issue 24): a command it forks behaves as the same
command started afresh (the reference is a real ``python`` process: the same sandbox
with ``REVTREE_FORK_SERVER=0``), each evaluation is a process of its own, and a server
a candidate kills or that cannot start costs no later evaluation."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from revtree.sandboxes import ExecRequest, ExecResult, Limits
from revtree.sandboxes.base import archive_of
from revtree.sandboxes.env import sandbox_env
from revtree.sandboxes.forkserver import script_of, start_keys
from revtree.sandboxes.local import LocalSandbox

PROBE = """\
import atexit, json, os, random, sys, threading, time
atexit.register(lambda: print("atexit ran"))
def late():
    time.sleep(0.2)
    print("thread joined")
threading.Thread(target=late).start()
print(json.dumps({
    "argv": sys.argv,
    "path0": sys.path[0] == os.path.dirname(os.path.abspath(__file__)),
    "file": os.path.isabs(__file__) and os.path.basename(__file__),
    "name": __name__,
    "main": sys.modules["__main__"].__dict__.get("late") is late,
    "cwd": os.getcwd() == os.path.dirname(os.path.abspath(__file__)),
    "seed": os.environ.get("REVTREE_SEED"),
    "stdin": sys.stdin.read(),
    "unbuffered": os.environ.get("PYTHONUNBUFFERED"),
    "hash": hash("revtree"),
    "supervise": "supervise" in sys.modules,
}))
print("no newline at the end", end="")
"""


def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm: bool) -> LocalSandbox:
    monkeypatch.setenv("REVTREE_FORK_SERVER", "1" if warm else "0")
    return LocalSandbox(tmp_path / ("warm" if warm else "cold"))


def run(sandbox: LocalSandbox, files: dict[str, str], command: str) -> ExecResult:
    archive = archive_of({k: v.encode() for k, v in files.items()})
    env = {"REVTREE_SEED": "7"}
    return sandbox.execute(ExecRequest(archive, command, Limits(timeout=60), env=env))


def both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, go: Callable[[LocalSandbox], Any]
) -> dict[bool, Any]:
    """``go(sandbox)`` in a warm sandbox, then in a cold one: {warm: what it gave}."""
    got = {}
    for warm in (True, False):
        sandbox = box(tmp_path, monkeypatch, warm)
        try:
            got[warm] = go(sandbox)
        finally:
            sandbox.close()
    return got


def test_a_script_run_by_the_fork_server_sees_what_a_fresh_python_sees(tmp_path, monkeypatch):
    results = {}
    for warm in (True, False):
        sandbox = box(tmp_path, monkeypatch, warm)
        try:
            r = run(sandbox, {"probe.py": PROBE}, "python probe.py a --b=1")
        finally:
            sandbox.close()
        assert r.exit_code == 0, r.stderr
        first, *rest = r.stdout.split("\n")
        results[warm] = (json.loads(first), rest)
    assert results[True] == results[False]
    seen, rest = results[True]
    assert seen["argv"] == ["probe.py", "a", "--b=1"] and seen["name"] == "__main__"
    assert seen["file"] == "probe.py" and seen["path0"] and seen["cwd"] and seen["main"]
    assert seen["seed"] == "7" and seen["stdin"] == "" and not seen["supervise"]
    # the last line unflushed, the thread joined, then the atexit handlers: as at exit
    assert rest == ["no newline at the endthread joined", "atexit ran", ""]


WHO = "import os; print(os.getpid(), os.getppid())\n"


def test_the_script_runs_in_the_process_the_server_forked(tmp_path, monkeypatch):
    """Proof that the fast path is taken (else the test above compares a cold start
    with itself): a plain script's process is a fork of the server, no exec; a shell
    command still execs its programs."""
    me = {"who.py": "print(open('/proc/self/cmdline', 'rb').read())\n"}
    sandbox = box(tmp_path, monkeypatch, True)
    try:
        plain, shell = run(sandbox, me, "python who.py"), run(sandbox, me, "python who.py; true")
    finally:
        sandbox.close()
    assert "zygote.py" in plain.stdout, plain.stdout
    assert "zygote.py" not in shell.stdout and "who.py" in shell.stdout, shell.stdout


@pytest.mark.parametrize(
    ("code", "exit_code", "stderr"),
    [
        ("import sys; sys.exit(3)", 3, ""),
        ("import sys; sys.exit('bye')", 1, "bye"),
        ("raise ValueError('broken')", 1, "ValueError: broken"),
        # through /bin/sh -c, a signal's death is 128 + the signal, named by the shell
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 128 + 15, "Terminated"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9, "Killed"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGINT)", 128 + 2, ""),
        ("import os; os._exit(5)", 5, ""),
    ],
)
def test_exits_are_a_fresh_pythons(tmp_path, monkeypatch, code, exit_code, stderr):
    for warm in (True, False):
        sandbox = box(tmp_path, monkeypatch, warm)
        try:
            r = run(sandbox, {"x.py": code + "\n"}, "python x.py")
        finally:
            sandbox.close()
        assert r.exit_code == exit_code, (warm, r.exit_code, r.stderr)
        assert stderr in r.stderr, (warm, r.stderr)


POISON = """\
import json, os, random, sys
first = not hasattr(json, "POISON")
json.POISON = True
sys.modules["planted"] = json
print(json.dumps({"first": first, "planted": False, "pid": os.getpid(), "r": random.random()}))
"""


def test_each_evaluation_is_a_fresh_process(tmp_path, monkeypatch):
    sandbox = box(tmp_path, monkeypatch, True)
    try:
        runs = [json.loads(run(sandbox, {"p.py": POISON}, "python p.py").stdout) for _ in range(3)]
    finally:
        sandbox.close()
    assert all(r["first"] for r in runs), runs  # nothing one evaluation did is seen later
    assert len({r["pid"] for r in runs}) == 3
    assert len({r["r"] for r in runs}) == 3  # random is seeded afresh in each fork


KILL_SERVER = """\
import os, signal
def parent(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
def forked(pid):
    return b"zygote.py" in open(f"/proc/{pid}/cmdline", "rb").read()
server = os.getpid()  # up the chain of the server's forks to the server itself
while forked(parent(server)):
    server = parent(server)
assert forked(server) and server != os.getpid()
os.kill(server, signal.SIGKILL)
"""


def test_a_candidate_that_kills_the_server_costs_no_later_evaluation(tmp_path, monkeypatch):
    sandbox = box(tmp_path, monkeypatch, True)
    try:
        run(sandbox, {"k.py": KILL_SERVER}, "python k.py")
        after = [run(sandbox, {"w.py": WHO}, "python w.py") for _ in range(2)]
    finally:
        sandbox.close()
    assert [r.exit_code for r in after] == [0, 0], [r.stderr for r in after]
    assert all(len(r.stdout.split()) == 2 for r in after)


# the server's other children (the supervisor forked ahead for the next evaluation)
# stopped (SIGSTOP) or killed, as a candidate of the same user can
SPARES = """\
import os, signal, sys, time
def stat(pid):
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
def forked(pid):
    return b"zygote.py" in open(f"/proc/{pid}/cmdline", "rb").read()
server = os.getpid()
while forked(stat(server)[1]):
    server = int(stat(server)[1])
hit, deadline = [], time.monotonic() + 5
while not hit and time.monotonic() < deadline:  # the spare may not be forked yet
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (os.getpid(), os.getppid()):  # not its own
            try:
                if int(stat(name)[1]) == server and forked(name):
                    os.kill(int(name), getattr(signal, sys.argv[1]))
                    hit.append(name)
            except (OSError, IndexError):
                pass
    time.sleep(0.01)
print(" ".join(hit))
"""


def _gone(pid: str, within: float = 5.0) -> bool:
    """Whether process ``pid`` is gone (a zombie counts as gone), waiting up to ``within``."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", ["SIGSTOP", "SIGKILL"])
def test_a_candidate_that_stops_or_kills_the_servers_spare_costs_no_later_evaluation(
    tmp_path, monkeypatch, sig
):
    sandbox = box(tmp_path, monkeypatch, True)
    try:
        run(sandbox, {"w.py": WHO}, "python w.py")  # the server runs, a spare waits
        hit = run(sandbox, {"s.py": SPARES}, f"python s.py {sig}")
        t0 = time.monotonic()
        after = [run(sandbox, {"w.py": WHO}, "python w.py") for _ in range(3)]
        took = time.monotonic() - t0
        last = run(sandbox, {"s.py": SPARES}, f"python s.py {sig}")  # the last one's spare
    finally:
        sandbox.close()
    assert hit.exit_code == 0 and hit.stdout.split(), (hit.stdout, hit.stderr)
    assert [r.exit_code for r in after] == [0, 0, 0], [r.stderr for r in after]
    assert took < 5.0, took  # no wait for a stopped spare's answer (10 s each)
    assert all(_gone(pid) for pid in hit.stdout.split() + last.stdout.split())  # none left


FDS = "import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))\n"


def test_a_forked_command_holds_the_descriptors_a_cold_one_holds_first_run_or_later(
    tmp_path, monkeypatch
):
    """No request's descriptors (the status socket above all: a command holding it could
    forge its status or hold the sandbox's read open) reach another evaluation."""
    runs = {}
    for warm in (False, True):
        sandbox = box(tmp_path, monkeypatch, warm)
        try:
            runs[warm] = [run(sandbox, {"f.py": FDS}, "python f.py").stdout for _ in range(3)]
        finally:
            sandbox.close()
    assert runs[True] == runs[False] and len(set(runs[True])) == 1, runs


def test_a_server_that_cannot_start_falls_back_to_a_cold_start(tmp_path, monkeypatch):
    monkeypatch.setattr("revtree.sandboxes.forkserver.ZYGOTE", str(tmp_path / "missing.py"))
    sandbox = box(tmp_path, monkeypatch, True)
    try:
        r = run(sandbox, {"w.py": WHO}, "python w.py")
    finally:
        sandbox.close()
    assert r.exit_code == 0 and len(r.stdout.split()) == 2, r.stderr


def test_only_a_plain_python_script_on_the_servers_interpreter_runs_in_process(tmp_path):
    env = sandbox_env({}, home=tmp_path, tmp=tmp_path)
    started = start_keys(env)
    assert script_of("python ev.py --x=1 a/b.txt", env, started) == ["ev.py", "--x=1", "a/b.txt"]
    assert script_of("python3 ev.py", env, started) == ["ev.py"]
    for shell in ("python ev.py; rm -rf x", "python ev.py > out", "python $X.py", "sh ev.py"):
        assert script_of(shell, env, started) is None, shell
    assert script_of("python -m ev", env, started) is None
    other_path = {**env, "PATH": "/usr/bin:/bin"}  # another python than the server's
    if os.path.dirname(sys.executable) not in ("/usr/bin", "/bin"):
        assert script_of("python ev.py", other_path, started) is None
    assert script_of("python ev.py", {**env, "PYTHONPATH": "lib"}, started) is None
    assert script_of("python ev.py", {**env, "LANG": "C"}, {**started, "LANG": "C.UTF-8"}) is None


UNCLOSED = """\
m = open(3, "w")
m.write('{"score": 1}')
out = open("o.txt", "w")
out.write("data")
class Last:
    def __del__(self):
        print("finalized")
keep = Last()
"""


def test_files_left_open_are_flushed_as_a_fresh_python_flushes_them(tmp_path, monkeypatch):
    """Found by the second read: metrics written to descriptor 3 and never closed were
    lost in the fork (no interpreter shutdown), a score the cold path had."""
    archive = archive_of({"u.py": UNCLOSED.encode()})
    request = ExecRequest(archive, "python u.py", Limits(timeout=60), outputs=("o.txt",))

    def go(sandbox: LocalSandbox) -> tuple:
        r = sandbox.execute(request)
        return (r.exit_code, r.metrics_text, r.files.get("o.txt"), r.stdout)

    got = both(tmp_path, monkeypatch, go)
    assert got[True] == got[False] == (0, '{"score": 1}', b"data", "finalized\n"), got


def test_a_traceback_shows_the_scripts_frames_only(tmp_path, monkeypatch):
    code = "def f():\n    raise ValueError('broken')\nf()\n"
    errs = both(tmp_path, monkeypatch, lambda sb: run(sb, {"t.py": code}, "python t.py").stderr)
    assert "zygote.py" not in errs[True] and errs[True].count("File ") == 2, errs[True]
    assert [x for x in errs[True].splitlines() if "File" not in x] == [
        x for x in errs[False].splitlines() if "File" not in x
    ]


LOGS = """\
import logging, logging.handlers
logging.basicConfig()
logging.getLogger().addHandler(logging.handlers.MemoryHandler(10))
logging.getLogger("eval").warning("scored")
"""


def test_a_script_that_logs_ends_with_the_stderr_of_a_fresh_python(tmp_path, monkeypatch):
    """The fork's shutdown clears the script's modules as Python's does (names set to
    None): logging's late handler callbacks once printed a NameError traceback on the
    stderr of every forked evaluation that logged, which the agents read."""
    errs = both(
        tmp_path,
        monkeypatch,
        lambda sb: [run(sb, {"l.py": LOGS}, "python l.py").stderr for _ in range(2)],
    )
    assert errs[True] == errs[False] == ["WARNING:eval:scored\n"] * 2, errs


FINAL = """\
import json, sys
class Last:
    def __del__(self):  # at the interpreter's end, the module's names still there
        sys.stdout.write(json.dumps({"last": "word"}) + "\\n")
keep = Last()
"""


def test_a_del_at_exit_still_sees_its_modules_names(tmp_path, monkeypatch):
    """As Python's shutdown: the script's modules are dropped and collected before any
    is cleared, so a ``__del__`` run then (a final write of metrics, say) works."""

    def go(sandbox: LocalSandbox) -> tuple[str, str]:
        r = run(sandbox, {"f.py": FINAL}, "python f.py")
        return (r.stdout, r.stderr)

    outs = both(tmp_path, monkeypatch, go)
    assert outs[True] == outs[False] == ('{"last": "word"}\n', ""), outs


HELD = """\
import json, os, signal, sys
def on_alarm(signum, frame):  # the usual evaluator timeout: a handler keeps these globals
    raise TimeoutError
signal.signal(signal.SIGALRM, on_alarm)
class Report:
    def __init__(self):
        self.f = os.fdopen(3, "w")
    def __del__(self):
        self.f.write(json.dumps({"score": 2}))
        print("W finalized")
report = Report()
"""


def test_a_script_whose_globals_a_handler_holds_still_ends_as_a_fresh_one(tmp_path, monkeypatch):
    """Found by the third read: a signal handler kept the script's globals alive past
    its end, so an object holding metrics on descriptor 3 was never finalized."""
    archive = archive_of({"h.py": HELD.encode()})

    def go(sandbox: LocalSandbox) -> tuple:
        r = sandbox.execute(ExecRequest(archive, "python h.py", Limits(timeout=60)))
        return (r.exit_code, r.metrics_text, r.stdout, r.stderr)

    got = both(tmp_path, monkeypatch, go)
    assert got[True] == got[False] == (0, '{"score": 2}', "W finalized\n", ""), got


def test_a_workspace_module_named_like_a_loaded_one_is_imported_as_cold(tmp_path, monkeypatch):
    files = {"json.py": "WHO = 'workspace'\n", "m.py": "import json\nprint(json.WHO)\n"}
    sandbox = box(tmp_path, monkeypatch, True)
    try:
        r = run(sandbox, files, "python m.py")
    finally:
        sandbox.close()
    assert r.exit_code == 0 and r.stdout == "workspace\n", (r.stdout, r.stderr)


SLEEPER = "import time\ntime.sleep(2)\nprint('done')\n"
STOP_SERVER = KILL_SERVER.replace("SIGKILL", "SIGSTOP")


@pytest.mark.slow  # the stopped server is given ANSWER_WAIT (10 s) to answer
def test_a_stopped_server_or_a_failed_request_costs_no_other_evaluation(tmp_path, monkeypatch):
    import threading

    sandbox = box(tmp_path, monkeypatch, True)
    try:
        running: dict[str, ExecResult] = {}
        first = threading.Thread(
            target=lambda: running.update(r=run(sandbox, {"s.py": SLEEPER}, "python s.py"))
        )
        first.start()
        time.sleep(0.5)
        assert sandbox.forks is not None
        missing = sandbox.forks.spawn(tmp_path / "nowhere", {}, 1, 0, 0, "true")
        assert missing is None  # one request failed: the server goes on
        run(sandbox, {"k.py": STOP_SERVER}, "python k.py")  # a candidate stops the server
        t0 = time.monotonic()
        archive = archive_of({"w.py": WHO.encode()})
        after = sandbox.execute(ExecRequest(archive, "python w.py", Limits(timeout=5)))
        waited = time.monotonic() - t0
        first.join(30)
        retired = list(sandbox.forks._retired)
    finally:
        sandbox.close()
    assert running["r"].exit_code == 0 and running["r"].stdout == "done\n", running
    assert after.exit_code == 0 and not after.timed_out, (after.stderr, waited)
    assert len(retired) == 1  # the stopped server was set aside, not killed meanwhile


def test_a_script_compiled_once_by_the_server_still_names_its_own_file(tmp_path, monkeypatch):
    """The server compiles each script once and every later run of the same source
    forks with that code: the runs' tracebacks and ``co_filename`` still name each
    run's own file, line by line, as a fresh ``python`` does."""
    code = (
        "import sys\n"
        "def f():\n"
        "    print(f.__code__.co_filename == __file__ or f.__code__.co_filename)\n"
        "    raise ValueError('broken')\n"
        "f()\n"
    )

    def shown(stderr: str) -> list[str]:  # each frame's file name (last part) and line
        frames = [x.strip() for x in stderr.splitlines() if x.strip().startswith("File ")]
        return [f.split('"')[1].rsplit("/", 1)[-1] + f.split('"')[2] for f in frames]

    outs = both(
        tmp_path, monkeypatch, lambda sb: [run(sb, {"t.py": code}, "python t.py") for _ in range(3)]
    )
    cold = outs[False][0]
    assert shown(cold.stderr) == ["t.py, line 5, in <module>", "t.py, line 4, in f"], cold.stderr
    for r in outs[True]:  # the first run compiled it; the next two forked with that code
        assert r.stdout == "True\n" and shown(r.stderr) == shown(cold.stderr), r.stderr


def test_scripts_of_one_name_run_each_their_own_source(tmp_path, monkeypatch):
    """The compiled scripts are kept by their source, not their name: a changed file
    of the same name runs as changed."""
    sandbox = box(tmp_path, monkeypatch, True)
    try:
        got = [run(sandbox, {"e.py": f"print({i})\n"}, "python e.py").stdout for i in range(3)]
        again = run(sandbox, {"e.py": "print(0)\n"}, "python e.py").stdout
        broken = run(sandbox, {"e.py": "print(\n"}, "python e.py")
    finally:
        sandbox.close()
    assert got == ["0\n", "1\n", "2\n"] and again == "0\n"
    assert broken.exit_code == 1 and "SyntaxError" in broken.stderr


CACHE_PROBE = """
import json, os, sys, tempfile
sys.path.insert(0, sys.argv[1])
import zygote_compile as zc
d = tempfile.mkdtemp()
for name, text in {"a.py": "def f():\\n    return 1\\n", "w.py": "x = 1 is 1\\n",
                   "bad.py": "print(\\n"}.items():
    with open(os.path.join(d, name), "w") as f:
        f.write(text)
os.mkfifo(os.path.join(d, "fifo.py"))
cache = {}
first = zc.compiled({"cwd": d, "script": ["a.py"]}, cache)
again = zc.compiled({"cwd": d, "script": ["a.py"]}, cache)
print(json.dumps({
    "hit": first is not None and again is not None and first[1] is again[1],
    "cached": len(cache),
    "warned": zc.compiled({"cwd": d, "script": ["w.py"]}, cache),
    "broken": zc.compiled({"cwd": d, "script": ["bad.py"]}, cache),
    "fifo": zc.compiled({"cwd": d, "script": ["fifo.py"]}, cache),
    "named": zc.named(first[1], "/x/a.py").co_consts[0].co_filename,
}))
"""


def test_the_server_compiles_a_script_once_and_leaves_the_odd_ones_to_the_fork(tmp_path):
    """The server's compile cache itself (in a Python of its own): the same source
    twice is one code object; a script that warns as it compiles, one that does not
    compile and a FIFO are left to the fork (None), which says what python says; the
    code's nested functions are renamed to the fork's file."""
    import subprocess

    from revtree.sandboxes import forkserver

    folder = str(Path(forkserver.ZYGOTE).parent)
    done = subprocess.run(
        [sys.executable, "-c", CACHE_PROBE, folder], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got == {
        "hit": True,
        "cached": 1,
        "warned": None,
        "broken": None,
        "fifo": None,
        "named": "/x/a.py",
    }


def test_a_syntax_warning_reaches_the_scripts_stderr_warm_or_cold(tmp_path, monkeypatch):
    errs = {}
    for warm in (True, False):
        sandbox = box(tmp_path, monkeypatch, warm)
        try:
            runs = [run(sandbox, {"w.py": "x = 1 is 1\nprint(x)\n"}, "python w.py") for _ in (1, 2)]
        finally:
            sandbox.close()
        errs[warm] = [r.stderr.replace(str(tmp_path), "") for r in runs]
        assert all(r.stdout == "True\n" for r in runs)
    assert all("SyntaxWarning" in e for e in errs[False]), errs
    assert [e.split(":", 1)[1] for e in errs[True]] == [e.split(":", 1)[1] for e in errs[False]]


def _servers_of(pid: int) -> list[int]:
    """The fork servers (zygote.py) that are children of ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(b")", 1)[1].split()[1])
        if ppid == pid and b"zygote.py" in cmdline:
            found.append(int(entry.name))
    return found


def test_a_server_warmed_up_ahead_runs_the_first_command_in_process(tmp_path, monkeypatch):
    """``warm_up`` starts the server before any command (the run's first evaluation no
    longer waits for its boot), with the environment the commands carry: the first
    command then runs in a process that server forked, and no second server starts."""
    sandbox = box(tmp_path, monkeypatch, True)
    me = {"who.py": "import os; print(open('/proc/self/cmdline', 'rb').read())\n"}
    others = set(_servers_of(os.getpid()))  # (another test's, in this process)
    try:
        sandbox.warm_up({"REVTREE_SEED": "7"})
        ahead = set(_servers_of(os.getpid())) - others
        assert len(ahead) == 1, ahead
        result = run(sandbox, me, "python who.py")
        assert result.exit_code == 0 and "zygote.py" in result.stdout, result
        assert set(_servers_of(os.getpid())) - others == ahead
    finally:
        sandbox.close()
    assert not set(_servers_of(os.getpid())) & ahead


def test_a_server_warmed_up_for_another_environment_still_runs_each_command_right(
    tmp_path, monkeypatch
):
    """Warmed up with variables Python reads at its start that the command does not
    carry, the server does not run the command in-process (it would start as another
    Python would not): the command runs under a shell, and right."""
    sandbox = box(tmp_path, monkeypatch, True)
    me = {
        "who.py": "import sys; print(sys.flags.optimize, open('/proc/self/cmdline', 'rb').read())\n"
    }
    try:
        sandbox.warm_up({"PYTHONOPTIMIZE": "2"})
        result = run(sandbox, me, "python who.py")
    finally:
        sandbox.close()
    assert result.exit_code == 0, result
    assert result.stdout.startswith("0 ") and "zygote.py" not in result.stdout, result.stdout


def test_a_local_run_starts_its_fork_server_as_it_is_wired(tmp_path, monkeypatch):
    """The orchestrator of a local run has its fork server booting before it drives the
    run (it boots while the agents are made), and stops it as it closes."""
    from revtree.memory import Store
    from revtree.orchestrator import Orchestrator, create_run
    from revtree.tasks import load_task
    from tests.orchestrator.conftest import make_task

    monkeypatch.setenv("REVTREE_FORK_SERVER", "1")
    store = Store(f"sqlite:///{tmp_path}/db.sqlite")
    spec = load_task(make_task(tmp_path / "t", budget=2)).with_overrides(
        sandbox={"backend": "local"}
    )
    run_ = create_run(store, spec, tmp_path / "home")
    others = set(_servers_of(os.getpid()))  # (another test's, in this process)
    orch = Orchestrator(store, run_.id, home=tmp_path / "home")
    try:
        ahead = set(_servers_of(os.getpid())) - others
        assert len(ahead) == 1, ahead
    finally:
        orch.close()
        store.close()
    assert not set(_servers_of(os.getpid())) & ahead
