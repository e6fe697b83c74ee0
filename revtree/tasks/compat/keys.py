"""Every key of OpenEvolve's and ShinkaEvolve's config schemas, as the loaders treat it.

``MAPPED``: carried over onto a revtree setting of the same meaning (the loader lists
it as mapped when it is set to a value revtree takes; a value outside revtree's range
is named in the warning instead). ``WARNED``: no revtree counterpart; the loader names
the key in its one warning line per section. Nothing a schema accepts is refused.

The compat tests (``pytest -m compat``) read the schemas from the packages themselves
(OpenEvolve's ``Config`` dataclasses, ShinkaEvolve's ``EvolutionConfig``,
``DatabaseConfig``, ``LocalJobConfig`` and ``shinka_run``'s runner keys) and fail,
naming the key, when a release accepts a key in neither table.
"""

from __future__ import annotations

OPENEVOLVE_VERSION = "0.4.0"
SHINKA_VERSION = "0.0.7"

OPENEVOLVE_MAPPED = frozenset(
    {
        "max_iterations",  # budget.max_nodes (plus the root)
        "random_seed",  # search.seed
        "language",  # named in the goal
        "file_suffix",  # picks the program
        "diff_based_evolution",  # false: agents.edit_format = "whole_file"
        "llm.api_base",  # agents.base_url
        "llm.temperature",
        "llm.max_tokens",
        "llm.timeout",
        "llm.retries",  # agents.max_retries
        "llm.models",  # agents.model and the coder's weighted ensemble
        "llm.primary_model",
        "llm.primary_model_weight",
        "llm.secondary_model",
        "llm.secondary_model_weight",
        "prompt.system_message",  # the goal (a text; a template's name is warned)
        "prompt.include_artifacts",  # artifacts shown to the agents
        "database.num_islands",
        "database.migration_interval",
        "database.migration_rate",
        "database.archive_size",
        "database.exploration_ratio",
        "database.exploitation_ratio",
        "database.feature_dimensions",  # search.features
        "database.feature_bins",  # search.feature_bins, per feature
        "database.random_seed",  # search.seed
        "evaluator.timeout",
        "evaluator.parallel_evaluations",  # search.parallel
        "evaluator.cascade_evaluation",  # evaluate.stages
        "evaluator.cascade_thresholds",
        "evaluator.enable_artifacts",
    }
)
OPENEVOLVE_WARNED = frozenset(
    {
        # logging, checkpoints and output: revtree keeps every node in its store
        "checkpoint_interval",
        "log_level",
        "log_dir",
        "max_tasks_per_child",
        "evolution_trace.enabled",
        "evolution_trace.format",
        "evolution_trace.include_code",
        "evolution_trace.include_prompts",
        "evolution_trace.output_path",
        "evolution_trace.buffer_size",
        "evolution_trace.compress",
        # candidate checks revtree does its own way
        "max_code_length",
        "enforce_evolve_blocks",  # revtree always keeps edits inside EVOLVE-BLOCKs
        "diff_pattern",
        "early_stopping_patience",
        "convergence_threshold",
        "early_stopping_metric",
        # LLM settings without a counterpart (API keys are never read)
        "llm.api_key",
        "llm.name",
        "llm.provider",
        "llm.init_client",
        "llm.weight",
        "llm.system_message",
        "llm.top_p",
        "llm.retry_delay",
        "llm.random_seed",
        "llm.reasoning_effort",
        "llm.max_budget_usd",
        "llm.max_ai_credits",
        "llm.allow_all_tools",
        "llm.manual_mode",
        "llm.evaluator_models",
        # OpenEvolve's prompt templates: revtree's agents write their own prompts
        "prompt.template_dir",
        "prompt.evaluator_system_message",
        "prompt.programs_as_changes_description",
        "prompt.system_message_changes_description",
        "prompt.initial_changes_description",
        "prompt.num_top_programs",
        "prompt.num_diverse_programs",
        "prompt.use_template_stochasticity",
        "prompt.template_variations",
        "prompt.use_meta_prompting",
        "prompt.meta_prompt_weight",
        "prompt.max_artifact_bytes",
        "prompt.artifact_security_filter",
        "prompt.suggest_simplification_after_chars",
        "prompt.include_changes_under_chars",
        "prompt.concise_implementation_max_lines",
        "prompt.comprehensive_implementation_min_lines",
        "prompt.diff_summary_max_line_len",
        "prompt.diff_summary_max_lines",
        "prompt.code_length_threshold",
        # OpenEvolve's program database: revtree's store and evolution policy instead
        "database.db_path",
        "database.in_memory",
        "database.log_prompts",
        "database.population_size",
        "database.elite_selection_ratio",
        "database.diversity_metric",
        "database.diversity_reference_size",
        "database.artifacts_base_path",
        "database.artifact_size_threshold",
        "database.cleanup_old_artifacts",
        "database.artifact_retention_days",
        "database.max_snapshot_artifacts",
        "database.novelty_llm",
        "database.embedding_model",
        "database.embedding_api_base",
        "database.similarity_threshold",
        # evaluation: revtree's sandbox sets the limits, a failure is the candidate's
        "evaluator.max_retries",
        "evaluator.memory_limit_mb",
        "evaluator.cpu_limit",
        "evaluator.distributed",
        "evaluator.use_llm_feedback",
        "evaluator.llm_feedback_weight",
        "evaluator.max_artifact_storage",
    }
)
#: keys of one entry of ``llm.models`` (``llm.models[i].KEY`` in the warning)
OPENEVOLVE_MODEL_MAPPED = frozenset({"name", "weight", "api_base"})
OPENEVOLVE_MODEL_WARNED = frozenset(
    {
        "api_key",
        "provider",
        "init_client",
        "system_message",
        "temperature",
        "top_p",
        "max_tokens",
        "timeout",
        "retries",
        "retry_delay",
        "random_seed",
        "reasoning_effort",
        "max_budget_usd",
        "max_ai_credits",
        "allow_all_tools",
        "manual_mode",
    }
)

SHINKA_MAPPED = frozenset(
    {
        "evo_config.task_sys_msg",  # the goal
        "evo_config.language",  # named in the goal
        "evo_config.init_program_path",  # the program
        "evo_config.num_generations",  # budget.max_nodes (plus the root)
        "evo_config.max_api_costs",  # budget.max_usd
        "evo_config.patch_types",  # agents.edit_format
        "evo_config.llm_models",  # agents.model and the coder's ensemble
        "evo_config.llm_kwargs",  # max_tokens and a single temperature
        "db_config.num_islands",
        "db_config.archive_size",
        "db_config.migration_interval",
        "db_config.migration_rate",
        "db_config.exploitation_ratio",  # the chance the parent comes from the archive
        "job_config.eval_program_path",  # evaluate.py, the evaluator
        "max_evaluation_jobs",  # search.parallel
    }
)
SHINKA_WARNED = frozenset(
    {
        # Shinka's sampling of patches, models, meta-recommendations and novelty
        "evo_config.patch_type_probs",
        "evo_config.max_patch_resamples",
        "evo_config.max_patch_attempts",
        "evo_config.job_type",
        "evo_config.llm_dynamic_selection",
        "evo_config.llm_dynamic_selection_kwargs",
        "evo_config.meta_rec_interval",
        "evo_config.meta_llm_models",
        "evo_config.meta_llm_kwargs",
        "evo_config.meta_max_recommendations",
        "evo_config.sample_single_meta_rec",
        "evo_config.embedding_model",
        "evo_config.results_dir",
        "evo_config.max_novelty_attempts",
        "evo_config.code_embed_sim_threshold",
        "evo_config.novelty_llm_models",
        "evo_config.novelty_llm_kwargs",
        "evo_config.use_text_feedback",
        "evo_config.inspiration_sort_order",
        "evo_config.enable_controlled_oversubscription",
        "evo_config.proposal_target_mode",
        "evo_config.proposal_target_min_samples",
        "evo_config.proposal_target_ratio_cap",
        "evo_config.proposal_buffer_max",
        "evo_config.proposal_target_hard_cap",
        "evo_config.proposal_target_ewma_alpha",
        "evo_config.evolve_prompts",
        "evo_config.prompt_patch_types",
        "evo_config.prompt_patch_type_probs",
        "evo_config.prompt_evolution_interval",
        "evo_config.prompt_archive_size",
        "evo_config.prompt_llm_models",
        "evo_config.prompt_llm_kwargs",
        "evo_config.prompt_ucb_exploration_constant",
        "evo_config.prompt_epsilon",
        "evo_config.prompt_evo_top_k_programs",
        "evo_config.prompt_percentile_recompute_interval",
        # Shinka's program database: revtree's store and evolution policy instead
        "db_config.db_path",
        "db_config.elite_selection_ratio",
        "db_config.num_archive_inspirations",
        "db_config.num_top_k_inspirations",
        "db_config.island_elitism",
        "db_config.enforce_island_separation",
        "db_config.island_selection_strategy",
        "db_config.enable_dynamic_islands",
        "db_config.stagnation_threshold",
        "db_config.island_spawn_strategy",
        "db_config.island_spawn_subtree_size",
        "db_config.parent_selection_strategy",
        "db_config.exploitation_alpha",
        "db_config.parent_selection_lambda",
        "db_config.num_beams",
        "db_config.archive_selection_strategy",
        "db_config.archive_criteria",
        # how Shinka launches evaluations: revtree's sandbox does
        "job_config.extra_cmd_args",
        "job_config.time",
        "job_config.conda_env",
        "job_config.activate_script",
        "job_config.python_executable",
        "job_config.numeric_threads_per_job",
        # shinka_run's runner
        "max_proposal_jobs",
        "max_db_workers",
        "verbose",
        "debug",
    }
)
