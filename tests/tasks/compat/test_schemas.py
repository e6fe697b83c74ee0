"""Every OpenEvolve and ShinkaEvolve config their own code accepts loads, with each key
mapped or named in a warning (group ``compat``: the real packages, see schemas.py).

The configs are generated from the schemas: the full default config, the default with
each key varied over its type and range, whole sections varied at once (OpenEvolve),
both spellings of shinka_run's sections, and one config per example kind of
OpenEvolve's documentation. A key a newer release adds fails
``test_every_schema_key_is_mapped_or_warned``, naming the key. The counts of keys
mapped / warned / refused go to the end of the session's output.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from revtree.errors import TaskSpecError
from revtree.tasks.compat import keys
from revtree.tasks.compat.openevolve import load_openevolve
from revtree.tasks.compat.shinka import load_shinka
from tests.conftest import END_LINES

from . import schemas
from .conftest import write_folder

pytestmark = [
    pytest.mark.compat,
    pytest.mark.skipif(schemas.missing() is not None, reason=schemas.missing() or ""),
]

PROGRAM = "# EVOLVE-BLOCK-START\nX = 1.0\n# EVOLVE-BLOCK-END\n"
OE_EVALUATOR = """\
def evaluate_stage1(program_path):
    return {"combined_score": 0.6}


def evaluate(program_path):
    return {"combined_score": 1.0, "my_metric": 2.0}
"""
SHINKA_EVALUATE = "import sys\nprint(sys.argv)\n"

EXAMPLES = {  # as OpenEvolve's examples write them, one per kind its documentation shows
    "cascade": """\
        max_iterations: 50
        evaluator:
          cascade_evaluation: true
          cascade_thresholds: [0.5, 0.8]
          timeout: 60
          parallel_evaluations: 4
        """,
    "artifacts": """\
        evaluator:
          enable_artifacts: true
        prompt:
          include_artifacts: true
          max_artifact_bytes: 4096
          artifact_security_filter: true
        """,
    "feature dimensions": """\
        database:
          feature_dimensions: ["score", "complexity", "my_metric"]
          feature_bins: {score: 5, complexity: 4, my_metric: 10}
          population_size: 200
          archive_size: 30
        """,
    "islands": """\
        random_seed: 42
        database:
          num_islands: 4
          migration_interval: 20
          migration_rate: 0.1
          elite_selection_ratio: 0.2
          exploration_ratio: 0.3
          exploitation_ratio: 0.7
        """,
    "several models with weights": """\
        llm:
          api_base: "https://generativelanguage.googleapis.com/v1beta/openai/"
          models:
            - name: "gemini-2.5-flash-lite"
              weight: 0.8
            - name: "gemini-2.5-flash"
              weight: 0.2
          temperature: 0.7
          max_tokens: 16000
          timeout: 120
        """,
}
SHINKA_EXAMPLES = {  # as ShinkaEvolve's examples write their shinka*.yaml
    "circle packing": """\
        max_evaluation_jobs: 2
        max_proposal_jobs: 2
        max_db_workers: 2
        db_config:
          num_islands: 1
          archive_size: 40
          elite_selection_ratio: 0.3
          num_archive_inspirations: 4
          num_top_k_inspirations: 2
          migration_interval: 10
          migration_rate: 0.1
          island_elitism: true
          parent_selection_strategy: weighted
          parent_selection_lambda: 10
          archive_selection_strategy: "crowding"
          archive_criteria: {combined_score: 1.0, loc: -0.3}
          enable_dynamic_islands: true
          stagnation_threshold: 10
          island_spawn_strategy: "best"
        evo_config:
          patch_types: [diff, full, cross]
          patch_type_probs: [0.6, 0.3, 0.1]
          num_generations: 100
          max_api_costs: 0.5
          language: python
          llm_models: ["gemini-2.5-flash", "gpt-5-mini", "gpt-5-nano"]
          llm_kwargs:
            temperatures: [0, 0.5, 1.0]
            reasoning_efforts: [low, medium, high]
            max_tokens: 32768
          meta_rec_interval: 5
          meta_llm_models: [gpt-5-mini]
          init_program_path: initial.py
          llm_dynamic_selection: ucb1
          llm_dynamic_selection_kwargs: {exploration_coef: 1.0, cost_aware_coef: 0.7}
          evolve_prompts: True
          prompt_epsilon: 0.25
        """,
    "one model, short names": """\
        max_evaluation_jobs: 4
        evo:
          num_generations: 30
          max_api_costs: 3.0
          llm_models: [gpt-4.1]
          llm_kwargs: {temperatures: [0.3], max_tokens: 6144}
          use_text_feedback: true
          meta_rec_interval: null
        db:
          num_islands: 2
          migration_rate: 0.0
          exploitation_ratio: 0.9
        job:
          eval_program_path: evaluate.py
          time: "00:10:00"
        """,
}


class Tally:
    """Which keys the loads mapped, warned about, or were refused for."""

    def __init__(self) -> None:
        self.mapped: set[str] = set()
        self.warned: set[str] = set()
        self.refused: dict[str, str] = {}  # config -> error
        self.configs = 0

    def load(self, loader: Any, folder: Path, name: str, data: dict[str, Any]) -> None:
        try:
            _, warnings, mapped = loader(folder)
        except TaskSpecError as e:
            self.refused[name] = str(e)
            return
        self.configs += 1
        text = "\n".join(warnings)
        notes = {m.split(" -> ")[0] for m in mapped}
        for key in leaf_keys(data):
            canonical = canon(key)
            if key in notes or any(n.startswith(key + ".") for n in notes):
                self.mapped.add(canonical)
            elif key in text:
                self.warned.add(canonical)
            else:
                pytest.fail(f"{name}: key {key!r} is neither mapped nor warned about: {mapped}")

    def summary(self, what: str, fields: set[str]) -> str:
        warned = self.warned - self.mapped
        unset = sorted(fields - self.mapped - self.warned)  # no YAML value: a client object
        return (
            f"{what}: {len(fields)} keys: {len(self.mapped)} mapped, {len(warned)} warned, "
            f"{len(self.refused)} refused ({self.configs} configs loaded"
            + (f"; never set, YAML cannot write them: {', '.join(unset)})" if unset else ")")
        )


def leaf_keys(data: dict[str, Any]) -> list[str]:
    """The dotted keys a config sets (to anything but null or an empty list or table);
    a mapping below a section is one key (llm_kwargs, feature_bins, ...)."""
    out = []
    for key, value in data.items():
        if isinstance(value, dict) and key in SECTIONS:
            out.extend(f"{key}.{k}" for k, v in value.items() if v not in (None, [], {}))
        elif value not in (None, [], {}):
            out.append(key)
    return out


SECTIONS = {*schemas.OE_SECTIONS, *schemas.SHINKA_CLASSES, *schemas.ALIASES.values()}
UNALIAS = {v: k for k, v in schemas.ALIASES.items()}


def canon(key: str) -> str:
    section, dot, rest = key.partition(".")
    return UNALIAS.get(section, section) + dot + rest


@pytest.fixture(scope="module")
def openevolve_tally(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tally, Any]:
    oe = schemas.openevolve()
    tally = Tally()
    folder = write_folder(
        tmp_path_factory.mktemp("oe") / "task",
        {"initial_program.py": PROGRAM, "evaluator.py": OE_EVALUATOR},
    )
    configs = [
        *schemas.oe_configs(oe),
        *((k, yaml.safe_load(textwrap.dedent(v))) for k, v in EXAMPLES.items()),
    ]
    for name, data in configs:
        if not schemas.oe_accepts(oe, data):
            continue  # OpenEvolve refuses it too
        (folder / "config.yaml").write_text(yaml.safe_dump(data))
        tally.load(load_openevolve, folder, name, data)
    return tally, oe


@pytest.fixture(scope="module")
def shinka_tally(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tally, dict[str, Any]]:
    fields = schemas.shinka_fields()
    runner = schemas.shinka_run_config()
    allowed = {
        short: {k.split(".", 1)[1]: t for k, t in fields.items() if k.startswith(f"{long}.")}
        for long, short in schemas.ALIASES.items()
    }
    tally = Tally()
    folder = write_folder(
        tmp_path_factory.mktemp("shinka") / "task",
        {"initial.py": PROGRAM, "evaluate.py": SHINKA_EVALUATE},
    )
    configs = [
        *schemas.shinka_configs(fields),
        *((k, yaml.safe_load(textwrap.dedent(v))) for k, v in SHINKA_EXAMPLES.items()),
    ]
    for name, data in configs:
        (folder / "shinka.yaml").write_text(yaml.safe_dump(data))
        try:  # shinka_run's own reading of the file
            runner.load_optional_yaml_config(
                task_dir=folder, config_fname="shinka.yaml", allowed_field_types=allowed
            )
        except ValueError:
            continue
        tally.load(load_shinka, folder, name, data)
    return tally, fields


@pytest.mark.slow  # 250+ configs through both loaders, 8 s (issue 24)
def test_openevolve_configs_all_load(
    openevolve_tally: tuple[Tally, Any], request: pytest.FixtureRequest
) -> None:
    tally, oe = openevolve_tally
    fields = schemas.oe_fields(oe)
    assert tally.refused == {}, tally.refused
    assert tally.configs > 250
    line = tally.summary(f"openevolve {schemas.version('openevolve')}", set(fields))
    request.config.stash.setdefault(END_LINES, []).append(f"compat: {line}")
    # the tables say what the loader does
    assert tally.mapped >= keys.OPENEVOLVE_MAPPED, keys.OPENEVOLVE_MAPPED - tally.mapped
    assert not (keys.OPENEVOLVE_WARNED & tally.mapped), keys.OPENEVOLVE_WARNED & tally.mapped


@pytest.mark.slow  # 150+ configs through both loaders, 7 s (issue 24)
def test_shinka_configs_all_load(
    shinka_tally: tuple[Tally, dict[str, Any]], request: pytest.FixtureRequest
) -> None:
    tally, fields = shinka_tally
    assert tally.refused == {}, tally.refused
    assert tally.configs > 150
    line = tally.summary(f"shinka-evolve {schemas.version('shinka_evolve')}", set(fields))
    request.config.stash.setdefault(END_LINES, []).append(f"compat: {line}")
    assert tally.mapped >= keys.SHINKA_MAPPED, keys.SHINKA_MAPPED - tally.mapped
    assert not (keys.SHINKA_WARNED & tally.mapped), keys.SHINKA_WARNED & tally.mapped


def test_every_schema_key_is_mapped_or_warned() -> None:
    oe = schemas.openevolve()
    known = keys.OPENEVOLVE_MAPPED | keys.OPENEVOLVE_WARNED
    new = sorted(set(schemas.oe_fields(oe)) - known)
    assert not new, f"openevolve {schemas.version('openevolve')} accepts keys {new}: map or warn"
    model = keys.OPENEVOLVE_MODEL_MAPPED | keys.OPENEVOLVE_MODEL_WARNED
    new = sorted(set(schemas.oe_model_fields(oe)) - model)
    assert not new, f"openevolve's llm.models entries accept keys {new}: map or warn"
    known = keys.SHINKA_MAPPED | keys.SHINKA_WARNED
    new = sorted(set(schemas.shinka_fields()) - known)
    assert not new, f"shinka-evolve {schemas.version('shinka_evolve')} accepts keys {new}"
    # and the tables name no key that the schemas no longer have
    gone = sorted(
        (keys.OPENEVOLVE_MAPPED | keys.OPENEVOLVE_WARNED) - set(schemas.oe_fields(oe))
        | (keys.SHINKA_MAPPED | keys.SHINKA_WARNED) - set(schemas.shinka_fields())
    )
    assert not gone, f"keys the packages no longer accept: {gone}"


def test_the_installed_releases_are_the_ones_the_tables_describe() -> None:
    assert schemas.version("openevolve") == keys.OPENEVOLVE_VERSION
    assert schemas.version("shinka_evolve") == keys.SHINKA_VERSION


def test_a_model_entry_key_is_named_in_the_warning(tmp_path: Path) -> None:
    config = "llm:\n  models:\n    - {name: gpt-4.1, weight: 1.0, top_p: 0.9, retries: 2}\n"
    folder = write_folder(
        tmp_path / "task",
        {"initial_program.py": PROGRAM, "evaluator.py": OE_EVALUATOR, "config.yaml": config},
    )
    _, warnings, mapped = load_openevolve(folder)
    assert "llm.models[0].top_p" in "\n".join(warnings)
    assert "llm.models[0].retries" in "\n".join(warnings)
    assert "llm.models -> agents.model and the coder's ensemble" in mapped
