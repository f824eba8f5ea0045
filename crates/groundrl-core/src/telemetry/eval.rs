//! The record of one evaluated sample: what the model answered on a held-out sample and how it scored.
//!
//! An evaluation writes one [`EvalRecord`] per sample as a JSON line to `RUN_DIR/eval/<label>.jsonl`
//! (`before.jsonl`, `after.jsonl`, ...), with [`super::JsonlLog`]; the HTML report reads them back to
//! compute held-out accuracy per label and source, draw calibration, and show sample screenshots with
//! the answer drawn over the targets. Everything geometric is in the original image's pixels, so a
//! reader needs no knowledge of the model's frame or resize.

use serde::{Deserialize, Serialize};

/// One evaluated sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    /// The sample's id (`Sample::id`).
    pub id: String,
    /// The dataset it came from (`Sample::source`).
    pub source: String,
    /// The image path as the sample stores it (relative paths are relative to the dataset's folder).
    pub image: String,
    /// The original image's size in pixels.
    pub width: u32,
    pub height: u32,
    pub instruction: String,
    /// Target boxes `[x1, y1, x2, y2]` in original pixels.
    pub targets: Vec<[f64; 4]>,
    /// The model's raw output.
    pub completion: String,
    /// The answer's click point in original pixels (a box answer's centre), `None` when nothing parsed.
    pub point: Option<[f64; 2]>,
    /// The answer's box in original pixels, when it gave one.
    pub pred_box: Option<[f64; 4]>,
    pub correct: bool,
    /// Total reward of the completion under the run's reward spec.
    pub reward: f64,
    /// The confidence the model stated last, in [0, 1], if it stated one: after a tool call, the one
    /// that goes with the final answer (the calibration diagram reads this one).
    pub confidence: Option<f64>,
    /// Tool calls the model ended a turn with, whatever became of them (0 in records written
    /// before tools existed, as are the next two).
    #[serde(default)]
    pub tool_calls: u32,
    /// Of those, the calls the tool ran and answered.
    #[serde(default)]
    pub tool_calls_ok: u32,
    /// How small the target is ([`super::stats::target_size`]), for accuracy by target size.
    #[serde(default)]
    pub target_size: Option<f64>,
    /// Completions sampled at the training temperature besides the greedy one, when the run asks
    /// for them (`trainer.eval_samples`): how far sampling reaches beyond the greedy answer
    /// (pass@k), the headroom GRPO can turn into greedy accuracy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<SampledAnswers>,
}

/// How many of a test sample's sampled completions were correct.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampledAnswers {
    pub n: u32,
    pub correct: u32,
}

/// What sampling at the training temperature reached over an evaluation's records: pass@k (the
/// samples with at least one correct of their k) and the correct share of all sampled answers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampledSummary {
    /// Completions sampled per sample (the first sampled record's).
    pub k: u32,
    /// Records with sampled answers.
    pub samples: usize,
    pub pass_at_k: usize,
    pub correct: usize,
    pub completions: usize,
}

impl SampledSummary {
    /// `None` when no record has sampled answers.
    pub fn of(records: &[EvalRecord]) -> Option<Self> {
        let sampled: Vec<SampledAnswers> = records.iter().filter_map(|r| r.sampled).collect();
        sampled.first().map(|first| Self {
            k: first.n,
            samples: sampled.len(),
            pass_at_k: sampled.iter().filter(|s| s.correct > 0).count(),
            correct: sampled.iter().map(|s| s.correct as usize).sum(),
            completions: sampled.iter().map(|s| s.n as usize).sum(),
        })
    }

    /// pass@k as a share of the samples.
    pub fn pass_rate(&self) -> f64 {
        self.pass_at_k as f64 / self.samples.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_one_json_object_with_the_documented_fields() {
        let record = EvalRecord {
            id: "synth-3".into(),
            source: "synth/easy".into(),
            image: "images/000003.png".into(),
            width: 320,
            height: 240,
            instruction: "click OK".into(),
            targets: vec![[10.0, 20.0, 50.0, 40.0]],
            completion: "(30, 30)".into(),
            point: Some([30.0, 30.0]),
            pred_box: None,
            correct: true,
            reward: 1.0,
            confidence: None,
            tool_calls: 2,
            tool_calls_ok: 1,
            target_size: Some(0.125),
            sampled: None,
        };
        let line = serde_json::to_string(&record).unwrap();
        let old_fields = r#"{"id":"synth-3","source":"synth/easy","image":"images/000003.png","width":320,"height":240,"instruction":"click OK","targets":[[10.0,20.0,50.0,40.0]],"completion":"(30, 30)","point":[30.0,30.0],"pred_box":null,"correct":true,"reward":1.0,"confidence":null"#;
        assert_eq!(
            line,
            format!(r#"{old_fields},"tool_calls":2,"tool_calls_ok":1,"target_size":0.125}}"#)
        );
        assert_eq!(serde_json::from_str::<EvalRecord>(&line).unwrap(), record);
        // A record written before tools existed reads with no call and no target size.
        let old = serde_json::from_str::<EvalRecord>(&format!("{old_fields}}}")).unwrap();
        assert_eq!((old.tool_calls, old.tool_calls_ok, old.target_size), (0, 0, None));
    }
}
