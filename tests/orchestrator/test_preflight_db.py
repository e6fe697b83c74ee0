"""Nothing is created that cannot be used: `run` and `resume` call each model once before
anything is created or evaluated (while the orchestrator is imported beside the call),
and a mistyped `--db` is one line, creating nothing.
The real CLI in a subprocess (``revtree``), or in this process (``revtree_here``) where
only what a command prints and exits with is asserted (issue 24); the model endpoint is a
closed port on 127.0.0.1."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
from pathlib import Path

import pytest

from revtree.agents.llm import LLMError
from revtree.agents.llm.fake_server import FakeLLMServer, FakeReply, FakeRequest
from revtree.orchestrator.commands.models import require_models
from revtree.tasks import TaskSpec, load_task
from tests.orchestrator.conftest import make_task, revtree, revtree_here, spawn


def _closed_url() -> str:
    """A base URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def _one_error_line(proc: object) -> str:
    out, err = proc.stdout, proc.stderr  # type: ignore[attr-defined]
    assert proc.returncode == 2, out + err  # type: ignore[attr-defined]
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.slow  # 10 s of --quick under -n 2 (issue 24)
def test_an_unreachable_model_is_refused_before_a_run_exists(tmp_path: Path, home: Path) -> None:
    task = make_task(tmp_path / "task", budget=3)
    url = _closed_url()
    model = "openai-compatible:gpt-x"
    proc = revtree(home, "run", str(task), "--model", model, "--base-url", url, check=False)
    line = _one_error_line(proc)
    assert url in line and "gpt-x" in line and "no run was created" in line, line
    assert json.loads(revtree(home, "ls", "--json").stdout) == []
    assert not (home / "runs").exists()  # no git repository was made
    assert not (home / "revtree.db").exists()  # nor the database


@pytest.mark.slow
def test_resume_checks_the_model_before_evaluating_anything(tmp_path: Path, home: Path) -> None:
    task = make_task(tmp_path / "task", budget=2)
    revtree(home, "run", str(task), "--sandbox", "local")
    run_id = json.loads(revtree(home, "ls", "--json").stdout)[0]["run_id"]
    before = json.loads(revtree(home, "show", run_id, "--json").stdout)
    url = _closed_url()
    proc = revtree(
        home, "resume", run_id, "--model", "openai-compatible:m", "--base-url", url, check=False
    )
    line = _one_error_line(proc)
    assert url in line and "openai-compatible:m" in line, line
    after = json.loads(revtree(home, "show", run_id, "--json").stdout)
    assert after["n_nodes"] == before["n_nodes"] and after["status"] == before["status"]


@pytest.mark.slow
def test_a_model_that_answers_passes_the_check(tmp_path: Path, home: Path) -> None:
    def answer(req: FakeRequest) -> str:
        return "ok" if req.user == "ping" else "HYPOTHESIS: nothing\nPLAN:\n1. nothing"

    task = make_task(tmp_path / "task", budget=1)  # the baseline only: no candidate
    with FakeLLMServer(answer) as srv:
        revtree(
            home, "run", str(task), "--sandbox", "local",
            "--model", "openai-compatible:m", "--base-url", srv.openai_url,
        )  # fmt: skip
        pings = [r for r in srv.requests if r.user == "ping"]
    assert len(pings) == 1 and pings[0].body.get("max_tokens") == 1


# -- --db ------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["ls"], ["show", "last"]])
@pytest.mark.slow  # 7 s of --quick under -n 2 (issue 24)
def test_a_file_that_is_not_a_database(tmp_path: Path, home: Path, command: list[str]) -> None:
    text = tmp_path / "notes.db"
    text.write_text("not a database\n")
    line = _one_error_line(revtree(home, *command, "--db", f"sqlite:///{text}", check=False))
    assert "file is not a database" in line and str(text) in line, line
    assert text.read_text() == "not a database\n"


def test_a_bare_path_names_its_url(tmp_path: Path, home: Path) -> None:
    path = tmp_path / "runs.db"
    line = _one_error_line(revtree(home, "ls", "--db", str(path), check=False))
    assert f"sqlite:///{path}" in line and "not a database URL" in line, line
    assert not path.exists() and not home.exists()


def test_an_unreachable_postgresql_hides_its_password(home: Path) -> None:
    url = "postgresql+psycopg://u:secret@127.0.0.1:1/x"
    line = _one_error_line(revtree_here(home, "ls", "--db", url, check=False))
    assert "u:***@127.0.0.1:1/x" in line and "secret" not in line, line


@pytest.mark.parametrize("command", [["ls"], ["watch", "last"], ["dashboard"]])
@pytest.mark.slow  # 8 s of --quick under -n 2 (issue 24)
def test_a_read_into_a_missing_folder_creates_nothing(
    tmp_path: Path, home: Path, command: list[str]
) -> None:
    db = tmp_path / "nope" / "dir" / "runs.db"
    line = _one_error_line(revtree(home, *command, "--db", f"sqlite:///{db}", check=False))
    assert str(db.parent) in line and "does not exist" in line, line
    assert not (tmp_path / "nope").exists()


def test_ls_on_a_fresh_machine_lists_none_and_creates_nothing(home: Path) -> None:
    assert json.loads(revtree_here(home, "ls", "--json").stdout) == []
    assert not home.exists()


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@127.0.0.1:1/x?password=S3CRET",  # libpq's query parameter
        "postgresql://u:p@S3CRET@127.0.0.1:1/x",  # an unescaped @: the driver names the host
        "postgresql://u:S3:CRET@127.0.0.1:1/x",
        "postgresql://u:S3CRET@127.0.0.1:notaport/x",  # a port that is no number
        "mysql://u:S3CRET@127.0.0.1:1/x",  # a database revtree does not store runs in
        "postgresql//u:S3CRET@127.0.0.1:1/x",  # a typo in the scheme
        "u:S3CRET@127.0.0.1/x",
    ],
)
@pytest.mark.slow  # 20 s of --quick under -n 2 (issue 24)
def test_every_db_mistake_hides_the_password(home: Path, url: str) -> None:
    proc = revtree(home, "ls", "--db", url, check=False)
    line = _one_error_line(proc)
    assert "S3CRET" not in proc.stdout + proc.stderr and "CRET" not in line, line
    assert "***" in line, line
    assert not home.exists()


# -- the model check beside the work it waits with -----------------------------------
def _llm_spec(tmp_path: Path, url: str) -> TaskSpec:
    task = load_task(make_task(tmp_path / "task", budget=2))
    agents = {"mode": "llm", "model": "openai-compatible:m", "base_url": url}
    return task.with_overrides(agents=agents)


def test_the_model_check_is_on_the_network_while_the_work_beside_it_runs(
    tmp_path: Path,
) -> None:
    """``run`` and ``resume`` import the orchestrator while the check's call waits for
    its answer. Here the model answers only once the work beside has begun, and that
    work waits for the call to arrive: the call first, then the work (as before), and
    the call times out; the work first, and it never sees the call."""
    arrived, begun = threading.Event(), threading.Event()

    def answer(req: FakeRequest) -> FakeReply | str:
        arrived.set()
        return "ok" if begun.wait(8) else FakeReply(status=500, message="nothing beside")

    def beside() -> None:
        if arrived.wait(8):
            begun.set()

    with FakeLLMServer(answer) as srv:
        require_models(_llm_spec(tmp_path, srv.openai_url), timeout=4, beside=beside)
        assert len(srv.requests) == 1 and srv.requests[0].body.get("max_tokens") == 1
    assert begun.is_set()


def test_a_failed_check_is_refused_after_the_work_beside_it(tmp_path: Path) -> None:
    url, done = _closed_url(), threading.Event()
    with pytest.raises(LLMError, match=re.escape(url)):
        require_models(_llm_spec(tmp_path, url), timeout=4, beside=done.set)
    assert done.is_set()  # (the import a run needs next: not cut short)


def test_an_offline_run_makes_no_call_and_no_work_beside(tmp_path: Path) -> None:
    offline = load_task(make_task(tmp_path / "task", budget=2))
    called: list[bool] = []
    require_models(offline, beside=lambda: called.append(True))
    assert called == []


@pytest.mark.slow
def test_ctrl_c_while_the_model_check_waits_ends_at_once_creating_nothing(
    tmp_path: Path, home: Path
) -> None:
    """A model that never answers the check, and a user who gives up: Ctrl-C while the
    call waits in its thread and the orchestrator is imported beside it ends the
    command at once, with no traceback, and no run, database or repository is left."""
    arrived, release = threading.Event(), threading.Event()

    def answer(req: FakeRequest) -> str:
        arrived.set()
        release.wait(60)  # (bounded: the server's thread ends with the test)
        return "ok"

    task = make_task(tmp_path / "task", budget=2)
    with FakeLLMServer(answer) as srv:
        model = ("--model", "openai-compatible:m", "--base-url", srv.openai_url)
        proc = spawn(home, "run", str(task), "--sandbox", "local", *model)
        try:
            assert arrived.wait(60), "the check's call never came"
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=20)
        finally:
            release.set()
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, out
    assert "Traceback" not in out, out
    assert not (home / "revtree.db").exists() and not (home / "runs").exists()


def test_a_ctrl_c_that_the_work_beside_swallows_still_ends_the_check(tmp_path: Path) -> None:
    """A Ctrl-C that lands where Python prints and ignores it (an import's module-lock
    callback, as the work beside imports the orchestrator) still ends the model check at
    once, as ``KeyboardInterrupt``, not after the call's timeout (CI once saw exit 2
    after the timeout, where the user had pressed Ctrl-C)."""
    import os
    import signal
    import time

    release = threading.Event()

    def answer(req: FakeRequest) -> str:
        release.wait(30)  # (bounded: the server's thread ends with the test)
        return "ok"

    def beside() -> None:  # the Ctrl-C comes and is lost, as in that callback
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            pass

    with FakeLLMServer(answer) as srv:
        t0 = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                require_models(_llm_spec(tmp_path, srv.openai_url), timeout=20, beside=beside)
        finally:
            release.set()
        assert time.monotonic() - t0 < 5  # at once, not after the 20 s timeout
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
