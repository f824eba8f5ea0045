//! The core crate's integration tests (data import, JSONL and Parquet, splits, grounding formats and
//! evaluation, input fuzzing, lint rules, prompts, synthetic data, telemetry), one file a subject, as
//! modules of one test binary: one link instead of one a file.

mod data_import;
mod data_jsonl;
mod data_parquet;
mod data_split;
mod grounding_eval;
mod grounding_formats;
mod input_fuzz;
mod lint_rules;
mod prompt_presets;
mod synth_data_quality;
mod synth_generator;
mod telemetry;
