//! Evaluation metrics users compare with papers: COCO mAP (pycocotools semantics), grounding
//! accuracy, and the intervals that tell a real accuracy gain from noise.

pub mod coco;
pub mod gain;
pub mod grounding;
