"""The measures a node carries besides its score (``orchestrator/measures.py``),
checked against the real ``git`` command line."""

from __future__ import annotations

import random
import tarfile
from pathlib import Path

from revtree.memory.gitstore import GitStore
from revtree.orchestrator.measures import changed_lines
from tests.memory.test_gitstore import FILES, git


def _numstat(repo: Path, base: str, head: str) -> int:
    """Lines added plus removed as ``git diff --numstat`` counts them (binary: none)."""
    out = git(repo, "diff", "--numstat", base, head)
    return sum(
        int(a) + int(d) for a, d, _ in (ln.split("\t") for ln in out.splitlines()) if a != "-"
    )


def test_changed_lines_count_as_git_counts_them(tmp_path: Path) -> None:
    """Seeded edits of a real module nobody wrote for this test (the standard
    library's ``tarfile.py``, 2,900 lines): lines replaced, inserted and deleted,
    a file added and one removed, a binary file changed, the last
    line's newline dropped. The count is git's own."""
    repo_path = tmp_path / "revs.git"
    store = GitStore(repo_path)
    root = store.commit_files(FILES, "root")
    text = Path(tarfile.__file__).read_bytes()
    base = store.commit(root, {"lib/tarfile.py": text}, "a real module")
    rng = random.Random(7)
    lines = text.splitlines(keepends=True)
    for _ in range(25):
        i = rng.randrange(len(lines))
        kind = rng.choice(("replace", "insert", "delete"))
        if kind == "replace":
            lines[i] = b"    x = %d\n" % rng.randrange(1000)
        elif kind == "insert":
            lines[i:i] = [b"# inserted %d\n" % rng.randrange(1000)] * rng.randint(1, 4)
        else:
            del lines[i : i + rng.randint(1, 6)]
    lines[-1] = lines[-1].rstrip(b"\n")
    edited = store.commit(
        base,
        {
            "lib/tarfile.py": b"".join(lines),
            "new.py": b"a = 1\nb = 2\n",
            "pkg/mod.py": None,
            "data/blob.bin": bytes(range(255, -1, -1)) * 4,
        },
        "edited",
    )
    assert changed_lines(store, base, edited) == _numstat(repo_path, base, edited) > 60
    assert changed_lines(store, root, edited) == _numstat(repo_path, root, edited)
    assert changed_lines(store, edited, base) == _numstat(repo_path, edited, base)
    assert changed_lines(store, base, base) == 0
    store.close()


def test_renames_carriage_returns_and_large_rewrites_count_as_git_counts_them(
    tmp_path: Path, monkeypatch
) -> None:
    """A file moved unchanged counts nothing (git's rename); a file whose lines end in
    a lone ``\\r`` is one line to git; a rewrite too large to match line by line here
    is counted by git itself (the limit lowered to make one)."""
    import revtree.memory.textdiff as textdiff
    import revtree.orchestrator.measures as measures

    repo_path = tmp_path / "revs.git"
    store = GitStore(repo_path)
    body = "".join(f"line {i}\n" for i in range(50)).encode()
    root = store.commit_files({"a.py": body, "mac.txt": b"one\rtwo\rthree\r"}, "root")
    moved = store.commit(root, {"a.py": None, "pkg/b.py": body}, "moved")
    assert changed_lines(store, root, moved) == _numstat(repo_path, root, moved) == 0
    cr = store.commit(root, {"mac.txt": b"one\rtwo\rinserted\rthree\r"}, "a lone CR")
    assert changed_lines(store, root, cr) == _numstat(repo_path, root, cr) == 2
    rewrite = store.commit(
        root, {"a.py": "".join(f"other {i}\n" for i in range(40)).encode()}, "rewritten"
    )
    expected = _numstat(repo_path, root, rewrite)
    assert changed_lines(store, root, rewrite) == expected == 90
    monkeypatch.setattr(textdiff, "MATCH_MAX", 10)
    assert measures._line_changes([b"a\n"] * 20, [b"b\n"] * 20) is None  # too costly here
    assert changed_lines(store, root, rewrite) == expected  # so counted by git
    store.close()
