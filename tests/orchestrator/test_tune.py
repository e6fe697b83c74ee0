"""``revtree tune`` through the real CLI on three tiny knob tasks: it writes a profile,
a task that names the profile runs with its policy, and a typo'd name is one line."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from revtree.orchestrator.tune import improvement, split
from revtree.tasks.load import load_task
from revtree.tasks.profiles import write_profile
from tests.orchestrator.conftest import drive_here, make_task, revtree, revtree_here


def test_improvement_is_signed_by_direction() -> None:
    assert improvement(8.0, 10.0, maximize=False) == pytest.approx(0.2)
    assert improvement(12.0, 10.0, maximize=True) == pytest.approx(0.2)
    assert improvement(12.0, 10.0, maximize=False) == pytest.approx(-0.2)
    assert improvement(1.0, 0.0, maximize=True) == 1.0
    assert improvement(None, 3.0, maximize=True) == 0.0


def test_split_keeps_held_out_tasks_apart() -> None:
    train, held = split(["a", "b", "c", "d"], 2, seed=3)
    assert len(held) == 2 and not set(train) & set(held)
    assert split(["a", "b", "c", "d"], 2, seed=3) == (train, held)


def test_a_task_key_wins_over_its_profile(home: Path, tmp_path: Path) -> None:
    write_profile("p1", {"policy": "mcts", "uct_c": 2.5, "num_children": 3}, {"note": "x"})
    task = make_task(tmp_path / "t")
    text = (
        (task / "task.toml")
        .read_text()
        .replace('policy = "greedy"', 'profile = "p1"\npolicy = "mcts"\nnum_children = 6')
    )
    (task / "task.toml").write_text(text)
    search = load_task(task).search
    assert search.policy == "mcts" and search.profile == "p1"
    assert (search.uct_c, search.num_children, search.seed) == (2.5, 6, 7)  # type: ignore[union-attr]


def test_a_task_of_another_policy_takes_only_the_profiles_common_keys(
    home: Path, tmp_path: Path
) -> None:
    # the profile's greedy-only key (num_drafts) would be refused by mcts's table
    write_profile("p2", {"policy": "greedy", "num_drafts": 2, "seed": 5}, {"note": "x"})
    task = make_task(tmp_path / "t")
    text = (task / "task.toml").read_text()
    text = text.replace('policy = "greedy"', 'profile = "p2"\npolicy = "mcts"')
    (task / "task.toml").write_text(text.replace("seed = 7\n", ""))
    search = load_task(task).search
    assert (search.policy, search.seed) == ("mcts", 5)


@pytest.mark.slow
def test_tune_writes_a_profile_a_task_applies(tmp_path: Path) -> None:
    home, suite = tmp_path / "home", tmp_path / "suite"
    for name in ("a", "b", "c"):
        make_task(suite / name, budget=20)
    out = drive_here(
        home, "tune", str(suite), "--name", "mine", "--budget", "4", "--trials", "2",
        "--holdout", "1", "--seeds", "1", "--policies", "mcts,evolution",
    )  # fmt: skip
    assert "held out" in out.stdout
    profile = tomllib.loads((home / "profiles" / "mine.toml").read_text())
    assert profile["search"]["policy"] in ("mcts", "evolution")
    assert len(profile["tune"]["train"]) == 2 and len(profile["tune"]["held_out"]) == 1
    ls = revtree_here(home, "ls", check=False)
    assert "quad" not in ls.stdout  # tune's runs went to a throwaway home

    task = make_task(tmp_path / "user", budget=3)
    text = (task / "task.toml").read_text()
    head, _, tail = text.partition("[search]")
    after = tail.split("\n[", 1)[1]  # drop the task's own [search] keys
    (task / "task.toml").write_text(f'{head}[search]\nprofile = "mine"\n\n[{after}')
    drive_here(home, "run", str(task), "--quiet")
    shown = json.loads(revtree_here(home, "show", "last", "--json").stdout)
    assert shown["policy"] == profile["search"]["policy"] and shown["profile"] == "mine"

    (task / "task.toml").write_text(f'{head}[search]\nprofile = "mien"\n\n[{after}')
    bad = drive_here(home, "run", str(task), "--quiet", check=False)
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown profile 'mien'" in lines[0] and "'mine'" in lines[0]


# A sandbox backend that refuses to be built the first time (a flag file beside it says
# it has been), then builds the local backend: the first run of the tune cannot start.
FLAKY = """\
from pathlib import Path

from revtree.sandboxes.local import LocalSandbox

FLAG = Path(__file__).with_name("refused-once")


def build(context):
    if not FLAG.exists():
        FLAG.write_text("x")
        raise RuntimeError("no machine today")
    return LocalSandbox(context.base_dir)
"""


@pytest.mark.slow  # a tune of real runs: 3 s or more on 2 loaded cores
def test_a_run_that_cannot_start_fails_its_trial_and_the_tune_goes_on(tmp_path: Path) -> None:
    home, suite = tmp_path / "home", tmp_path / "suite"
    task = make_task(suite / "a", budget=20)
    text = (task / "task.toml").read_text()
    (task / "task.toml").write_text(
        text.replace("[sandbox]\n", '[sandbox]\nbackend = "flaky:build"\n')
    )
    (task / "flaky.py").write_text(FLAKY)
    out = revtree(  # a subprocess: PYTHONPATH finds the plugin sandbox
        home, "tune", str(suite), "--name", "t1", "--budget", "3", "--trials", "2",
        "--policies", "greedy", "--json", PYTHONPATH=str(task),
    )  # fmt: skip
    data = json.loads(out.stdout)
    first, second = data["trials"]
    assert first["state"] == "failed" and first["score"] is None
    assert "a (seed 0)" in first["error"] and "no machine today" in first["error"]
    assert second["state"] == "complete" and isinstance(second["score"], float)
    assert data["best"] == second["search"] and data["profile"] == "t1"
    assert tomllib.loads(Path(data["path"]).read_text())["search"] == second["search"]
    assert "failed: RuntimeError: no machine today" in out.stderr  # the run's line, apart


@pytest.mark.slow  # 9 s of --quick: a tune through the CLI (issue 24)
def test_a_tune_whose_every_trial_fails_exits_1_and_says_why(tmp_path: Path) -> None:
    home, suite = tmp_path / "home", tmp_path / "suite"
    make_task(suite / "a", budget=20, modes=("crash", "ok"))  # the baseline crashes
    out = drive_here(
        home, "tune", str(suite), "--name", "t2", "--budget", "3", "--trials", "2",
        "--policies", "greedy,mcts", "--json", check=False,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert [t["state"] for t in data["trials"]] == ["failed", "failed"]
    assert all("baseline" in t["error"] for t in data["trials"]), data["trials"]
    assert data["best"] is None and data["profile"] is None
    assert "every trial failed" in out.stderr
    assert not (home / "profiles" / "t2.toml").exists()
    text = drive_here(home, "tune", str(suite), "--budget", "3", "--trials", "1", check=False)
    assert (
        text.returncode == 1 and "trial 0: " in text.stdout and "failed: a (seed 0)" in text.stdout
    )
