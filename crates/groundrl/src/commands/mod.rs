pub mod bench;
pub mod data;
pub mod eval;
pub mod model;
pub mod reward;
pub mod rollout;
pub mod smart_resize;
pub mod synth;
