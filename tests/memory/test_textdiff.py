"""The diff of text files changed in place, made without git, against the real ``git``:
on programs nobody wrote for the test (modules of the standard library) edited as a
model edits, it applies with ``git apply`` to give the new files, and where the change
can be aligned only one way it is git's own text, byte for byte."""

from __future__ import annotations

import argparse
import difflib
import json
import json.decoder
import random
import subprocess
import textwrap
from pathlib import Path

import pytest

from revtree.memory.gitstore import EXEC_MODE, GitStore

SOURCES = [Path(m.__file__).read_text() for m in (difflib, json.decoder, argparse, textwrap)]  # type: ignore[arg-type]


def git_diff(store: GitStore, base: str, head: str) -> str:
    return str(store.repo.git.diff(base, head, "--no-color", "--binary")) + "\n"


def edited(text: str, rng: random.Random, unambiguous: bool) -> str:
    """``text`` with one to four edits within 30 lines (a function rewritten, as a model
    edits): a line changed, lines inserted or removed. ``unambiguous``: only changed
    lines, unique ones (a diff of them has one alignment). (A last newline dropped:
    the markers test below.)"""
    lines = text.split("\n")
    at = rng.randrange(len(lines))
    for _ in range(rng.randint(1, 4)):
        i = min(at + rng.randrange(30), len(lines) - 1)
        op = "change" if unambiguous else rng.choice(["change", "insert", "delete", "twin"])
        if op == "change":
            lines[i] = f"{lines[i]}  # changed at {i}: é"
        elif op == "insert":
            lines[i:i] = ["    x = 1", ""]
        elif op == "delete":
            del lines[i : i + rng.randint(1, 5)]
        else:
            lines[i:i] = [lines[i]]
    return "\n".join(lines)


def changed(diff: str) -> tuple[list[str], list[str]]:
    """The lines a diff removes and adds, each sorted."""
    lines = [x for x in diff.splitlines() if not x.startswith(("---", "+++"))]
    return sorted(x[1:] for x in lines if x[:1] == "-"), sorted(
        x[1:] for x in lines if x[:1] == "+"
    )


def applied(tmp: Path, files: dict[str, str], patch: str) -> dict[str, bytes]:
    for path, text in files.items():
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp / path).write_text(text)
    done = subprocess.run(["git", "apply", "-"], cwd=tmp, input=patch.encode(), capture_output=True)
    assert done.returncode == 0, done.stderr
    return {path: (tmp / path).read_bytes() for path in files}


@pytest.mark.parametrize("unambiguous", [True, False], ids=["one alignment", "any edit"])
def test_the_diff_made_here_applies_and_is_gits_where_the_change_is_one(
    tmp_path: Path, unambiguous: bool
) -> None:
    rng = random.Random(7)
    store = GitStore(tmp_path / "r.git")
    same = 0
    for n in range(40):
        files = {f"pkg/m{i}.py": rng.choice(SOURCES) for i in range(2)}
        base = store.commit_files({p: t.encode() for p, t in files.items()}, "base")
        changes = {p: edited(t, rng, unambiguous).encode() for p, t in files.items()}
        head = store.commit(base, changes, "edited")
        ours = store._text_diff(base, head)
        assert ours is not None
        assert store.diff(base, head) == ours  # what the store answers
        (tmp_path / str(n)).mkdir()
        assert applied(tmp_path / str(n), files, ours) == changes
        theirs = git_diff(store, base, head)
        same += ours == theirs
        # as many lines removed and added as git's (as small a change); where a change
        # can be aligned two ways, twins and blank lines may be others
        assert [len(x) for x in changed(ours)] == [len(x) for x in changed(theirs)]
        if unambiguous:
            assert changed(ours) == changed(theirs)  # the very same lines
    # twins and blank lines can be aligned two ways: git slides them, difflib does not
    assert same == 40 if unambiguous else same > 0, same


def test_markers_function_lines_and_modes_are_gits(tmp_path: Path) -> None:
    store = GitStore(tmp_path / "r.git")
    long = "def x" + "é" * 39 + "():\n"  # cut at 80 bytes: between two bytes of a character
    files = {
        "a.py": "class Solver:\n" + "    pass\n" * 10 + "    X = 1\n",
        "run.sh": "#!/bin/sh\necho one\n",
        "b.py": "$dollar\n_under\n1 digit\n\tindented\n" + "\n" * 5 + "Y = 1",
        "c.py": "def f(x):   \t\r\n" + "    y = 1\n" * 5 + "    return x\n",
        "d.py": long + "    a = 1\n" * 5 + "    return a\n",
        "e.py": "E = 1\n",  # hunks of one line
        "f.py": "",  # and of none
    }
    base = store.commit_files(
        {p: t.encode() for p, t in files.items()}, "base", modes={"run.sh": EXEC_MODE}
    )
    new = {
        "a.py": files["a.py"].replace("X = 1\n", "X = 2"),  # the last newline dropped
        "run.sh": "#!/bin/sh\necho two\n",
        "b.py": files["b.py"].replace("Y = 1", "Y = 2\n"),  # and one added
        "c.py": files["c.py"].replace("return x", "return x + y"),
        "e.py": "E = 2\n",
        "f.py": "F = 1\n",
    }
    head = store.commit(base, {p: t.encode() for p, t in new.items()}, "edited")
    ours = store._text_diff(base, head)
    assert ours == git_diff(store, base, head)
    assert "\\ No newline at end of file" in ours and "@@ class Solver:" in ours
    assert "@@ _under" in ours and "100755" in ours
    assert "@@ -1 +1 @@\n-E = 1\n+E = 2\n" in ours and "@@ -0,0 +1 @@\n+F = 1\n" in ours
    # a function line cut inside a character: git says it, not us
    other = store.commit(
        base, {"d.py": files["d.py"].replace("return a", "return 2").encode()}, "d"
    )
    assert store._text_diff(base, other) is None
    assert store.diff(base, other) == git_diff(store, base, other)


def test_a_large_changed_middle_is_left_to_git(tmp_path: Path) -> None:
    """difflib's worst case grows as the cube of the lines it weighs (a data file whose
    every other line changed): past ``MATCH_MAX`` pairs, git diffs it."""
    store = GitStore(tmp_path / "r.git")
    rows = [{"id": i, "w": i * 0.5} for i in range(200)]
    before = json.dumps(rows, indent=2).encode()
    after = json.dumps([{**r, "w": r["id"] * 0.7} for r in rows], indent=2).encode()
    base = store.commit_files({"data.json": before}, "base")
    head = store.commit(base, {"data.json": after}, "every weight changed")
    assert store._text_diff(base, head) is None
    assert store.diff(base, head) == git_diff(store, base, head)


@pytest.mark.parametrize(
    "change",
    [
        {"new.py": b"N = 1\n"},  # added
        {"a.py": None},  # deleted
        {"a.py": b"A = 1\0binary\n"},  # git reads it as binary
        {"a.py": b"A = '\xff'\n"},  # not UTF-8
        {"has space.py": b"S = 2\n"},  # a path git may quote
    ],
    ids=["added", "deleted", "binary", "latin-1", "spaced path"],
)
def test_what_this_cannot_say_as_git_would_is_gits(tmp_path: Path, change: dict) -> None:
    store = GitStore(tmp_path / "r.git")
    base = store.commit_files({"a.py": b"A = 1\n", "has space.py": b"S = 1\n"}, "base")
    head = store.commit(base, change, "changed")
    assert store._text_diff(base, head) is None
    assert store.diff(base, head) == git_diff(store, base, head)
