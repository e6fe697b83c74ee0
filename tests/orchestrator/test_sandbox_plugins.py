"""A sandbox backend of one's own, named from a task file's ``[sandbox] backend``, runs a
whole task through the real CLI (offline: the knob proposer): by import path
(``module:build``, the module in the task folder on PYTHONPATH) and by the name of an
entry point of a throwaway installed package. Neither touches a file of the package; a
misspelt name is refused at load in one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from revtree.sandboxes import BACKENDS, Capacity, make_sandbox
from revtree.sandboxes.local import LocalSandbox
from revtree.tasks.names import SANDBOXES
from tests.orchestrator.conftest import make_task
from tests.orchestrator.test_policy_plugins import finished, install, package_files, run_task

# The local backend, recording beside itself that it was built (with which labels) and
# every command it ran: proof that the run's evaluations went through it.
TOY = """\
from pathlib import Path

from revtree.sandboxes.local import LocalSandbox

LOG = Path(__file__).with_name("used.log")


def say(line):
    with LOG.open("a") as f:
        f.write(line + "\\n")


class Recording(LocalSandbox):
    name = "recording"

    def execute(self, request, cancel=None):
        say(f"execute {request.command}")
        return super().execute(request, cancel)


def build(context):
    say(f"built {dict(context.labels or {})}")
    return Recording(context.base_dir)
"""


def toy_task(root: Path, backend: str) -> Path:
    """The knob task of conftest (5 nodes) with ``[sandbox] backend = backend``."""
    task = make_task(root, budget=5)
    text = (task / "task.toml").read_text()
    (task / "task.toml").write_text(
        text.replace("[sandbox]\n", f'[sandbox]\nbackend = "{backend}"\n')
    )
    return task


def used(log: Path) -> list[str]:
    lines = log.read_text().splitlines()
    assert any(line.startswith("built {'revtree.run': ") for line in lines), lines
    return [line for line in lines if line.startswith("execute ")]


@pytest.mark.slow
def test_a_backend_by_import_path_runs_a_whole_task(tmp_path: Path, home: Path) -> None:
    before = package_files()
    task = toy_task(tmp_path / "t", "toysandbox:build")
    (task / "toysandbox.py").write_text(TOY)
    run_task(home, task, task)
    finished(home)  # completed, its nodes recorded
    assert len(used(task / "used.log")) >= 5  # the baseline and every candidate ran there
    assert package_files() == before


@pytest.mark.slow
def test_a_backend_from_an_installed_entry_point_runs_by_name(tmp_path: Path, home: Path) -> None:
    before = package_files()
    site = install(tmp_path / "site", "toybox", TOY, "[revtree.sandboxes]\nrec = toybox\n")
    task = toy_task(tmp_path / "t", "rec")
    run_task(home, task, site)
    finished(home)
    assert len(used(site / "toybox" / "used.log")) >= 5
    assert package_files() == before


@pytest.mark.parametrize(
    ("backend", "says"),
    [
        ("dokcer", "unknown sandbox backend 'dokcer': expected one of 'auto', 'local'"),
        ("toysandbox:biuld", "module 'toysandbox' has no attribute 'biuld'"),
        ("toysandbox:", "'toysandbox:': the module has no build(context) function"),
    ],
    ids=["misspelt-name", "missing-attribute", "not-callable"],
)
def test_a_backend_that_does_not_resolve_is_refused_at_load(
    tmp_path: Path, home: Path, backend: str, says: str
) -> None:
    task = toy_task(tmp_path / "t", backend)
    (task / "toysandbox.py").write_text("from pathlib import Path\n\nbuild = Path('.')\n")
    proc = run_task(home, task, task, check=False)
    assert proc.returncode == 2, proc
    lines = [line for line in proc.stderr.splitlines() if "key 'sandbox.backend'" in line]
    assert len(lines) == 1 and says in lines[0], proc.stderr
    if backend == "dokcer":
        assert "(did you mean 'docker'?)" in lines[0]
    assert "Traceback" not in proc.stderr and not (home / "revtree.db").exists()


def test_built_ins_are_the_task_names_and_capacity_is_an_ability(tmp_path: Path) -> None:
    assert set(SANDBOXES) - {"auto"} <= set(BACKENDS)  # every task name has a module
    local = make_sandbox("local", base_dir=tmp_path, labels={"a": "b"}, gpu_pool=None)
    assert isinstance(local, LocalSandbox) and not isinstance(local, Capacity)
