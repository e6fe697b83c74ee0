"""The git revision store, checked with the real ``git`` command line."""

from __future__ import annotations

import io
import itertools
import subprocess
import tarfile
from pathlib import Path

import pytest

from revtree.errors import EditError, StoreError
from revtree.memory.gitstore import EXEC_MODE, FILE_MODE, GitStore, file_mode

FILES = {
    "solver.py": b"X = 1.0\n",
    "run.sh": b"#!/bin/sh\necho run\n",
    "evaluate.py": b"print('score')\n",
    "pkg/__init__.py": b"",
    "pkg/mod.py": b"def f():\n    return 1\n",
    "data/blob.bin": bytes(range(256)) * 4,
}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "--git-dir", str(repo), *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"git {' '.join(args)} failed: {done.stderr}"
    return done.stdout


@pytest.fixture
def repo_path(tmp_path: Path) -> Path:
    return tmp_path / "revs.git"


@pytest.fixture
def store(repo_path: Path):
    s = GitStore(repo_path)
    yield s
    s.close()


@pytest.fixture
def root(store: GitStore) -> str:
    return store.commit_files(FILES, "root", modes={"run.sh": EXEC_MODE})


def test_root_commit_holds_exactly_the_files_with_modes(store, repo_path, root):
    listing = git(repo_path, "ls-tree", "-r", root)
    modes = {line.split("\t")[1]: line.split()[0] for line in listing.splitlines()}
    assert modes == {p: ("100755" if p == "run.sh" else "100644") for p in FILES}
    assert git(repo_path, "rev-list", "--parents", "-n", "1", root).split() == [root]
    assert store.read_files(root) == FILES
    assert git(repo_path, "show", f"{root}:pkg/mod.py").encode() == FILES["pkg/mod.py"]
    assert store.list_files(root)["run.sh"][1] == EXEC_MODE
    assert store.list_files(root)["solver.py"][1] == FILE_MODE


def test_commit_on_parent_changes_only_the_named_file(store, repo_path, root):
    child = store.commit(root, {"solver.py": b"X = 2.0\n"}, "set X")
    assert git(repo_path, "rev-parse", f"{child}^").strip() == root
    assert git(repo_path, "diff", "--name-only", root, child).split() == ["solver.py"]
    assert store.changed_paths(root, child) == ["solver.py"]
    before, after = store.list_files(root), store.list_files(child)
    assert {p: v for p, v in after.items() if p != "solver.py"} == {
        p: v for p, v in before.items() if p != "solver.py"
    }
    assert store.read(child, "solver.py") == b"X = 2.0\n"
    assert store.read(root, "solver.py") == b"X = 1.0\n"
    assert after["run.sh"][1] == EXEC_MODE  # an untouched file keeps its mode
    assert git(repo_path, "log", "--format=%s", child).split("\n")[:2] == ["set X", "root"]


def test_chain_of_commits_links_each_to_its_parent(store, repo_path, root):
    shas = [root]
    for i in range(3):
        shas.append(store.commit(shas[-1], {"pkg/mod.py": f"V = {i}\n".encode()}, f"step {i}"))
    for parent, child in itertools.pairwise(shas):
        assert git(repo_path, "rev-parse", f"{child}^").strip() == parent
    assert git(repo_path, "rev-list", shas[-1]).split() == shas[::-1]


def test_node_refs_keep_commits_reachable(store, repo_path, root):
    child = store.commit(root, {"solver.py": b"X = 3.0\n"}, "child")
    loser = store.commit(root, {"solver.py": b"X = -1.0\n"}, "rejected")
    store.set_node_ref(0, root)
    store.set_node_ref(1, child)
    store.set_node_ref(2, loser)
    listed = git(
        repo_path, "for-each-ref", "--format=%(refname) %(objectname)", "refs/revtree/nodes/"
    )
    assert dict(line.split() for line in listed.splitlines()) == {
        "refs/revtree/nodes/0": root,
        "refs/revtree/nodes/1": child,
        "refs/revtree/nodes/2": loser,
    }
    assert store.node_refs() == {0: root, 1: child, 2: loser}
    git(repo_path, "gc", "--prune=now", "--quiet")  # nothing referenced may be lost
    assert store.has_commit(loser)
    assert git(repo_path, "cat-file", "-t", loser).strip() == "commit"


def test_fsck_is_clean(store, repo_path, root):
    child = store.commit(
        root, {"pkg/sub/new.py": b"n = 1\n", "a.txt": b"a\n", "pkg/mod.py": None}, "mixed"
    )
    store.set_node_ref(0, root)
    store.set_node_ref(1, child)
    done = subprocess.run(
        ["git", "--git-dir", str(repo_path), "fsck", "--full", "--strict"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr.lower() and "warning" not in done.stderr.lower()


def test_diff_applies_onto_a_checkout_of_the_parent(store, root, tmp_path):
    changes = {
        "solver.py": b"X = 9.5\n",
        "pkg/new.py": b"NEW = True\n",
        "pkg/mod.py": None,
        "data/blob.bin": bytes(reversed(range(256))) * 4,
    }
    child = store.commit(root, changes, "several changes")
    patch = tmp_path / "change.patch"
    patch.write_text(store.diff(root, child))

    checkout = tmp_path / "checkout"
    _extract(store.archive(root), checkout)
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    check = subprocess.run(
        ["git", "-C", str(checkout), "apply", "--check", str(patch)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    subprocess.run(["git", "-C", str(checkout), "apply", str(patch)], check=True)
    on_disk = {
        p.relative_to(checkout).as_posix(): p.read_bytes()
        for p in checkout.rglob("*")
        if p.is_file() and ".git" not in p.parts
    }
    assert on_disk == store.read_files(child)


def test_none_deletes_a_path_and_empty_folders(store, repo_path, root):
    child = store.commit(root, {"pkg/mod.py": None, "pkg/__init__.py": None}, "drop pkg")
    assert "pkg/mod.py" not in store.list_files(child)
    assert "pkg" not in git(repo_path, "ls-tree", "--name-only", child).split()
    assert store.changed_paths(root, child) == ["pkg/__init__.py", "pkg/mod.py"]
    with pytest.raises(StoreError, match=r"pkg/mod\.py"):
        store.read(child, "pkg/mod.py")


def test_archive_overlays_protected_files_and_extracts(store, root, tmp_path):
    tampered = store.commit(root, {"evaluate.py": b"print('I win')\n"}, "tamper")
    archive = store.archive(
        tampered, overlay={"evaluate.py": FILES["evaluate.py"], "data/extra.csv": b"a,b\n"}
    )
    out = tmp_path / "ws"
    _extract(archive, out)
    assert (out / "evaluate.py").read_bytes() == FILES["evaluate.py"]
    assert (out / "data/extra.csv").read_bytes() == b"a,b\n"
    assert (out / "solver.py").read_bytes() == FILES["solver.py"]
    assert (out / "run.sh").stat().st_mode & 0o111
    assert not (out / "solver.py").stat().st_mode & 0o111
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        names = tar.getnames()
    assert len(names) == len(set(names)) == len(FILES) + 1  # replaced, not duplicated
    assert store.archive(tampered) == store.archive(tampered)  # deterministic bytes


def test_changed_paths_lists_adds_changes_and_deletions(store, root):
    child = store.commit(root, {"new.txt": b"n\n", "solver.py": b"X = 0.5\n", "run.sh": None}, "c")
    assert store.changed_paths(root, child) == ["new.txt", "run.sh", "solver.py"]
    same = store.commit(root, {"solver.py": FILES["solver.py"]}, "no-op")
    assert store.changed_paths(root, same) == []


@pytest.mark.parametrize("path", ["../x", "a/../../x", "..", "", "./"])
def test_invalid_path_is_refused(store, root, path):
    # the edit's fault, not the store's: an EditError fails the candidate, never the run
    with pytest.raises(EditError, match="invalid path"):
        store.commit(root, {path: b"x"}, "bad")
    with pytest.raises(EditError, match="invalid path"):
        store.commit_files({path: b"x"}, "bad")


def test_reopening_sees_the_commits(repo_path, store, root):
    store.set_node_ref(0, root)
    again = GitStore(repo_path)
    try:
        assert again.has_commit(root)
        assert again.node_refs() == {0: root}
        assert again.read_files(root) == FILES
        assert not again.has_commit("0" * 40)
        assert not again.has_commit("abc")
        blob = again.list_files(root)["solver.py"][0].hex()
        assert not again.has_commit(blob)
    finally:
        again.close()


def test_file_mode_of_files_on_disk(tmp_path):
    plain, script, link = tmp_path / "p.txt", tmp_path / "s.sh", tmp_path / "l"
    plain.write_text("p")
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    link.symlink_to("p.txt")
    assert (file_mode(plain), file_mode(script)) == (FILE_MODE, EXEC_MODE)
    assert file_mode(link) == 0o120000


def _extract(archive: bytes, dest: Path) -> None:
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")


def test_a_diff_between_two_commits_is_computed_once(store, root, monkeypatch):
    # a file added: a diff that git makes (a change in place is made without it)
    child = store.commit(root, {"solver.py": b"X = 2.0\n", "new.py": b"N = 1\n"}, "changes")
    first = store.diff(root, child)
    monkeypatch.setattr(store.repo, "git", None)  # a second `git diff` would raise here
    assert store.diff(root, child) == first and "X = 2.0" in first
    with pytest.raises(AttributeError):
        store.diff(child, root)  # not cached: it needs git


def test_a_new_store_holds_no_sample_hooks(repo_path):
    GitStore(repo_path)
    files = sorted(p.relative_to(repo_path).as_posix() for p in repo_path.rglob("*") if p.is_file())
    assert files == ["HEAD", "config"], files
    git(repo_path, "rev-parse", "--git-dir")  # still a repository git reads


def test_packed_objects_and_refs_read_and_move_as_loose_ones(store, repo_path, root):
    """Objects are read from their loose files here; after ``git gc`` packs them (and
    the refs), reads go through git's database, commits on them still work, and a ref
    set after packing wins over its packed line."""
    child = store.commit(root, {"solver.py": b"X = 2.0\n"}, "child")
    store.set_node_ref(0, root)
    store.set_node_ref(1, child)
    git(repo_path, "gc", "--prune=now", "--quiet")
    assert not list((repo_path / "objects").glob("??/*")), "gc left loose objects"
    assert git(repo_path, "show-ref").count("refs/revtree/nodes/") == 2  # packed
    again = GitStore(repo_path)
    try:
        assert again.read_files(root) == FILES
        assert again.read(child, "solver.py") == b"X = 2.0\n"
        assert again.changed_paths(root, child) == ["solver.py"]
        grandchild = again.commit(child, {"pkg/mod.py": None}, "on a packed parent")
        again.set_node_ref(1, grandchild)  # loose now, over the packed line
        assert again.node_refs() == {0: root, 1: grandchild}
        assert git(repo_path, "rev-parse", "refs/revtree/nodes/1").strip() == grandchild
        assert "pkg/mod.py" not in again.list_files(grandchild)
    finally:
        again.close()
    git(repo_path, "fsck", "--full", "--strict")


def test_a_ref_is_written_whole_as_git_reads_it(store, repo_path, root):
    store.set_node_ref(7, root)
    assert (repo_path / "refs/revtree/nodes/7").read_text() == root + "\n"
    assert sorted(p.name for p in (repo_path / "refs/revtree/nodes").iterdir()) == ["7"]
    assert git(repo_path, "rev-parse", "refs/revtree/nodes/7").strip() == root


def test_what_a_killed_session_left_among_the_refs_breaks_nothing(store, repo_path, root):
    """A session killed while it wrote a ref leaves git's lock file (``7.lock``): the
    next write of that ref takes it over; a stray file among the node refs is not a
    node; and a sha that is no object here is refused as GitPython refuses it."""
    nodes = repo_path / "refs/revtree/nodes"
    nodes.mkdir(parents=True)
    (nodes / "7.lock").write_text("0" * 40 + "\n")
    (nodes / "2.999.12345.tmp").write_text(root + "\n")  # a name an older writer used
    store.set_node_ref(7, root)
    assert store.node_refs() == {7: root}
    assert not (nodes / "7.lock").exists()
    with pytest.raises(ValueError):
        store.set_node_ref(8, "1" * 40)  # no such object
    assert 8 not in store.node_refs()
