"""OpenEvolve folders: loaded into a TaskSpec, and their generated runner run for real."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from revtree.errors import TaskSpecError
from revtree.tasks import code_files, load_task
from revtree.tasks.compat import load_openevolve

from .conftest import EXAMPLES, run, workspace, write_folder

EXAMPLE = EXAMPLES / "openevolve-function-minimization"
PROGRAM = """\
# EVOLVE-BLOCK-START
X = 0.25
# EVOLVE-BLOCK-END
"""
EVALUATOR = """\
import importlib.util


def load(path):
    spec = importlib.util.spec_from_file_location("program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluate(program_path):
    return {"combined_score": load(program_path).X, "note": "plain dict"}
"""


def folder(tmp_path: Path, evaluator: str = EVALUATOR, config: str | None = None) -> Path:
    files = {"initial_program.py": PROGRAM, "evaluator.py": evaluator}
    if config is not None:
        files["config.yaml"] = config
    return write_folder(tmp_path / "oe_task", files)


def test_example_maps_onto_a_task() -> None:
    spec, warnings, mapped = load_openevolve(EXAMPLE)
    assert spec.name == "openevolve-function-minimization"
    assert spec.root == str(EXAMPLE.resolve())
    assert spec.editable == ("initial_program.py",) and spec.protected == ("evaluator.py",)
    ev = spec.evaluate
    assert (ev.metric, ev.direction, ev.timeout) == ("combined_score", "maximize", 30.0)
    assert ev.command == "python _revtree_openevolve_runner.py evaluate"
    # evaluate_stage2 only returns evaluate(program_path): it is not run twice
    assert [(s.name, s.command, s.threshold) for s in ev.stages] == [
        ("stage1", "python _revtree_openevolve_runner.py evaluate_stage1", 0.5)
    ]
    assert (spec.search.seed, spec.search.parallel, spec.budget.max_nodes) == (42, 2, 21)
    assert spec.goal.startswith("You are an expert in optimisation algorithms.")
    assert set(spec.support_files) == {
        "_revtree_openevolve_runner.py",
        "_revtree_compat/openevolve/__init__.py",
        "_revtree_compat/openevolve/evaluation_result.py",
    }
    assert "config.yaml" not in code_files(spec)
    assert ev.cascade == "keep" and spec.agents.one_call
    a = spec.agents
    assert (a.model, a.temperature, a.max_tokens) == ("openai:gpt-4o-mini", 0.7, 4096)
    assert spec.search.policy == "evolution" and spec.search.num_islands == 3
    # only the key without a counterpart is warned about; the start lists what was mapped
    assert warnings == [
        f"{EXAMPLE / 'config.yaml'}: settings without a revtree counterpart, ignored: log_level"
    ]
    text = ", ".join(mapped)
    for key in (
        "max_iterations",
        "random_seed",
        "evaluator.timeout",
        "cascade_thresholds",
        "llm.primary_model",
        "llm.temperature",
        "database.num_islands",
        "prompt.system_message",
    ):
        assert key in text


def test_load_task_dispatches_warns_and_notes_the_mapping() -> None:
    from revtree.tasks.compat import CompatNote

    with pytest.warns(UserWarning) as record:
        spec = load_task(EXAMPLE)
    loaded = load_openevolve(EXAMPLE)
    problems = [str(w.message) for w in record if w.category is not CompatNote]
    notes = [str(w.message) for w in record if w.category is CompatNote]
    assert (spec, problems) == (loaded.spec, loaded.warnings)
    assert len(notes) == 1 and "llm.primary_model -> agents.model" in notes[0]


def test_a_task_toml_takes_precedence(tmp_path: Path) -> None:
    root = folder(tmp_path)
    (root / "task.toml").write_text(
        'name = "native"\neditable = ["initial_program.py"]\n'
        '[evaluate]\ncommand = "python evaluator.py"\nmetric = "s"\ndirection = "minimize"\n'
    )
    spec = load_task(root)
    assert spec.name == "native" and spec.support_files == {}


def test_a_bare_folder_gets_openevolve_defaults_and_no_warnings(tmp_path: Path) -> None:
    spec, warnings, _ = load_openevolve(folder(tmp_path))
    assert warnings == []
    assert spec.name == "oe_task" and spec.evaluate.stages == ()
    assert spec.evaluate.timeout == 300.0  # OpenEvolve's default
    assert spec.search.seed == 0 and spec.budget.max_nodes == 50  # revtree's defaults
    assert "EVOLVE-BLOCK" in spec.goal and "combined_score" in spec.goal


STAGE1 = "\n\ndef evaluate_stage1(program_path):\n    return {'combined_score': 1.0}\n"
STAGE2 = "\n\ndef evaluate_stage2(program_path):\n    return {'combined_score': 0.9}\n"
STAGE3 = "\n\ndef evaluate_stage3(program_path):\n    return {'combined_score': 0.8}\n"


@pytest.mark.parametrize(
    ("extra", "config", "stages", "note"),
    [
        pytest.param(STAGE1, None, [("stage1", 0.5)], None, id="stage1-default-threshold"),
        pytest.param(
            STAGE1 + STAGE2,
            "evaluator:\n  cascade_thresholds: [0.3, 0.6]\n",
            [("stage1", 0.3), ("stage2", 0.6)],
            None,
            id="two-stages",
        ),
        pytest.param(
            STAGE1 + "\nevaluate_stage2 = evaluate\n",
            None,
            [("stage1", 0.5)],
            None,
            id="stage2-alias-of-evaluate",
        ),
        pytest.param(
            STAGE1 + STAGE2,
            "evaluator:\n  cascade_evaluation: false\n",
            [],
            None,
            id="cascade-off",
        ),
        pytest.param(
            STAGE1 + STAGE2,
            "evaluator:\n  cascade_thresholds: [0.4]\n",
            [("stage1", 0.4)],
            "evaluate_stage2 is not run",
            id="no-threshold-for-stage2",
        ),
        pytest.param(
            STAGE1 + STAGE3, None, [("stage1", 0.5)], "evaluate_stage3 is not run", id="stage3"
        ),
        pytest.param(STAGE2, None, [], None, id="no-stage1-no-cascade"),
    ],
)
def test_cascade_mapping(
    tmp_path: Path,
    extra: str,
    config: str | None,
    stages: list[tuple[str, float]],
    note: str | None,
) -> None:
    spec, warnings, _ = load_openevolve(folder(tmp_path, EVALUATOR + extra, config))
    assert [(s.name, s.threshold) for s in spec.evaluate.stages] == stages
    for s in spec.evaluate.stages:
        assert s.command == f"python _revtree_openevolve_runner.py evaluate_{s.name}"
    if note is None:
        assert warnings == []
    else:
        assert any(note in w and "evaluator.py" in w for w in warnings), warnings


def test_api_keys_are_never_echoed_nor_copied(tmp_path: Path) -> None:
    config = """\
    llm:
      api_key: sk-do-not-leak-1234
      models:
        - name: gpt-4o
          api_key: sk-do-not-leak-5678
    evaluator:
      max_retries: 2
    diff_based_evolution: true
    """
    spec, warnings, _ = load_openevolve(folder(tmp_path, config=config))
    text = "\n".join(warnings)
    assert "sk-do-not-leak" not in text
    assert "API keys in config.yaml are never read" in text
    for key in ("llm.api_key", "llm.models[0].api_key", "evaluator.max_retries"):
        assert key in text
    assert "diff_based_evolution" not in text  # mapped: true is revtree's default
    assert spec.agents.model == "openai:gpt-4o"
    assert "config.yaml" not in code_files(spec)
    assert "sk-do-not-leak" not in json.dumps(spec.model_dump(mode="json"))


MALFORMED = [
    pytest.param(
        "def score(program_path):\n    return {}\n",
        None,
        "evaluator.py",
        ["defines no function 'evaluate(program_path)'"],
        id="no-evaluate",
    ),
    pytest.param(
        "def evaluate(program_path)\n    return {}\n",
        None,
        "evaluator.py",
        ["not valid Python", "line 1"],
        id="evaluator-syntax-error",
    ),
    pytest.param(EVALUATOR, "- 1\n- 2\n", "config.yaml", ["mapping", "list"], id="not-a-mapping"),
    pytest.param(EVALUATOR, "evaluator: [1, 2\n", "config.yaml", ["not valid YAML"], id="bad-yaml"),
    pytest.param(
        EVALUATOR,
        "evaluator:\n  timeout: soon\n",
        "config.yaml",
        ["key 'evaluator.timeout'", "positive number", "'soon'"],
        id="bad-timeout",
    ),
    pytest.param(
        EVALUATOR,
        "random_seed: seven\n",
        "config.yaml",
        ["key 'random_seed'", "integer"],
        id="bad-seed",
    ),
    pytest.param(
        EVALUATOR, "evaluator: 5\n", "config.yaml", ["key 'evaluator'", "mapping"], id="section"
    ),
]


@pytest.mark.parametrize(("evaluator", "config", "named", "expected"), MALFORMED)
def test_malformed_folder_names_the_file(
    tmp_path: Path, evaluator: str, config: str | None, named: str, expected: list[str]
) -> None:
    root = folder(tmp_path, evaluator, config)
    with pytest.raises(TaskSpecError) as info:
        load_task(root)
    message = str(info.value)
    assert message.startswith(str(root.resolve() / named)), message
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ("evaluator:\n  cascade_thresholds: []\n", "evaluator.cascade_thresholds"),
        ("max_iterations: -1\n", "max_iterations"),
        ("evaluator:\n  parallel_evaluations: 0\n", "evaluator.parallel_evaluations"),
        ("llm:\n  temperature: 3.5\n", "llm.temperature"),
        ("database:\n  exploration_ratio: 1.5\n", "database.exploration_ratio"),
    ],
)
def test_a_value_openevolve_takes_outside_revtrees_range_is_warned_not_refused(
    tmp_path: Path, config: str, named: str
) -> None:
    _, warnings, mapped = load_openevolve(folder(tmp_path, config=config))
    assert any(f"{named} (= " in w and "revtree takes" in w for w in warnings), warnings
    assert not any(m.startswith(f"{named} ->") for m in mapped)


# -- the runner, run for real in a workspace -------------------------------------------


def ws_for(tmp_path: Path, evaluator: str) -> Path:
    spec, _, _ = load_openevolve(folder(tmp_path, evaluator))
    return workspace(spec, tmp_path / "ws")


def test_runner_reports_a_dict_result(tmp_path: Path) -> None:
    ran = run(ws_for(tmp_path, EVALUATOR), "python _revtree_openevolve_runner.py evaluate")
    assert ran.code == 0, ran.stderr
    assert ran.metrics == {"combined_score": 0.25, "note": "plain dict"}
    assert json.loads(ran.stdout.splitlines()[-1]) == ran.metrics


def test_runner_reports_an_evaluation_result_with_artifacts(tmp_path: Path) -> None:
    evaluator = """\
    from openevolve.evaluation_result import EvaluationResult

    def evaluate(program_path):
        print("evaluating", program_path)
        return EvaluationResult(
            metrics={"combined_score": 0.5, "valid": True, "shape": (2, 3), "obj": object()},
            artifacts={"stderr": b"warning: \\xff bytes", "log": "x" * 20000, "n": 3},
        )
    """
    ran = run(ws_for(tmp_path, evaluator), "python _revtree_openevolve_runner.py evaluate")
    assert ran.code == 0, ran.stderr
    m = ran.metrics
    assert m is not None
    assert (m["combined_score"], m["valid"], m["shape"]) == (0.5, True, [2, 3])
    assert m["obj"].startswith("<object object")
    art = m["artifacts"]
    assert art["stderr"] == "warning: \ufffd bytes" and art["n"] == 3
    assert art["log"].startswith("x" * 8000) and art["log"].endswith("[12000 more characters]")
    assert "evaluating" in ran.stdout and str(tmp_path / "ws" / "initial_program.py") in ran.stdout


def test_runner_averages_numeric_metrics_without_combined_score(tmp_path: Path) -> None:
    evaluator = """\
    def evaluate_stage1(program_path):
        return {"a": 0.2, "b": 1, "error": 0.0, "msg": "text", "c": float("nan")}

    def evaluate(program_path):
        return {"combined_score": 1.0}
    """
    ran = run(ws_for(tmp_path, evaluator), "python _revtree_openevolve_runner.py evaluate_stage1")
    assert ran.code == 0, ran.stderr
    assert ran.metrics is not None
    assert ran.metrics["combined_score"] == pytest.approx(0.6)  # mean of a and b
    assert ran.metrics["combined_score_is_mean"] is True


def test_runner_converts_numpy_values(tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    evaluator = """\
    import numpy as np

    def evaluate(program_path):
        return {"combined_score": np.float32(0.5), "n": np.int64(3), "xs": np.arange(3)}
    """
    ran = run(ws_for(tmp_path, evaluator), "python _revtree_openevolve_runner.py evaluate")
    assert ran.code == 0, ran.stderr
    assert ran.metrics == {"combined_score": 0.5, "n": 3, "xs": [0, 1, 2]}


@pytest.mark.parametrize(
    ("evaluator", "function", "reason"),
    [
        pytest.param(
            "def evaluate(program_path):\n    raise ValueError('boom: no good')\n",
            "evaluate",
            "revtree: evaluate() raised ValueError: boom: no good",
            id="raises",
        ),
        pytest.param(
            "def evaluate(program_path):\n    return [1.0]\n",
            "evaluate",
            "revtree: evaluate() returned list, expected a dict or an EvaluationResult",
            id="returns-a-list",
        ),
        pytest.param(
            "def evaluate(program_path):\n    return {'error': 'Missing run_search'}\n",
            "evaluate",
            "revtree: evaluate() returned no numeric metric to score",
            id="no-numbers",
        ),
        pytest.param(
            EVALUATOR,
            "evaluate_stage1",
            "revtree: evaluator.py defines no function evaluate_stage1(program_path)",
            id="missing-stage",
        ),
        pytest.param(
            "import no_such_module\n\ndef evaluate(program_path):\n    return {}\n",
            "evaluate",
            "revtree: importing evaluator.py raised ModuleNotFoundError",
            id="import-fails",
        ),
    ],
)
def test_runner_failures_exit_nonzero_with_the_reason_last(
    tmp_path: Path, evaluator: str, function: str, reason: str
) -> None:
    ran = run(ws_for(tmp_path, evaluator), f"python _revtree_openevolve_runner.py {function}")
    assert ran.code == 1
    assert ran.last_stderr_line.startswith(reason), ran.stderr
    assert ran.metrics is None


def test_a_raising_evaluator_leaves_its_traceback(tmp_path: Path) -> None:
    evaluator = "def evaluate(program_path):\n    raise ValueError('boom')\n"
    ran = run(ws_for(tmp_path, evaluator), "python _revtree_openevolve_runner.py evaluate")
    assert "Traceback" in ran.stderr and 'evaluator.py", line 2' in ran.stderr


def test_threads_left_running_do_not_hold_the_runner(tmp_path: Path) -> None:
    evaluator = """\
    import threading, time

    def evaluate(program_path):
        threading.Thread(target=time.sleep, args=(60,)).start()
        return {"combined_score": 1.0}
    """
    start = time.monotonic()
    ran = run(ws_for(tmp_path, evaluator), "python _revtree_openevolve_runner.py evaluate")
    assert ran.code == 0 and ran.metrics == {"combined_score": 1.0}
    assert time.monotonic() - start < 30


def test_example_stages_run_and_score(tmp_path: Path) -> None:
    spec, _, _ = load_openevolve(EXAMPLE)
    ws = workspace(spec, tmp_path / "ws")
    stage1 = run(ws, spec.evaluate.stages[0].command)
    assert stage1.code == 0, stage1.stderr
    assert stage1.metrics is not None and stage1.metrics["combined_score_is_mean"] is True
    assert stage1.metrics["combined_score"] >= spec.evaluate.stages[0].threshold
    full = run(ws, spec.evaluate.command)
    assert full.code == 0, full.stderr
    assert full.metrics is not None and 0 < full.metrics["combined_score"] <= 1
    assert set(full.metrics["artifacts"]) == {"best_point"}
    # the score depends on the program: a better search scores higher
    better = workspace(
        spec,
        tmp_path / "ws2",
        {
            "initial_program.py": (EXAMPLE / "initial_program.py")
            .read_text()
            .replace("iterations=200", "iterations=5000")
        },
    )
    improved = run(better, spec.evaluate.command)
    assert improved.metrics is not None
    assert improved.metrics["combined_score"] > full.metrics["combined_score"]


def test_an_installed_openevolve_takes_precedence_over_the_shim(tmp_path: Path) -> None:
    # "installed": at the end of sys.path, after PYTHONPATH, as site-packages would be
    fake = write_folder(tmp_path / "site", {"openevolve/__init__.py": "REAL = True\n"})
    hook = write_folder(
        tmp_path / "hook", {"sitecustomize.py": f"import sys\nsys.path.append({str(fake)!r})\n"}
    )
    evaluator = """\
    import openevolve

    def evaluate(program_path):
        return {"combined_score": 1.0, "real": getattr(openevolve, "REAL", False)}
    """
    ws = ws_for(tmp_path, evaluator)
    ran = run(ws, "python _revtree_openevolve_runner.py evaluate", env={"PYTHONPATH": str(hook)})
    assert ran.code == 0, ran.stderr
    assert ran.metrics == {"combined_score": 1.0, "real": True}
    assert run(ws, "python _revtree_openevolve_runner.py evaluate").metrics == {
        "combined_score": 1.0,
        "real": False,
    }


# -- OpenEvolve's cascade meaning, end to end ---------------------------------------------

CASCADE = EXAMPLES / "openevolve-cascade"


def test_cascade_example_baseline_stops_at_stage1_with_a_score_and_the_run_improves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The baseline scores 0.29 at stage 1, below the 0.5 threshold: it succeeds with that
    score (OpenEvolve's meaning), and candidates improve on it. The folder has no knobs and
    a candidate identical to its parent is refused, so the offline knob proposer gets one
    knob over the program's GUESS (the folder itself stays as it is)."""
    from revtree.memory import NodeStatus, RunStatus, Store
    from revtree.orchestrator import Orchestrator, create_run
    from revtree.tasks.spec import TaskSpec

    home = tmp_path / "home"
    monkeypatch.setenv("REVTREE_HOME", str(home))
    monkeypatch.delenv("REVTREE_DB", raising=False)
    spec, warnings, _ = load_openevolve(CASCADE)
    assert warnings == [] and spec.evaluate.cascade == "keep"
    assert [(s.name, s.threshold) for s in spec.evaluate.stages] == [("stage1", 0.5)]
    spec = spec.with_overrides(
        budget={"max_nodes": 7},
        sandbox={"backend": "local"},
        agents={"mode": "knobs"},  # offline, whatever keys the environment holds
    )
    knob = {"file": "initial_program.py", "variable": "GUESS", "low": 0.0, "high": 6.0}
    spec = TaskSpec.model_validate(
        {**spec.model_dump(mode="python"), "knobs": [{"name": "g", "type": "float", **knob}]}
    )
    store = Store(f"sqlite:///{home / 'revtree.db'}")
    try:
        run_info = create_run(store, spec, home)
        Orchestrator(store, run_info.id, home=home).drive()
        assert store.get_run(run_info.id).status is RunStatus.COMPLETED
        nodes = store.nodes(run_info.id)
        root = nodes[0]
        assert root.status is NodeStatus.SUCCEEDED, root.error
        assert root.score == pytest.approx(1 / 3.5)  # its stage-1 score
        first = [e for e in store.evaluations(run_info.id, 0) if e.attempt == root.attempt]
        assert first[0].stage == "stage1" and first[0].ok
        # artifacts are in the metrics and, readable, in the output the agents see
        assert first[0].metrics["artifacts"]["feedback"] == "guess 0.5: the hidden number is higher"
        assert "### feedback\nguess 0.5: the hidden number is higher" in first[0].stdout_tail
        finished = [n for n in nodes[1:] if n.status is NodeStatus.SUCCEEDED]
        assert finished and all(n.score is not None for n in finished)
        best = max(n.score for n in finished if n.score is not None)
        print(f"cascade keep: baseline {root.score:.4f}, best {best:.4f}")
        assert root.score is not None and best > root.score
        # a candidate above the threshold went on to evaluate(); one below stopped at stage 1
        stages = {
            e.node_id: {x.stage for x in store.evaluations(run_info.id, e.node_id)}
            for e in store.evaluations(run_info.id)
        }
        assert any("full" in s for s in stages.values())
    finally:
        store.close()


def test_native_tasks_gate_by_default() -> None:
    from revtree.tasks.spec import Evaluate

    ev = Evaluate(command="x", metric="m", direction="maximize")
    assert ev.cascade == "gate"
    with pytest.raises(ValueError):
        Evaluate(command="x", metric="m", direction="maximize", cascade="merge")


def test_llm_and_database_settings_are_mapped(tmp_path: Path) -> None:
    config = """\
    llm:
      api_base: http://localhost:8000/v1
      models:
        - {name: qwen2.5-coder:7b, weight: 0.8}
        - {name: llama3, weight: 0.2}
      temperature: 0.4
      max_tokens: 2048
      timeout: 90
      retries: 2
      top_p: 0.9
    database:
      num_islands: 3
      migration_interval: 20
      migration_rate: 0.2
      feature_dimensions: [complexity, diversity, my_metric]
      feature_bins: {complexity: 8, my_metric: 3}
      exploration_ratio: 0.4
      exploitation_ratio: 0.7
      population_size: 500
    prompt:
      system_message: Make the search faster and more reliable.
    diff_based_evolution: false
    """
    spec, warnings, mapped = load_openevolve(folder(tmp_path, config=config))
    a = spec.agents
    assert (a.model, a.base_url) == (
        "openai-compatible:qwen2.5-coder:7b",
        "http://localhost:8000/v1",
    )
    assert [(m.model, m.weight) for m in a.coder.ensemble] == [
        ("openai-compatible:qwen2.5-coder:7b", 0.8),
        ("openai-compatible:llama3", 0.2),
    ]
    assert (a.temperature, a.max_tokens, a.timeout, a.max_retries) == (0.4, 2048, 90.0, 2)
    assert (a.edit_format, a.one_call) == ("whole_file", True)
    s = spec.search
    assert s.policy == "evolution"
    assert (s.num_islands, s.migration_interval, s.migration_rate) == (3, 20, 0.2)
    assert s.features == ("code_size", "drift", "metric:my_metric")
    assert s.feature_bins == {"code_size": 8, "drift": 10, "metric:my_metric": 3}
    # OpenEvolve's ratios are floats in [0, 1]; exploitation gets what exploration leaves
    assert (s.exploration_ratio, s.exploitation_ratio) == (0.4, 0.6)
    assert spec.goal == "Make the search faster and more reliable."
    text = "\n".join(warnings)
    for unmapped in ("llm.top_p", "database.population_size"):
        assert unmapped in text
    assert "llm.temperature" not in text and "num_islands" not in text
    assert "llm.models -> agents.model and the coder's ensemble" in mapped
    assert "llm.api_base -> agents.base_url" in mapped


def test_openai_endpoint_keeps_the_openai_provider(tmp_path: Path) -> None:
    config = "llm:\n  api_base: https://api.openai.com/v1\n  primary_model: gpt-4.1\n"
    spec, warnings, _ = load_openevolve(folder(tmp_path, config=config))
    assert (spec.agents.model, spec.agents.base_url, warnings) == ("openai:gpt-4.1", None, [])
    assert spec.agents.coder.ensemble == ()  # one model: agents.model, which --model overrides


RUST_EVALUATOR = """\
import os, subprocess


def evaluate(program_path):
    text = open(program_path).read()
    return {"combined_score": 1.0, "suffix": os.path.splitext(program_path)[1],
            "lines": text.count("\\n")}
"""


def test_a_rust_program_is_recognised_named_and_handed_over_by_path(tmp_path: Path) -> None:
    root = write_folder(
        tmp_path / "rust_sort",
        {
            "initial_program.rs": "fn main() {}\n",
            "evaluator.py": RUST_EVALUATOR,
            "config.yaml": "language: rust\nevaluator:\n  enable_artifacts: false\n",
        },
    )
    spec, warnings, _ = load_openevolve(root)
    assert warnings == [] and spec.editable == ("initial_program.rs",)
    assert spec.goal.endswith("The program, initial_program.rs, is written in Rust.")
    cmd = "python _revtree_openevolve_runner.py evaluate initial_program.rs --no-artifacts"
    assert spec.evaluate.command == cmd
    ran = run(workspace(spec, tmp_path / "ws"), spec.evaluate.command)
    assert ran.code == 0, ran.stderr
    assert ran.metrics == {"combined_score": 1.0, "suffix": ".rs", "lines": 1}


def test_two_candidate_programs_need_file_suffix(tmp_path: Path) -> None:
    files = {"initial_program.rs": "", "initial_program.go": "", "evaluator.py": EVALUATOR}
    root = write_folder(tmp_path / "two", files)
    with pytest.raises(TaskSpecError, match="file_suffix"):
        load_openevolve(root)
    (root / "config.yaml").write_text("file_suffix: .go\n")
    assert load_openevolve(root).spec.editable == ("initial_program.go",)
