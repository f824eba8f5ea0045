//! The command-line tests, one file a command (and the README's Commands block), as modules of one
//! test binary: one link of the program's libraries instead of one a file, and `common` compiled
//! once.

mod common;

mod cli_curate;
mod cli_data;
mod cli_demo;
mod cli_eval_coco;
mod cli_eval_grounding;
mod cli_eval_model;
mod cli_export;
mod cli_model;
mod cli_plan;
mod cli_predict;
mod cli_qwen3_vl;
mod cli_report;
mod cli_reward;
mod cli_rollout;
mod cli_smart_resize;
mod cli_train;
mod cli_train_data_parallel;
mod readme_commands;
