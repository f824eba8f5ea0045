//! Evaluation metrics users compare with papers: COCO mAP (pycocotools semantics), grounding
//! accuracy, and the intervals that tell a real accuracy gain from noise.
//!
//! The two metrics sit on either side of the rewards: [`coco`] is also the engine of the per-sample
//! AP reward (`reward::detection` runs it on one image), and [`grounding`] reads a completion through
//! the rewards' frame resolution (`reward::input::ScoringFrame`), so that evaluation and training
//! read a model's numbers the same way. No COCO module imports the rewards.

pub mod coco;
pub mod gain;
pub mod grounding;
