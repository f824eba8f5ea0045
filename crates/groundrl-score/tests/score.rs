//! The scoring crate's integration tests (COCO parity and pipeline, parser fuzzing, rewards), one
//! file a subject, as modules of one test binary: one link instead of one a file.

mod coco_parity;
mod coco_pipeline;
mod parse_fuzz;
mod reward_batch;
mod reward_text;
