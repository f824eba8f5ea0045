//! Evaluation metrics users compare with papers: COCO mAP (pycocotools semantics).

pub mod coco;
pub mod grounding;
