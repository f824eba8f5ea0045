//! The training crate's integration tests (checkpoints, configs, data parallel, the trainer, losses,
//! the optimizer, loading a trained model, learning), one file a subject, as modules of one test
//! binary: one link of libtorch and the crates instead of one a file.

mod checkpoint;
mod config_fuzz;
mod data_parallel;
mod grpo_learns;
mod load_model;
mod loss;
mod optim;
mod trainer;
