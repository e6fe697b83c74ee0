"""Issue #14, the first hour of a new user: each mistake a new task folder makes is
refused with a message that names the file, the key and what to do, never a pydantic
phrase or a traceback; and what cannot enter a run (huge files, looping or escaping
symlinks) is refused before the run is created. Each user-facing case is also checked
through the CLI: ``revtree run TASK`` exits 2 with the message on stderr (in a
subprocess once, as a user runs it; in this process for the others, issue 24)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from revtree.errors import TaskSpecError
from revtree.memory import Store
from revtree.orchestrator import create_run
from revtree.tasks import code_files, load_task
from tests.conftest import TASK_TOML, write_task_folder
from tests.orchestrator.conftest import make_task, revtree, revtree_here

KNOB = '\n[[knobs]]\nname = "X"\ntype = "float"\nlow = 0.1\nhigh = 10.0\nfile = "{file}"\n'


def flat(text: str) -> str:
    """``text`` with every run of whitespace one space (rich wraps long lines)."""
    return " ".join(text.split())


def load_error(folder: Path) -> str:
    with pytest.raises(TaskSpecError) as info:
        load_task(folder)
    return flat(str(info.value))


def cli_error(tmp_path: Path, folder: Path, real: bool = False) -> str:
    """The stderr of ``revtree run folder``, which must fail with exit code 2: in this
    process (the task is refused before anything is created or run), or with ``real``
    in a subprocess (``python -m revtree``)."""
    home, args = tmp_path / "home", ("run", str(folder), "--quiet")
    if real:
        proc = revtree(home, *args, check=False, timeout=120)
    else:
        proc = revtree_here(home, *args, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "Input should be" not in proc.stderr
    return flat(proc.stderr)


def poly_task(tmp_path: Path, toml: str, **files: str) -> Path:
    toml = toml.replace('"solver.py"', '"poly.py"')
    return write_task_folder(tmp_path / "task", toml, {"poly.py": "X = 1.0\n", **files})


# -- 2. a misspelt knob file ----------------------------------------------------------

MISSPELT = "knob \"X\": file 'polyy.py' does not exist in the task folder (did you mean 'poly.py'?)"


def test_a_misspelt_knob_file_is_named_with_the_closest_file(tmp_path: Path) -> None:
    message = load_error(poly_task(tmp_path, TASK_TOML + KNOB.format(file="polyy.py")))
    assert MISSPELT in message and "key 'knobs[0].file'" in message
    assert "not an editable file" not in message


def test_a_knob_file_kept_out_by_exclude_says_so(tmp_path: Path) -> None:
    toml = TASK_TOML.replace("[evaluate]", 'exclude = ["extra.py"]\n\n[evaluate]')
    toml = toml.replace('["solver.py"]', '["*.py"]').replace('["evaluate.py"]', "[]")
    folder = write_task_folder(tmp_path / "t", toml + KNOB.format(file="extra.py"))
    (folder / "extra.py").write_text("X = 1.0\n")
    assert "'extra.py' is kept out of the run by 'exclude'" in load_error(folder)


def test_cli_names_a_misspelt_knob_file(tmp_path: Path) -> None:
    folder = poly_task(tmp_path, TASK_TOML + KNOB.format(file="polyy.py"))
    assert MISSPELT in cli_error(tmp_path, folder, real=True)


# -- 3. types: one glob for a list, and the project's phrasing for pydantic's ----------


def test_a_single_glob_string_is_a_list_of_one(tmp_path: Path) -> None:
    toml = (
        TASK_TOML.replace('["solver.py"]', '"solver.py"')
        .replace('["evaluate.py"]', '"evaluate.py"')
        .replace("[evaluate]", 'exclude = "data/*"\n\n[evaluate]')
        + '\n[holdout]\ncommand = "python holdout.py"\nfiles = "holdout.py"\n'
        + '\n[sandbox]\noutputs = "out.json"\n'
    )
    files = {"holdout.py": "print(1)\n", "data/big.csv": "1,2\n"}
    spec = load_task(write_task_folder(tmp_path / "t", toml, files))
    assert spec.editable == ("solver.py",) and spec.protected == ("evaluate.py",)
    assert spec.exclude == ("data/*",) and spec.sandbox.outputs == ("out.json",)
    assert spec.holdout is not None and spec.holdout.files == ("holdout.py",)
    assert "data/big.csv" not in code_files(spec)


TYPE_ERRORS = [
    pytest.param(
        ('editable = ["solver.py"]', "editable = 3"),
        ["key 'editable': expected a list of globs, e.g. editable = [\"*.py\"] (got 3)"],
        id="editable-number",
    ),
    pytest.param(
        ('timeout = "30s"', 'timeout = "30s"\nrepeats = "two"'),
        ["key 'evaluate.repeats': expected a whole number, e.g. 3 (got 'two')"],
        id="int",
    ),
    pytest.param(
        ('timeout = "30s"', 'timeout = "30s"\nrepeats = 2.5'),
        ["key 'evaluate.repeats': expected a whole number"],
        id="int-from-float",
    ),
    pytest.param(
        ('timeout = "30s"', 'timeout = "30s"\nstdout_metrics = "maybe"'),
        ["key 'evaluate.stdout_metrics': expected true or false (without quotes) (got 'maybe')"],
        id="bool",
    ),
    pytest.param(
        ('timeout = "30s"', 'timeout = "30s"\n\n[agents]\ntemperature = "hot"'),
        ["key 'agents.temperature': expected a number, e.g. 0.5 (got 'hot')"],
        id="float",
    ),
    pytest.param(
        ('direction = "maximize"', 'direction = "maximise"'),
        [
            "key 'evaluate.direction': expected one of 'maximize', 'minimize' "
            "(did you mean 'maximize'?) (got 'maximise')"
        ],
        id="literal",
    ),
    pytest.param(
        ('timeout = "30s"', 'timeout = "30s"\n\n[search]\npolicy = "mtcs"'),
        ["key 'search.policy': unknown policy 'mtcs': expected one of 'greedy',", "'mcts'?)"],
        id="policy",
    ),
    pytest.param(
        ('command = "python evaluate.py"', 'comand = "python evaluate.py"'),
        [
            "key 'evaluate.comand': unknown key (did you mean 'command'?)",
            "key 'evaluate.command': required key is missing",
        ],
        id="unknown-key",
    ),
    pytest.param(
        ('timeout = "30s"', 'timeout = "30s"\n\n[search]\npolicy = "mcts"\nuct = 2'),
        ["key 'search.uct': unknown key (did you mean 'uct_c'?)"],
        id="unknown-policy-key",
    ),
    pytest.param(
        ('name = "demo"', 'name = "demo"\ncolour = "red"'),
        ["key 'colour': unknown key (the keys here are: name, goal, source, editable,"],
        id="unknown-key-no-match",
    ),
    pytest.param(
        ('timeout = "30s"', 'timeout = "30s"\n\n[knobs]\nname = "X"'),
        ["key 'knobs': expected a list: write each entry as its own [[knobs]] table"],
        id="table-for-list",
    ),
]


@pytest.mark.parametrize(("edit", "expected"), TYPE_ERRORS)
def test_type_errors_say_what_was_expected(
    tmp_path: Path, edit: tuple[str, str], expected: list[str]
) -> None:
    folder = write_task_folder(tmp_path / "t", TASK_TOML.replace(*edit))
    message = load_error(folder)
    assert str(folder.resolve() / "task.toml") in message
    assert "Input should be" not in message and "Value error" not in message
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in:\n{message}"


def test_cli_phrases_a_type_error_in_the_projects_words(tmp_path: Path) -> None:
    folder = make_task(tmp_path / "task")
    toml = (folder / "task.toml").read_text()
    (folder / "task.toml").write_text(toml.replace("timeout = 20", 'timeout = 20\nrepeats = "2x"'))
    message = cli_error(tmp_path, folder)
    assert "key 'evaluate.repeats': expected a whole number, e.g. 3 (got '2x')" in message


# -- 4. a knob file that is not UTF-8 -------------------------------------------------

LATIN1 = "# r\xe9glage\nX = 1.0\n".encode("latin-1")


def test_a_knob_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    folder = poly_task(tmp_path, TASK_TOML + KNOB.format(file="poly.py"))
    (folder / "poly.py").write_bytes(LATIN1)
    message = load_error(folder)
    assert "key 'knobs[0].file': knob \"X\": file 'poly.py' is not UTF-8 text" in message
    assert "byte 0xe9 on line 1" in message and "save" in message


def test_cli_names_a_knob_file_that_is_not_utf8(tmp_path: Path) -> None:
    folder = make_task(tmp_path / "task")
    (folder / "sol.py").write_bytes(b"# \xff\n" + (folder / "sol.py").read_bytes())
    message = cli_error(tmp_path, folder)
    assert "file 'sol.py' is not UTF-8 text: byte 0xff on line 1" in message


# -- 5. what a run cannot take: huge files, looping or escaping symlinks --------------


def sparse(path: Path, size: int) -> None:
    with path.open("wb") as f:
        f.truncate(size)  # no disk blocks: a "200 MB" file costs nothing


def run_error(tmp_path: Path, folder: Path) -> str:
    store = Store(f"sqlite:///{tmp_path / 'revtree.db'}")
    try:
        spec = load_task(folder)
        with pytest.raises(TaskSpecError) as info:
            create_run(store, spec, tmp_path / "home")
        assert store.list_runs() == [] and not (tmp_path / "home" / "runs").exists()
    finally:
        store.close()
    return flat(str(info.value))


def test_a_file_over_the_size_limit_is_refused_with_how_to_exclude_it(tmp_path: Path) -> None:
    folder = write_task_folder(tmp_path / "t")
    (folder / "data").mkdir()
    sparse(folder / "data" / "big.bin", 200 * 2**20)
    message = run_error(tmp_path, folder)
    assert "'data/big.bin' is 200.0 MB, over max_file_size (50.0 MB)" in message
    assert 'exclude = ["data/big.bin"]' in message and "task.toml" in message


def test_the_size_limit_is_a_task_setting_and_exclude_lifts_it(tmp_path: Path) -> None:
    toml = TASK_TOML.replace("[evaluate]", 'max_file_size = "1k"\n\n[evaluate]')
    folder = write_task_folder(tmp_path / "t", toml, {"notes.txt": "x" * 2000})
    assert "'notes.txt' is 2.0 kB, over max_file_size (1.0 kB)" in run_error(tmp_path, folder)
    toml = toml.replace("[evaluate]", 'exclude = ["notes.txt"]\n\n[evaluate]')
    (folder / "task.toml").write_text(toml)
    store = Store(f"sqlite:///{tmp_path / 'ok.db'}")
    try:
        assert create_run(store, load_task(folder), tmp_path / "home").id
    finally:
        store.close()


LINKS = [
    pytest.param({"loop": "loop"}, "symlink 'loop' -> 'loop' is a symlink loop", id="self"),
    pytest.param({"a": "b", "b": "a"}, "symlink 'a' -> 'b' is a symlink loop", id="pair"),
    pytest.param(
        {"sub/up": ".."},
        "symlink 'sub/up' -> '..' loops: it points to a folder that holds it",
        id="to-a-parent",
    ),
    pytest.param(
        {"passwd": "/etc/passwd"},
        "symlink 'passwd' -> '/etc/passwd' points outside the task's source folder",
        id="absolute-outside",
    ),
    pytest.param(
        {"up.txt": "../outside.txt"},
        "symlink 'up.txt' -> '../outside.txt' points outside the task's source folder",
        id="relative-outside",
    ),
    pytest.param(
        {"gone": "../nowhere/at/all"},
        "symlink 'gone' -> '../nowhere/at/all' points outside",
        id="dangling-outside",
    ),
]


def add_links(folder: Path, links: dict[str, str]) -> None:
    for rel, target in links.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, folder / rel)


@pytest.mark.parametrize(("links", "expected"), LINKS)
def test_a_symlink_that_loops_or_escapes_is_refused(
    tmp_path: Path, links: dict[str, str], expected: str
) -> None:
    (tmp_path / "outside.txt").write_text("secret\n")
    folder = write_task_folder(tmp_path / "t")
    add_links(folder, links)
    message = run_error(tmp_path, folder)
    assert expected in message and "exclude = [" in message


def test_an_absolute_symlink_into_the_folder_is_refused(tmp_path: Path) -> None:
    folder = write_task_folder(tmp_path / "t")
    os.symlink(folder / "solver.py", folder / "alias.py")
    assert "symlink 'alias.py'" in run_error(tmp_path, folder)
    assert "is absolute: make it relative" in run_error(tmp_path, folder)


def test_symlinks_within_the_folder_are_still_committed_as_links(tmp_path: Path) -> None:
    folder = write_task_folder(tmp_path / "t", files={"lib/util.py": "A = 1\n"})
    add_links(folder, {"alias.py": "solver.py", "pkg": "lib", "dangling.txt": "later.txt"})
    store = Store(f"sqlite:///{tmp_path / 'revtree.db'}")
    try:
        run = create_run(store, load_task(folder), tmp_path / "home")
    finally:
        store.close()
    assert run.id


def test_cli_refuses_a_huge_file_before_creating_the_run(tmp_path: Path) -> None:
    folder = make_task(tmp_path / "task")
    sparse(folder / "weights.bin", 200 * 2**20)
    message = cli_error(tmp_path, folder)
    assert "'weights.bin' is 200.0 MB, over max_file_size (50.0 MB)" in message
    assert 'exclude = ["weights.bin"]' in message
    assert not (tmp_path / "home" / "runs").exists()


def test_cli_refuses_a_symlink_loop_and_an_escaping_symlink(tmp_path: Path) -> None:
    folder = make_task(tmp_path / "task")
    add_links(folder, {"data/self": "self", "data/secret": "/etc/passwd"})
    message = cli_error(tmp_path, folder)
    assert "symlink 'data/self' -> 'self' is a symlink loop" in message
    assert "symlink 'data/secret' -> '/etc/passwd' points outside" in message
    assert 'exclude = ["data/secret", "data/self"]' in message
