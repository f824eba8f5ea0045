pub mod data;
pub mod eval;
pub mod eval_grounding;
pub mod reward;
pub mod smart_resize;
pub mod synth;
