"""The task.toml format: a valid folder loads; each malformed one names file and key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from revtree.errors import TaskSpecError
from revtree.tasks import load_task, parse_duration, parse_size
from revtree.tasks.spec import GreedySearch, RandomSearch

KNOBS = """
[[knobs]]
name = "X"
type = "float"
low = 0.1
high = 10.0
log = true
file = "solver.py"

[[knobs]]
name = "N"
type = "int"
low = 1
high = 16
file = "solver.py"

[[knobs]]
name = "mode"
type = "categorical"
choices = ["fast", "slow"]
variable = "MODE"
file = "solver.py"
"""


def task_toml(
    top: str = "",
    evaluate: str = 'metric = "score"\ndirection = "maximize"\ntimeout = "30s"',
    rest: str = "",
    command: str = 'command = "python evaluate.py"',
    editable: str = '["solver.py"]',
    protected: str = '["evaluate.py"]',
) -> str:
    return (
        f'name = "demo"\neditable = {editable}\nprotected = {protected}\n{top}\n\n'
        f"[evaluate]\n{command}\n{evaluate}\n\n{rest}\n"
    )


def knob(**fields: object) -> str:
    base: dict[str, object] = {
        "name": "X",
        "type": "float",
        "low": 0.1,
        "high": 10.0,
        "file": "solver.py",
    }
    base.update(fields)
    lines = [f"{k} = {_toml_value(v)}" for k, v in base.items() if v is not None]
    return "[[knobs]]\n" + "\n".join(lines) + "\n"


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return str(v)


def test_valid_spec_loads(write_task):
    folder = write_task(task_toml(rest=KNOBS))
    spec = load_task(folder)
    assert spec.name == "demo"
    assert spec.root == str(folder.resolve())
    assert spec.editable == ("solver.py",) and spec.protected == ("evaluate.py",)
    assert spec.evaluate.timeout == 30.0 and spec.evaluate.repeats == 1
    assert spec.maximize
    assert isinstance(spec.search, GreedySearch)
    assert [k.name for k in spec.knobs] == ["X", "N", "mode"]
    assert spec.knobs[2].target == "MODE" and spec.knobs[0].target == "X"
    assert load_task(folder / "task.toml") == spec
    with pytest.raises(ValidationError):
        spec.name = "other"  # type: ignore[misc]


def test_missing_task_file_names_the_path(tmp_path):
    with pytest.raises(TaskSpecError, match=r"task\.toml"):
        load_task(tmp_path / "nowhere")


MALFORMED = [
    pytest.param(
        'name = "demo"\neditable = solver.py\n',
        {},
        ["not valid TOML", "line 2"],
        id="invalid-toml",
    ),
    pytest.param(
        task_toml(top='colour = "red"'),
        {},
        ["key 'colour'", "unknown key"],
        id="unknown-top-level-key",
    ),
    pytest.param(
        task_toml(command='comand = "python evaluate.py"'),
        {},
        ["key 'evaluate.comand'", "unknown key", "key 'evaluate.command'", "missing"],
        id="typo-in-evaluate",
    ),
    pytest.param(
        task_toml(evaluate='direction = "maximize"'),
        {},
        ["key 'evaluate.metric'", "required key is missing"],
        id="missing-metric",
    ),
    pytest.param(
        task_toml(evaluate='metric = "score"\ndirection = "up"'),
        {},
        ["key 'evaluate.direction'", "'maximize'", "'minimize'", "'up'"],
        id="bad-direction",
    ),
    pytest.param(
        task_toml(evaluate='metric = "s"\ndirection = "minimize"\ntimeout = -5'),
        {},
        ["key 'evaluate.timeout'", "positive duration"],
        id="negative-timeout",
    ),
    pytest.param(
        task_toml(evaluate='metric = "s"\ndirection = "minimize"\ntimeout = 0'),
        {},
        ["key 'evaluate.timeout'", "positive duration"],
        id="zero-timeout",
    ),
    pytest.param(
        task_toml(evaluate='metric = "s"\ndirection = "minimize"\ntimeout = "5 min"'),
        {},
        ["key 'evaluate.timeout'", "'90s'", "'5 min'"],
        id="bad-duration-string",
    ),
    pytest.param(
        task_toml(evaluate='metric = "s"\ndirection = "minimize"\nrepeats = 0'),
        {},
        ["key 'evaluate.repeats'", "greater than or equal to 1"],
        id="zero-repeats",
    ),
    pytest.param(
        task_toml(rest=knob(low=5, high=1)),
        {},
        ["key 'knobs[0]'", "'low' (5.0) must be below 'high' (1.0)"],
        id="knob-low-above-high",
    ),
    pytest.param(
        task_toml(rest=knob(low=2, high=2)),
        {},
        ["key 'knobs[0]'", "must be below 'high'"],
        id="knob-low-equals-high",
    ),
    pytest.param(
        task_toml(rest=knob(low=0, high=1, log=True)),
        {},
        ["key 'knobs[0]'", "log-scale", "'low' > 0"],
        id="log-knob-low-zero",
    ),
    pytest.param(
        task_toml(rest=knob(type="categorical", low=None, high=None, variable="MODE")),
        {},
        ["key 'knobs[0]'", "categorical", "'choices'"],
        id="categorical-without-choices",
    ),
    pytest.param(
        task_toml(rest=knob(pattern=r"^X = .*$")),
        {},
        ["key 'knobs[0]'", "'pattern'", "exactly one group"],
        id="pattern-without-group",
    ),
    pytest.param(
        task_toml(rest=knob(name="Y")),
        {},
        ["key 'knobs[0]'", "'Y = ...'", "not found in solver.py"],
        id="knob-variable-not-in-file",
    ),
    pytest.param(
        task_toml(rest=knob(file="evaluate.py")),
        {},
        ["key 'knobs[0].file'", "'evaluate.py'", "not an editable file"],
        id="knob-file-not-editable",
    ),
    pytest.param(
        task_toml(editable='["*.rs"]'),
        {},
        ["key 'editable'", "'*.rs'", "matches no file"],
        id="editable-glob-matches-nothing",
    ),
    pytest.param(
        task_toml(protected='["evaluate.py", "solver.py"]'),
        {},
        ["key 'protected'", "'solver.py'", "editable"],
        id="editable-and-protected",
    ),
    pytest.param(
        task_toml(rest='[search]\npolicy = "annealing"\n'),
        {},
        ["key 'search.policy'", "'annealing'", "'greedy'", "'random'", "'optuna'"],
        id="unknown-policy",
    ),
    pytest.param(
        task_toml(rest='[search]\npolicy = "greedy"\ntemperature = 0.7\n'),
        {},
        ["key 'search.temperature'", "unknown key"],
        id="unknown-greedy-key",
    ),
    pytest.param(
        task_toml(rest='[sandbox]\nenv = { OPENAI_API_KEY = "sk-x", OK = "1" }\n'),
        {},
        ["key 'sandbox.env'", "OPENAI_API_KEY", "secrets"],
        id="secret-in-env",
    ),
    pytest.param(
        task_toml(rest='[sandbox]\npass_env = ["GITHUB_TOKEN"]\n'),
        {},
        ["key 'sandbox.pass_env'", "GITHUB_TOKEN"],
        id="secret-in-pass-env",
    ),
    pytest.param(
        task_toml(rest=knob() + knob()),
        {},
        ["key 'knobs'", "unique", "'X'"],
        id="duplicate-knob-names",
    ),
    pytest.param(
        task_toml(top='source = "src"'),
        {},
        ["key 'source'", "does not exist"],
        id="source-folder-missing",
    ),
]


@pytest.mark.parametrize(("toml", "files", "expected"), MALFORMED)
def test_malformed_spec_names_file_and_key(write_task, toml, files, expected):
    folder = write_task(toml, files)
    with pytest.raises(TaskSpecError) as info:
        load_task(folder)
    message = str(info.value)
    assert str(folder.resolve() / "task.toml") in message
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in:\n{message}"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("90s", 90.0), ("10m", 600.0), ("2h", 7200.0), (2, 2.0), (1.5, 1.5), ("45", 45.0)],
)
def test_parse_duration(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["soon", "10x", "", -1, 0, True, None, "-5s"])
def test_parse_duration_rejects(value):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("value", "size"),
    [("512m", 512 * 2**20), ("2g", 2 * 2**30), ("2G", 2 * 2**30), ("64k", 65536), (1024, 1024)],
)
def test_parse_size(value, size):
    assert parse_size(value) == size


@pytest.mark.parametrize("value", ["lots", 0, -1, True, "0m"])
def test_parse_size_rejects(value):
    with pytest.raises(ValueError, match="size"):
        parse_size(value)


def test_with_overrides_switches_policy_and_keeps_seed_and_parallel(write_task):
    search = '[search]\npolicy = "greedy"\nseed = 7\nparallel = 3\nnum_drafts = 5\n'
    search += "novelty_threshold = 0.9\n"  # a key of every policy: kept too (issue 27)
    spec = load_task(write_task(task_toml(rest=search + "[budget]\nmax_nodes = 20\n")))
    assert isinstance(spec.search, GreedySearch) and spec.search.num_drafts == 5

    forked = spec.with_overrides(search={"policy": "random"}, budget={"max_wall": "1h"})
    assert isinstance(forked.search, RandomSearch)
    assert (forked.search.seed, forked.search.parallel) == (7, 3)
    assert forked.search.novelty_threshold == 0.9
    assert forked.budget.max_nodes == 20 and forked.budget.max_wall == 3600.0
    assert forked.root == spec.root and forked.evaluate == spec.evaluate
    assert isinstance(spec.search, GreedySearch)  # the original is unchanged

    same_policy = spec.with_overrides(search={"seed": 11})
    assert isinstance(same_policy.search, GreedySearch)
    assert (same_policy.search.seed, same_policy.search.num_drafts) == (11, 5)

    with pytest.raises(TaskSpecError, match=r"search\.num_drafts"):
        spec.with_overrides(search={"policy": "random", "num_drafts": 2})


def test_search_table_without_policy_means_greedy(write_task):
    spec = load_task(write_task(task_toml(rest="[search]\nseed = 3\nnum_drafts = 2\n")))
    assert isinstance(spec.search, GreedySearch)
    assert (spec.search.seed, spec.search.num_drafts) == (3, 2)


GRADED = 'metric = "score"\ndirection = "maximize"\ntimeout = "30s"\noutputs = ["answers.json"]\n'
GRADE = '[evaluate.grade]\ncommand = "python grade.py"\n'


def test_a_grade_step_loads_with_its_outputs(write_task):
    holdout = (
        '[holdout]\ncommand = "python evaluate.py"\n\n'
        '[holdout.grade]\ncommand = "python grade.py --holdout"\ntimeout = "5s"\n'
    )
    folder = write_task(task_toml(evaluate=GRADED, rest=GRADE + "timeout = 7\n\n" + holdout))
    spec = load_task(folder)
    ev = spec.evaluate
    assert ev.grade is not None and ev.grade.command == "python grade.py"
    assert ev.outputs == ("answers.json",) and ev.grade_timeout == 7.0
    assert not ev.forgeable and not ev.stdout_metrics
    assert spec.holdout is not None and spec.holdout.grade is not None
    assert spec.holdout_outputs == ("answers.json",)  # defaults to evaluate.outputs
    assert load_task(write_task(name="plain")).evaluate.forgeable


@pytest.mark.parametrize(
    ("evaluate", "rest", "expected"),
    [
        pytest.param(GRADED, "", "outputs is set but there is no [evaluate.grade]", id="no-grade"),
        pytest.param(
            'metric = "score"\ndirection = "maximize"\n',
            GRADE,
            "[evaluate.grade] needs outputs",
            id="no-outputs",
        ),
        pytest.param(
            GRADED.replace("answers.json", "../answers.json"), GRADE, "no '..'", id="traversal"
        ),
        pytest.param(
            GRADED.replace("answers.json", "/tmp/answers.json"), GRADE, "relative", id="absolute"
        ),
        pytest.param(
            GRADED,
            GRADE + '\n[holdout]\ncommand = "x"\noutputs = ["a.json"]\n',
            "holdout.outputs is set but there is no [holdout.grade]",
            id="holdout-outputs-without-grade",
        ),
        pytest.param(
            'metric = "score"\ndirection = "maximize"\n',
            '[[evaluate.stages]]\nname = "q"\ncommand = "x"\nthreshold = 1\ngrade = "g"\n',
            "there is no [evaluate.grade]",
            id="stage-grade-without-grade",
        ),
    ],
)
def test_grade_step_errors_say_what_to_do(write_task, evaluate, rest, expected):
    with pytest.raises(TaskSpecError) as err:
        load_task(write_task(task_toml(evaluate=evaluate, rest=rest)))
    assert expected in str(err.value) and "task.toml" in str(err.value)
