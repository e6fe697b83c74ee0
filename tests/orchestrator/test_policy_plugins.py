"""A policy of one's own, named from a task file, runs a whole task through the real CLI:
by import path (``module:Class``, the module in the task folder on PYTHONPATH) and by the
name of an entry point of a throwaway installed package (a ``*.dist-info`` folder on
PYTHONPATH, which importlib.metadata finds). Neither touches a file of the package."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

import revtree
from revtree.memory import Store
from tests.orchestrator.conftest import make_task
from tests.orchestrator.conftest import revtree as cli

PACKAGE = Path(revtree.__file__).parent

# Always expands the root; its state proves that it ran and got its [search.options].
TOY = """\
from revtree.orchestrator.policies.base import PolicyDefaults, Selection


class Toy(PolicyDefaults):
    name = "toy"

    def __init__(self, seed, label="none"):
        self.seed, self.label, self.selects = seed, label, 0

    def select(self, tree):
        self.selects += 1
        return Selection(0, "draft")

    def update(self, node):
        pass

    def state(self):
        return {"policy": "toy", "selects": self.selects, "label": self.label}

    def load_state(self, state):
        self.selects = int(state.get("selects", 0))


class NoUpdate(PolicyDefaults):
    name = "no-update"

    def __init__(self, seed):
        pass

    def select(self, tree):
        return None

    def state(self):
        return {}

    def load_state(self, state):
        pass
"""


def package_files() -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in PACKAGE.rglob("*") if "__pycache__" not in p.parts}


def install(site: Path, name: str, code: str, entry_points: str) -> Path:
    """A throwaway installed distribution ``name`` under ``site`` (on PYTHONPATH,
    importlib.metadata finds it): package ``name`` holding ``code``, and a dist-info
    whose ``entry_points.txt`` is ``entry_points``."""
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text(code)
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    return site


def toy_task(root: Path, search: str, budget: int = 5) -> Path:
    """The knob task of conftest with ``[search]`` replaced by ``search`` (offline: the
    knob proposer, no model)."""
    task = make_task(root, budget=budget)
    text = (task / "task.toml").read_text()
    head, rest = text.split("[search]\n", 1)
    rest = rest.split("[budget]", 1)[1]
    (task / "task.toml").write_text(f"{head}{textwrap.dedent(search)}\n[budget]{rest}")
    return task


def run_task(
    home: Path, task: Path, path: Path, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``revtree run TASK`` in a subprocess, local sandbox, ``path`` on PYTHONPATH."""
    args = ("run", str(task), "--quiet", "--db", f"sqlite:///{home / 'revtree.db'}")
    return cli(home, *args, check=check, REVTREE_SANDBOX="local", PYTHONPATH=str(path))


def finished(home: Path) -> tuple[dict[str, object], list[int]]:
    """The last run's policy state and its nodes' parents (the baseline left out)."""
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    try:
        (run,) = store.list_runs()
        nodes = [n for n in store.nodes(run.id) if n.id != 0]
        assert run.status == "completed", run
        return dict(run.policy_state or {}), [n.parent_id for n in nodes]
    finally:
        store.close()


@pytest.mark.slow  # 7-9 s: a whole run in a subprocess
def test_a_policy_by_import_path_runs_a_whole_task(tmp_path: Path, home: Path) -> None:
    before = package_files()
    task = toy_task(
        tmp_path / "t",
        """\
        [search]
        policy = "toypolicy:Toy"
        seed = 7

        [search.options]
        label = "from the task file"
        """,
    )
    (task / "toypolicy.py").write_text(TOY)
    run_task(home, task, task)
    state, parents = finished(home)
    assert state == {"policy": "toy", "selects": 4, "label": "from the task file"}
    assert parents == [0, 0, 0, 0]  # the toy's choices, not greedy's
    assert package_files() == before


@pytest.mark.slow  # 7-9 s: a whole run in a subprocess
def test_a_policy_from_an_installed_entry_point_runs_by_name(tmp_path: Path, home: Path) -> None:
    before = package_files()
    site = install(tmp_path / "site", "toyplug", TOY, "[revtree.policies]\ntoy = toyplug:Toy\n")
    task = toy_task(tmp_path / "t", '[search]\npolicy = "toy"\nseed = 7\n')
    run_task(home, task, site)
    state, parents = finished(home)
    assert state == {"policy": "toy", "selects": 4, "label": "none"}
    assert parents == [0, 0, 0, 0]
    assert package_files() == before


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ("toypolcy:Toy", "cannot import module 'toypolcy' (ModuleNotFoundError"),
        ("toypolicy:Tyo", "module 'toypolicy' has no attribute 'Tyo'"),
        ("toypolicy:NoUpdate", "lacks the method(s) update of the Policy protocol"),
        ("toy", "unknown policy 'toy': expected one of 'greedy'"),
    ],
    ids=["module-typo", "missing-attribute", "missing-method", "no-entry-point"],
)
def test_a_policy_that_does_not_resolve_is_refused_at_load(
    tmp_path: Path, home: Path, policy: str, says: str
) -> None:
    task = toy_task(tmp_path / "t", f'[search]\npolicy = "{policy}"\n')
    (task / "toypolicy.py").write_text(TOY)
    proc = run_task(home, task, task, check=False)
    assert proc.returncode == 2, proc
    err = proc.stderr
    lines = [line for line in err.splitlines() if "key 'search.policy'" in line]
    assert len(lines) == 1 and says in lines[0], err
    assert "Traceback" not in err and not (home / "revtree.db").exists()


def test_options_that_do_not_fit_the_constructor_are_refused(tmp_path: Path, home: Path) -> None:
    task = toy_task(tmp_path / "t", '[search]\npolicy = "toypolicy:Toy"\noptions = { lable = 1 }')
    (task / "toypolicy.py").write_text(TOY)
    proc = run_task(home, task, task, check=False)
    err = proc.stderr
    assert proc.returncode == 2 and "key 'search.options'" in err, err
    assert "unexpected keyword argument 'lable'" in err
