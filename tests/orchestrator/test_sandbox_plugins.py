"""A sandbox backend of one's own, named from a task file's ``[sandbox] backend``, runs a
whole task through the real CLI (offline: the knob proposer): by import path
(``module:build``, the module in the task folder on PYTHONPATH) and by the name of an
entry point of a throwaway installed package, and one with its own ``[sandbox]`` keys (a
``Config`` beside ``build``). None touches a file of the package; a misspelt name, or a
key the backend does not take, is refused at load in one line naming the key."""

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


# The same with its own [sandbox] keys: a Config beside build, which the task's
# [sandbox] validates as and the backend gets as context.config.
CONFIGURED = TOY.replace(
    "from revtree.sandboxes.local import LocalSandbox\n",
    "from revtree.sandboxes.local import LocalSandbox\n"
    "from revtree.tasks.sandbox import SandboxBase\n",
).replace(
    "def build(context):\n",
    "class Config(SandboxBase):\n    tag: str = 'none'\n\n\n"
    "def build(context):\n"
    "    say(f'config {type(context.config).__name__} {context.config.tag}')\n",
)


def toy_task(root: Path, backend: str, keys: str = "") -> Path:
    """The knob task of conftest (5 nodes) with ``[sandbox] backend = backend`` and
    ``keys`` (lines of that table)."""
    task = make_task(root, budget=5)
    text = (task / "task.toml").read_text()
    (task / "task.toml").write_text(
        text.replace("[sandbox]\n", f'[sandbox]\nbackend = "{backend}"\n{keys}')
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


@pytest.mark.slow
def test_a_backend_with_its_own_config_runs_a_whole_task(tmp_path: Path, home: Path) -> None:
    before = package_files()
    task = toy_task(tmp_path / "t", "toysandbox:build", 'tag = "blue"\n')
    (task / "toysandbox.py").write_text(CONFIGURED)
    run_task(home, task, task)
    finished(home)
    assert "config Config blue" in (task / "used.log").read_text().splitlines()
    assert len(used(task / "used.log")) >= 5
    assert package_files() == before


def test_a_backend_with_its_own_config_refuses_a_key_it_does_not_take(
    tmp_path: Path, home: Path
) -> None:
    task = toy_task(tmp_path / "t", "toysandbox:build", 'tag = "blue"\nwarm_pool = 0\n')
    (task / "toysandbox.py").write_text(CONFIGURED)
    proc = run_task(home, task, task, check=False)
    assert proc.returncode == 2, proc
    lines = [line for line in proc.stderr.splitlines() if "key 'sandbox.warm_pool'" in line]
    assert len(lines) == 1, proc.stderr
    assert "sandbox backend 'toysandbox:build' does not take 'warm_pool'" in lines[0]
    assert "tag)" in lines[0]  # its keys, its own among them
    assert "Traceback" not in proc.stderr and not (home / "revtree.db").exists()
    assert not (task / "used.log").exists()  # refused at load: never built


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
