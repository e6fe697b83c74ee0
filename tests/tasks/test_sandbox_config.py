"""``[sandbox]`` is one model per backend, told apart by ``backend``: a key that the
named backend does not take (Docker's ``image`` under ``local``) is refused at load in
one line naming the key, the backend and whose key it is, through the CLI too (exit 2);
``auto`` takes every built-in's keys and the backend it picks gets its own; a backend
that is not built in is validated as the ``Config`` beside its ``build``, else as the
common keys only."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from revtree.errors import TaskSpecError
from revtree.sandboxes import make_sandbox
from revtree.sandboxes.registry import BUILTIN as MODULES
from revtree.tasks import load_task
from revtree.tasks.sandbox import (
    BUILTIN,
    AutoConfig,
    DockerConfig,
    LocalConfig,
    SandboxBase,
    narrow,
)
from tests.conftest import TASK_TOML, write_task_folder
from tests.orchestrator.conftest import revtree_here

# a backend of one's own with its own keys, and one that declares none
CONFIGURED = """\
from revtree.sandboxes.local import LocalSandbox
from revtree.tasks.sandbox import SandboxBase

SEEN = []


class Config(SandboxBase):
    speed: int = 1


def build(context):
    SEEN.append(context.config)
    return LocalSandbox(context.base_dir)
"""
BARE = CONFIGURED.replace("class Config(SandboxBase):", "class Keys(SandboxBase):")


def task(tmp_path: Path, sandbox: str) -> Path:
    return write_task_folder(tmp_path / "t", f"{TASK_TOML}\n[sandbox]\n{sandbox}\n")


def refused(folder: Path) -> str:
    with pytest.raises(TaskSpecError) as info:
        load_task(folder)
    lines = str(info.value).splitlines()
    assert len(lines) == 2 and "1 problem(s)" in lines[0], lines  # the file, one problem
    return lines[1].strip()


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    (site / "configured.py").write_text(CONFIGURED)
    (site / "bare.py").write_text(BARE)
    monkeypatch.syspath_prepend(str(site))
    return site


def test_a_docker_key_under_local_is_refused_at_load(tmp_path: Path) -> None:
    line = refused(task(tmp_path, 'backend = "local"\nimage = "python:3.12"'))
    assert line.startswith("key 'sandbox.image': sandbox backend 'local' does not take 'image'")
    assert "(a key of 'docker'; its keys: memory, cpu_seconds, output_cap" in line
    assert "warm_pool" not in line  # the keys listed are local's


def test_a_docker_key_under_local_exits_2_through_the_cli(tmp_path: Path) -> None:
    folder = task(tmp_path, 'backend = "bwrap"\nwarm_pool = 0')
    proc = revtree_here(tmp_path / "home", "run", str(folder), "--quiet", check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = " ".join(proc.stderr.split())
    assert "key 'sandbox.warm_pool': sandbox backend 'bwrap' does not take 'warm_pool'" in said
    assert "Traceback" not in proc.stderr


def test_each_backend_validates_as_its_own_model(tmp_path: Path) -> None:
    assert type(load_task(task(tmp_path, "")).sandbox) is AutoConfig  # the default
    spec = load_task(task(tmp_path / "a", 'image = "x"\ngpus = 1'))  # auto: docker's keys too
    assert isinstance(spec.sandbox, AutoConfig) and spec.sandbox.image == "x"
    spec = load_task(task(tmp_path / "b", 'backend = "local"\nmemory = "1g"'))
    assert type(spec.sandbox) is LocalConfig and spec.sandbox.memory == 2**30
    line = refused(task(tmp_path / "c", 'backend = "docker"\nimgae = "x"'))
    assert "does not take 'imgae' (did you mean 'image'?)" in line


def test_auto_takes_the_keys_of_every_built_in_and_each_module_declares_its_own() -> None:
    built_ins = [name for name in BUILTIN if name != "auto"]
    union = set().union(*(BUILTIN[name].model_fields for name in built_ins))
    assert set(AutoConfig.model_fields) == union
    for name in built_ins:  # the model beside each built-in's build
        assert importlib.import_module(MODULES[name]).Config is BUILTIN[name]


def test_the_picked_backend_gets_its_own_keys_and_an_override_keeps_them(
    tmp_path: Path, plugins: Path
) -> None:
    config = AutoConfig(image="x", gpus=1, memory="1g")
    local = narrow(config, "local")
    assert type(local) is LocalConfig and local.memory == 2**30 and "image" not in local.__dict__
    docker = narrow(config, "docker")
    assert type(docker) is DockerConfig and (docker.image, docker.gpus) == ("x", 1)
    make_sandbox("configured:build", config=config).close()  # the registry narrows it
    import configured  # type: ignore[import-not-found]

    assert type(configured.SEEN[-1]) is configured.Config and configured.SEEN[-1].speed == 1
    spec = load_task(task(tmp_path, 'backend = "docker"\nimage = "x"\nmemory = "1g"'))
    over = spec.with_overrides(sandbox={"backend": "local"})  # --sandbox local
    assert type(over.sandbox) is LocalConfig and over.sandbox.memory == 2**30
    assert spec.with_overrides(sandbox={"backend": "auto"}).sandbox.image == "x"  # type: ignore[union-attr]


def test_a_plugin_backend_validates_as_the_config_beside_its_build(
    tmp_path: Path, plugins: Path
) -> None:
    spec = load_task(task(tmp_path, 'backend = "configured:build"\nspeed = 3'))
    assert type(spec.sandbox).__name__ == "Config" and spec.sandbox.speed == 3  # type: ignore[union-attr]
    assert isinstance(spec.sandbox, SandboxBase) and spec.sandbox.backend == "configured:build"
    stored = spec.model_dump(mode="json")  # as a run stores it, and wires it again
    assert stored["sandbox"]["speed"] == 3
    assert type(spec.model_validate(stored).sandbox) is type(spec.sandbox)
    line = refused(task(tmp_path / "a", 'backend = "configured:build"\nimage = "x"'))
    assert line == (
        "key 'sandbox.image': sandbox backend 'configured:build' does not take 'image' "
        "(its keys: memory, cpu_seconds, output_cap, env, pass_env, speed)"
    )


def test_a_plugin_backend_without_a_config_takes_the_common_keys_only(
    tmp_path: Path, plugins: Path
) -> None:
    spec = load_task(task(tmp_path, 'backend = "bare:build"\nmemory = "1g"'))
    assert type(spec.sandbox) is SandboxBase and spec.sandbox.memory == 2**30
    line = refused(task(tmp_path / "a", 'backend = "bare:build"\nspeed = 3'))
    assert line.startswith("key 'sandbox.speed': sandbox backend 'bare:build' does not take")
    (plugins / "wrong.py").write_text(BARE.replace("class Keys(SandboxBase)", "class Config"))
    line = refused(task(tmp_path / "b", 'backend = "wrong:build"'))
    assert "key 'sandbox.backend'" in line and "Config is not a subclass of" in line


# what the one [sandbox] model of the previous version stored for every backend
OLD_DOCKER_KEYS = {
    "image": None,
    "cpus": None,
    "gpus": 0,
    "network": "none",
    "mounts": {},
    "warm_pool": 0,
    "outputs": [],
    "disk": 512 * 2**20,
}


@pytest.mark.slow  # a run through the CLI, then resume, show and fork of it
def test_a_run_stored_by_the_previous_version_still_opens(tmp_path: Path) -> None:
    from revtree.memory import Store
    from tests.orchestrator.conftest import revtree

    home = tmp_path / "home"
    folder = task(tmp_path, 'backend = "local"')
    text = (folder / "task.toml").read_text() + "\n[budget]\nmax_nodes = 2\n"
    (folder / "task.toml").write_text(text)
    revtree(home, "run", str(folder), "--quiet", "--sandbox", "local")
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    (run,) = store.list_runs()
    spec = dict(run.spec)
    spec["sandbox"] = {**spec["sandbox"], **OLD_DOCKER_KEYS}  # as the old version stored it
    store.update_run(run.id, spec=spec)
    store.close()
    for args in (
        ["show", run.id, "--json"],
        ["resume", run.id, "--quiet"],
        ["export", run.id, "--patch", str(tmp_path / "best.patch")],
    ):
        proc = revtree(home, *args, check=False)
        assert proc.returncode == 0, (args, proc.stderr)
    # an auto run stores every built-in's keys; forked onto local, it keeps local's only
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    store.update_run(run.id, spec={**spec, "sandbox": {**spec["sandbox"], "backend": "auto"}})
    store.close()
    proc = revtree(
        home,
        "fork",
        run.id,
        "--node",
        "0",
        "--set",
        "sandbox.backend=local",
        "--quiet",
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
