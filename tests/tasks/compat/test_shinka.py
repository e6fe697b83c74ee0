"""ShinkaEvolve folders: loaded into a TaskSpec, and their generated runner run for real."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from revtree.errors import TaskSpecError
from revtree.tasks import code_files, load_task
from revtree.tasks.compat import load_shinka
from revtree.tasks.spec import EvolutionSearch

from .conftest import EXAMPLES, run, workspace, write_folder

EXAMPLE = EXAMPLES / "shinka-circle-packing-lite"
COMMAND = "python _revtree_shinka_runner.py"
# An evaluator that follows the protocol by hand, without shinka.core
RAW_EVALUATOR = """\
import argparse, json, os

parser = argparse.ArgumentParser()
parser.add_argument("--program_path")
parser.add_argument("--results_dir")
args = parser.parse_args()
scope = {}
exec(open(args.program_path).read(), scope)
os.makedirs(args.results_dir, exist_ok=True)
ok = scope["VALUE"] >= 0
with open(os.path.join(args.results_dir, "correct.json"), "w") as f:
    json.dump({"correct": ok, "error": None if ok else "VALUE must not be negative"}, f)
with open(os.path.join(args.results_dir, "metrics.json"), "w") as f:
    json.dump({"combined_score": scope["VALUE"], "text_feedback": "t" * 9000}, f)
"""


def folder(tmp_path: Path, evaluator: str = RAW_EVALUATOR, value: str = "1.5") -> Path:
    return write_folder(
        tmp_path / "shinka_task", {"initial.py": f"VALUE = {value}\n", "evaluate.py": evaluator}
    )


def test_example_maps_onto_a_task() -> None:
    spec, warnings, mapped = load_shinka(EXAMPLE)
    assert spec.name == "shinka-circle-packing-lite"
    assert spec.editable == ("initial.py",) and spec.protected == ("evaluate.py",)
    ev = spec.evaluate
    assert (ev.command, ev.metric, ev.direction, ev.stages) == (
        COMMAND,
        "combined_score",
        "maximize",
        (),
    )
    assert set(spec.support_files) == {
        "_revtree_shinka_runner.py",
        "_revtree_compat/shinka/__init__.py",
        "_revtree_compat/shinka/core/__init__.py",
        "_revtree_compat/shinka/core/wrap_eval.py",
    }
    assert "EVOLVE-BLOCK" in spec.goal
    assert "shinka_small.yaml" not in code_files(spec)
    # the one shinka*.yaml is read: only its key without a counterpart is warned about
    assert warnings == [
        f"{EXAMPLE / 'shinka_small.yaml'}: 'evo_config' settings without a revtree "
        "counterpart, ignored: evo_config.job_type"
    ]
    assert (spec.budget.max_nodes, spec.search.parallel, spec.search.policy) == (
        21,
        2,
        "evolution",
    )
    assert isinstance(spec.search, EvolutionSearch)
    assert (spec.search.num_islands, spec.search.archive_size) == (2, 20)
    assert spec.agents.model == "openai:gpt-4o-mini" and spec.agents.one_call
    assert "evo_config.num_generations -> budget.max_nodes" in mapped


def test_load_task_dispatches_and_notes_the_mapping() -> None:
    from revtree.tasks.compat import CompatNote

    with pytest.warns(UserWarning, match=r"shinka_small\.yaml") as record:
        spec = load_task(EXAMPLE)
    loaded = load_shinka(EXAMPLE)
    assert spec == loaded.spec
    assert [str(w.message) for w in record if w.category is not CompatNote] == loaded.warnings
    assert sum(w.category is CompatNote for w in record) == 1


def test_run_configs_are_named_and_kept_out(tmp_path: Path) -> None:
    root = folder(tmp_path)
    write_folder(
        root,
        {"shinka.yaml": "evo_config: {}\n", "shinka_b.yaml": "{}\n", "run_evo.py": "pass\n"},
    )
    spec, warnings, _ = load_shinka(root)
    names = [w.split(":")[0] for w in warnings]  # two run configs: neither is read
    assert names == [
        str(root.resolve() / n) for n in ("run_evo.py", "shinka.yaml", "shinka_b.yaml")
    ]
    assert code_files(spec) == ["evaluate.py", "initial.py"]


def test_shinka_yaml_llm_and_program_mapping(tmp_path: Path) -> None:
    root = folder(tmp_path)
    config = """\
    evo_config:
      task_sys_msg: Find the fastest Collatz step counter.
      language: go
      init_program_path: initial.go
      patch_types: [full]
      llm_models: [local-qwen2.5-coder-http://localhost:11434/v1]
      llm_kwargs: {temperatures: [0.3], max_tokens: 2048}
      max_api_costs: 1.5
    """
    write_folder(root, {"initial.go": "package main\n", "shinka.yaml": config})
    spec, warnings, mapped = load_shinka(root)
    assert warnings == [] and spec.editable == ("initial.go",)
    assert spec.evaluate.command == "python _revtree_shinka_runner.py initial.go"
    assert spec.goal == (
        "Find the fastest Collatz step counter. The program, initial.go, is written in Go."
    )
    a = spec.agents
    assert (a.model, a.base_url) == ("openai-compatible:qwen2.5-coder", "http://localhost:11434/v1")
    assert (a.edit_format, a.temperature, a.max_tokens) == ("whole_file", 0.3, 2048)
    assert spec.budget.max_usd == 1.5 and len(mapped) == 8


def test_a_go_program_is_recognised_and_handed_over_by_path(tmp_path: Path) -> None:
    evaluator = """\
    import argparse, json, os
    p = argparse.ArgumentParser()
    p.add_argument("--program_path")
    p.add_argument("--results_dir")
    a = p.parse_args()
    text = open(a.program_path).read()
    os.makedirs(a.results_dir, exist_ok=True)
    json.dump({"correct": True}, open(os.path.join(a.results_dir, "correct.json"), "w"))
    score = {"combined_score": float(len(text)), "path": a.program_path}
    json.dump(score, open(os.path.join(a.results_dir, "metrics.json"), "w"))
    """
    root = write_folder(
        tmp_path / "go_task", {"initial.go": "package main\n", "evaluate.py": evaluator}
    )
    spec = load_shinka(root).spec
    assert "written in Go" in spec.goal and spec.editable == ("initial.go",)
    ws = workspace(spec, tmp_path / "ws")
    ran = run(ws, spec.evaluate.command)
    assert ran.code == 0, ran.stderr
    assert ran.metrics == {"combined_score": 13.0, "path": "initial.go"}


def test_a_bare_folder_loads_without_warnings(tmp_path: Path) -> None:
    spec, warnings, _ = load_shinka(folder(tmp_path))
    assert warnings == [] and spec.name == "shinka_task"
    assert "EVOLVE-BLOCK" not in spec.goal


def test_malformed_evaluator_names_the_file(tmp_path: Path) -> None:
    root = folder(tmp_path, "import argparse\nif True\n    pass\n")
    with pytest.raises(TaskSpecError) as info:
        load_task(root)
    assert str(info.value).startswith(str(root.resolve() / "evaluate.py"))
    assert "not valid Python" in str(info.value) and "line 2" in str(info.value)


# -- the runner, run for real in a workspace -------------------------------------------


def _example_score() -> float:
    spec = importlib.util.spec_from_file_location("circles", EXAMPLE / "initial.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return float(module.run_packing()[2])


def test_example_runs_through_the_shim(tmp_path: Path) -> None:
    spec, _, _ = load_shinka(EXAMPLE)
    ran = run(workspace(spec, tmp_path / "ws"), spec.evaluate.command)
    assert ran.code == 0, ran.stderr
    m = ran.metrics
    assert m is not None
    assert m["combined_score"] == pytest.approx(_example_score())
    assert m["public"]["num_circles"] == 10 and m["num_valid_runs"] == 1
    assert m["all_validation_errors"] == [] and "execution_time_mean" in m
    assert "correct" in ran.stdout  # the evaluator's own output is kept


def test_an_incorrect_program_fails_with_shinkas_error(tmp_path: Path) -> None:
    spec, _, _ = load_shinka(EXAMPLE)
    overlapping = (
        (EXAMPLE / "initial.py")
        .read_text()
        .replace(
            "return centers, compute_max_radii(centers)",
            "return centers, [0.3] * len(centers)",
        )
    )
    ran = run(workspace(spec, tmp_path / "ws", {"initial.py": overlapping}), spec.evaluate.command)
    assert ran.code == 1
    assert ran.last_stderr_line.startswith(
        "revtree: initial.py is not correct: Validation failed: "
    ), ran.stderr
    assert ran.metrics is not None and ran.metrics["num_invalid_runs"] == 1  # still recorded


def test_a_program_that_crashes_is_incorrect(tmp_path: Path) -> None:
    spec, _, _ = load_shinka(EXAMPLE)
    ws = workspace(spec, tmp_path / "ws", {"initial.py": "def run_packing():\n    1 / 0\n"})
    ran = run(ws, spec.evaluate.command)
    assert ran.code == 1 and "division by zero" in ran.last_stderr_line
    assert ran.metrics is not None and ran.metrics["combined_score"] == 0.0


def test_a_raw_protocol_evaluator_works_and_long_strings_are_cut(tmp_path: Path) -> None:
    spec, _, _ = load_shinka(folder(tmp_path))
    ran = run(workspace(spec, tmp_path / "ws"), COMMAND)
    assert ran.code == 0, ran.stderr
    assert ran.metrics is not None and ran.metrics["combined_score"] == 1.5
    assert ran.metrics["text_feedback"].endswith("[1000 more characters]")


def test_correct_false_fails_with_the_error(tmp_path: Path) -> None:
    spec, _, _ = load_shinka(folder(tmp_path, value="-2"))
    ran = run(workspace(spec, tmp_path / "ws"), COMMAND)
    assert ran.code == 1
    assert ran.last_stderr_line == "revtree: initial.py is not correct: VALUE must not be negative"


@pytest.mark.parametrize(
    ("evaluator", "reason"),
    [
        pytest.param(
            "import sys\nsys.exit('evaluator broke')\n",
            "revtree: evaluate.py exited with code 1",
            id="crash",
        ),
        pytest.param("pass\n", "revtree: evaluate.py wrote no correct.json", id="writes-nothing"),
        pytest.param(
            RAW_EVALUATOR.replace('json.dump({"correct": ok', 'json.dump({"right": ok'),
            "revtree: correct.json must hold",
            id="bad-correct-json",
        ),
    ],
)
def test_evaluator_failures_exit_nonzero(tmp_path: Path, evaluator: str, reason: str) -> None:
    spec, _, _ = load_shinka(folder(tmp_path, evaluator))
    ran = run(workspace(spec, tmp_path / "ws"), COMMAND)
    assert ran.code == 1
    assert ran.last_stderr_line.startswith(reason), ran.stderr
    assert ran.metrics is None


def test_an_installed_shinka_takes_precedence_over_the_shim(tmp_path: Path) -> None:
    # "installed": at the end of sys.path, after PYTHONPATH, as site-packages would be
    fake = write_folder(
        tmp_path / "site",
        {
            "shinka/__init__.py": "",
            "shinka/core/__init__.py": """\
            import json, os

            def run_shinka_eval(program_path, results_dir, **kwargs):
                os.makedirs(results_dir, exist_ok=True)
                files = {"correct": {"correct": True}, "metrics": {"combined_score": 42}}
                for name, data in files.items():
                    with open(os.path.join(results_dir, name + ".json"), "w") as f:
                        json.dump(data, f)
                return {}, True, None
            """,
        },
    )
    hook = write_folder(
        tmp_path / "hook", {"sitecustomize.py": f"import sys\nsys.path.append({str(fake)!r})\n"}
    )
    spec, _, _ = load_shinka(EXAMPLE)
    ws = workspace(spec, tmp_path / "ws")
    ran = run(ws, spec.evaluate.command, env={"PYTHONPATH": str(hook)})
    assert ran.code == 0, ran.stderr
    assert ran.metrics == {"combined_score": 42}
    assert os.path.isdir(ws / "_revtree_compat" / "shinka")  # there, but not used
