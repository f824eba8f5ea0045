//! One held-out answer as an evaluation wrote it (`RUN_DIR/eval/<label>.jsonl`, a line each).

use serde::{Deserialize, Serialize};

/// A sample, the model's answer to it, and the verdict; coordinates in original image pixels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    pub id: String,
    pub source: String,
    pub image: String,
    pub width: u32,
    pub height: u32,
    pub instruction: String,
    pub targets: Vec<[f64; 4]>,
    pub completion: String,
    pub point: Option<[f64; 2]>,
    pub pred_box: Option<[f64; 4]>,
    pub correct: bool,
    pub reward: f64,
    pub confidence: Option<f64>,
}
