//! Rewards for grounding and detection (semantics.md §4) and the reward spec that combines them.
//!
//! Where things live:
//! - one file per family of rewards, each a plain function over already-parsed, frame-resolved
//!   values ([`box_overlap`], [`point`], [`detection`], [`length`], [`repetition`], [`format`],
//!   [`confidence`], [`gated`]), so each can be tested with hand-computed numbers and no parser;
//! - [`input`]: one JSONL record (completion, target, what the rollout did with tools) and how the
//!   answer and the target are brought into one frame;
//! - [`spec`]: the TOML reward spec (named, weighted components with parameters);
//! - [`batch`]: scoring a batch of records against a spec, in parallel.
//!
//! A reward never panics on model output: an answer that cannot be parsed, or whose coordinates fit
//! no frame, scores the reward's floor (0 for most) and is reported, never raised.

pub mod assignment;
pub mod batch;
pub mod box_overlap;
pub mod confidence;
pub mod detection;
pub mod format;
pub mod gated;
pub mod input;
pub mod length;
pub mod point;
pub mod repetition;
pub mod spec;

use crate::geometry::{BBox, LabeledBox, Point};

pub use batch::{ParseInfo, Scored, score_batch, score_one, score_parsed};
pub use input::{InputError, RewardInput, Target, TargetBox, ToolUse};
pub use spec::{RewardSpec, SpecError};

/// What the model answered, with coordinates already converted to the scene's frame.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Prediction {
    /// Boxes in listing order; an unlabeled box has label `""` (VLM-R1's convention).
    pub boxes: Vec<LabeledBox>,
    /// Click points in listing order: points as given, boxes by their centre, a tool call's
    /// coordinate.
    pub clicks: Vec<Point>,
    /// The model answered "None" (no such object).
    pub no_objects: bool,
}

impl Prediction {
    /// The first predicted box: what single-target rewards score.
    pub fn first_box(&self) -> Option<&BBox> {
        self.boxes.first().map(|b| &b.bbox)
    }

    /// The first click point: what point rewards score.
    pub fn first_click(&self) -> Option<Point> {
        self.clicks.first().copied()
    }

    /// No boxes and no points (an explicit "None" or an empty list).
    pub fn is_empty(&self) -> bool {
        self.boxes.is_empty() && self.clicks.is_empty()
    }

    /// Keeps the first `max` boxes and the first `max` clicks; returns how many boxes (or clicks,
    /// if more) were left out. Matching is quadratic or worse in the boxes, and a model can list
    /// thousands.
    pub fn truncate(&mut self, max: usize) -> usize {
        let excess = self.boxes.len().max(self.clicks.len()).saturating_sub(max);
        self.boxes.truncate(max);
        self.clicks.truncate(max);
        excess
    }
}

/// Everything a reward may look at for one sample, in one common frame.
#[derive(Clone, Copy, Debug)]
pub struct Scene<'a> {
    /// Ground-truth boxes.
    pub targets: &'a [LabeledBox],
    /// The target says explicitly that there is no such object.
    pub target_none: bool,
    /// The answer, or `None` when it could not be parsed or given a frame.
    pub prediction: Option<&'a Prediction>,
    /// Width and height of the whole image in the scene's frame, when known.
    pub image_extent: Option<crate::frame::Size>,
    /// Boxes the answer listed past the spec's `max_boxes`, left out of `prediction`: rewards over
    /// the box list count them as predictions that matched nothing.
    pub excess_boxes: usize,
}

impl Scene<'_> {
    /// Whether the target has no object to find (an explicit "none" or an empty box list).
    pub fn expects_nothing(&self) -> bool {
        self.target_none || self.targets.is_empty()
    }

    /// Score of a single-target reward when there is no box to find: `best` if the model said
    /// "None" (a correct refusal), `worst` otherwise.
    pub fn refusal_score(&self, best: f64, worst: f64) -> f64 {
        match self.prediction {
            Some(p) if p.no_objects => best,
            _ => worst,
        }
    }

    /// The best value of `score` over every target box: against several targets a single answer
    /// is scored by the one it fits best.
    pub fn best_over_targets(&self, score: impl Fn(&BBox) -> f64) -> f64 {
        self.targets
            .iter()
            .map(|t| score(&t.bbox))
            .fold(f64::NEG_INFINITY, f64::max)
    }
}
