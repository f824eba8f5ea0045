//! `groundrl demo --study`: what GRPO adds beyond supervised fine-tuning run until it stops
//! improving, on held-out tasks like the training ones and unlike them.
//!
//! Each seed's run is one arm after the other, on the same training tasks:
//!
//! - **Supervised baseline.** The warm-up trains on the reference answers of the training pool (the
//!   very tasks GRPO then samples), validates every `sft.val_freq` steps on tasks of their own
//!   generator seed, stops after `sft.patience` validations without a better accuracy, and ends on
//!   the weights of its best validation. Its step cap allows several passes over the pool, more
//!   reference answers than the supervised-then-RL arm uses in all, so the baseline stops because
//!   validation stopped improving, not because its data ran out.
//! - **RL arm.** GRPO from that model on the same pool: one pass, no task the baseline did not see,
//!   no reference answer read (the reward only).
//!
//! The held-out sets are answered by the baseline (`before`), by the RL arm (`after`), and every
//! `trainer.held_out_freq` steps of both phases for the curves: the demo's own test set (in
//! distribution) and sets drawn from what training never drew ([`held_out_sets`]).

use std::path::{Path, PathBuf};

use groundrl_core::report::EvalSet;
use groundrl_core::synth::layout::Family;
use groundrl_core::synth::theme::{THEMES, Theme};
use groundrl_core::synth::variety::{Variety, Wording};
use groundrl_core::synth::{Difficulty, Knobs, Window};
use groundrl_score::metrics::gain::{Interval, mean_over_seeds};
use serde::Serialize;

/// What the study sets on top of the GPU demo's config: a cap of 1,600 warm-up steps (4 passes over
/// the 25,600-task pool at 64 a step), validation every 25 steps on all 500 validation tasks,
/// patience 4 (100 steps without gain), two rate drops (the first two plateaus lower the rate
/// tenfold instead of stopping), curves every 50 steps.
pub(super) const GPU_OVERRIDES: &[&str] = &[
    "sft.steps=1600",
    "sft.val_freq=25",
    "sft.patience=4",
    "sft.rate_drops=2",
    "trainer.val_samples=0",
    "trainer.held_out_freq=50",
];

/// The CPU demo's: a cap of 1,200 warm-up steps (4 passes over the 4,800-task pool at 16 a step),
/// validation every 50 steps, patience 3, two rate drops, curves every 100 steps.
pub(super) const CPU_OVERRIDES: &[&str] = &[
    "sft.steps=1200",
    "sft.val_freq=50",
    "sft.patience=3",
    "sft.rate_drops=2",
    "trainer.val_samples=0",
    "trainer.held_out_freq=100",
];

/// Generator seed of the validation tasks the warm-up stops on: no demo seed trains on it, and it is
/// not the test set's (`TEST_SYNTH_SEED`, one below).
pub(super) const VAL_SYNTH_SEED: u64 = 1_000_001;
/// Tasks of the validation set and of each out-of-distribution set, unless `--set-tasks` says.
pub(super) const SET_TASKS: usize = 500;

/// What screenshots and instructions a set is drawn from.
#[derive(Clone, Debug)]
pub(crate) struct Look {
    pub difficulty: Difficulty,
    pub size: (u32, u32),
    /// Where the window goes; `None`: the difficulty's own place (easy: the whole image).
    pub window: Option<Window>,
    pub variety: Variety,
}

impl Look {
    /// The demo's screenshots: easy, of one size, every layout and theme, click wording, the window
    /// where `window` says (`None`: filling the image).
    pub(crate) fn easy(size: (u32, u32), window: Option<Window>) -> Self {
        Self {
            difficulty: Difficulty::Easy,
            size,
            window,
            variety: Variety::default(),
        }
    }

    /// The generator's knobs for this look: its difficulty's, with its variety and window.
    pub(crate) fn knobs(&self) -> Knobs {
        let preset = self.difficulty.knobs();
        Knobs {
            variety: self.variety.clone(),
            window: self.window.unwrap_or(preset.window),
            ..preset
        }
    }
}

/// The layouts and themes the study trains on; the list layout (menu and list items) and the ocean
/// theme are held out.
fn seen_layouts() -> Vec<Family> {
    vec![Family::Toolbar, Family::Dialog]
}

fn seen_themes() -> Vec<&'static Theme> {
    THEMES.iter().filter(|t| t.name != "ocean").collect()
}

/// The study's training, validation and in-distribution test screenshots: the demo's easy ones at
/// `size` with their window where `window` says, of the seen layouts and themes, worded as clicks.
pub(super) fn training_look(size: (u32, u32), window: Option<Window>) -> Look {
    Look {
        variety: Variety {
            layouts: seen_layouts(),
            themes: seen_themes(),
            wording: Wording::Click,
        },
        ..Look::easy(size, window)
    }
}

/// The out-of-distribution sets, by name, each unlike `seen` (the [`training_look`]) in one way:
/// harder screenshots of the training size (more elements, look-alikes, smaller text), larger
/// screenshots (twice the side: four times the image tokens), a layout and its element kinds never
/// drawn, a theme never drawn, instructions worded otherwise.
pub(super) fn held_out_sets(seen: &Look) -> Vec<(&'static str, Look)> {
    let size = seen.size;
    let with = |change: &dyn Fn(&mut Look)| {
        let mut look = seen.clone();
        change(&mut look);
        look
    };
    vec![
        // Their presets' own window, placed anywhere, whatever the training look's.
        (
            "medium",
            with(&|l| (l.difficulty, l.window) = (Difficulty::Medium, None)),
        ),
        (
            "hard",
            with(&|l| (l.difficulty, l.window) = (Difficulty::Hard, None)),
        ),
        ("larger", with(&|l| l.size = (2 * size.0, 2 * size.1))),
        ("unseen-layout", with(&|l| l.variety.layouts = vec![Family::List])),
        (
            "unseen-theme",
            with(&|l| l.variety.themes = THEMES.iter().filter(|t| t.name == "ocean").collect()),
        ),
        ("paraphrased", with(&|l| l.variety.wording = Wording::Paraphrased)),
    ]
}

/// The out-of-distribution set of another task kind: "find all" detection tasks on the training
/// look, answered as a JSON list of boxes (the prompt asks for it) and scored by [`DETECTION_SPEC`]
/// where training scores one click.
pub(super) const DETECTION_SET: &str = "detection";

/// The detection set's reward: per-task COCO AP of the answer's boxes (VLM-R1's AP reward), read in
/// the model's frame, as training's.
pub(super) const DETECTION_SPEC: &str = "\
# The study's detection set: per-task COCO AP of the answered boxes (groundrl demo --study).
model_frame = \"auto\"
detect_frame = true

[components.ap]
kind = \"ap\"
weight = 1.0
";

/// A detection task is answered right when its AP (COCO's, averaged over IoU thresholds 0.50 to
/// 0.95) reaches this; a click task when the click is inside the box.
pub(super) const DETECTION_CORRECT_AP: f64 = 0.5;

/// Generator seed of out-of-distribution set `i` of [`held_out_sets`] (the detection set's is the
/// one after theirs).
pub(super) fn set_seed(i: usize) -> u64 {
    VAL_SYNTH_SEED + 1 + i as u64
}

/// Where a study keeps a set's drawn tasks: `data/<name>` of its output folder.
pub(super) fn set_dir(out: &Path, name: &str) -> PathBuf {
    out.join("data").join(name)
}

/// One held-out set's result in one seed's run: the supervised baseline against the RL arm.
#[derive(Clone, Debug, Serialize)]
pub(super) struct SetResult {
    pub set: String,
    pub tasks: usize,
    /// Accuracy of the supervised baseline (the converged warm-up) and of the RL arm.
    pub sft: f64,
    pub rl: f64,
    /// RL arm minus baseline, paired by task, with its 95% interval.
    pub gain: Interval,
    /// Held-out accuracy against steps: (`sft` or `grpo`, step, accuracy), in order.
    pub curve: Vec<(String, u64, f64)>,
}

impl SetResult {
    /// Reads set `set` of the run in `run_dir` (`eval/` for `test`, else `eval/<set>/`); `None`
    /// without both its `before` and `after` evaluations.
    pub(super) fn read(run_dir: &Path, set: &str) -> anyhow::Result<Option<Self>> {
        let eval = run_dir.join("eval");
        let dir = if set == "test" { eval } else { eval.join(set) };
        let (evals, _) = EvalSet::read_folder(&dir)?;
        let find = |label: &str| evals.iter().find(|e| e.label == label);
        let (Some(before), Some(after)) = (find("before"), find("after")) else {
            return Ok(None);
        };
        let Some(gain) = after.gain_over(before) else {
            return Ok(None);
        };
        let mut curve: Vec<(String, u64, f64)> = evals.iter().filter_map(curve_point).collect();
        curve.sort_by_key(|(phase, step, _)| (phase != "sft", *step));
        Ok(Some(Self {
            set: set.to_string(),
            tasks: after.records.len(),
            sft: accuracy(before),
            rl: accuracy(after),
            gain,
            curve,
        }))
    }
}

/// A curve point of an evaluation labelled `<phase>-step-NNNNNN`.
fn curve_point(set: &EvalSet) -> Option<(String, u64, f64)> {
    let (phase, step) = set.label.split_once("-step-")?;
    Some((phase.to_string(), step.parse().ok()?, accuracy(set)))
}

/// The share of right answers of an evaluation.
pub(super) fn accuracy(set: &EvalSet) -> f64 {
    let (right, n) = set.correct_of(|_| true);
    right as f64 / n.max(1) as f64
}

/// One set over the seeds.
#[derive(Debug, Serialize)]
pub(super) struct SetSummary {
    pub set: String,
    pub mean_sft: f64,
    pub mean_rl: f64,
    /// Mean over seeds of the RL arm's gain, with Student's t 95% interval.
    pub mean_gain: Option<Interval>,
    pub every_gain_above_zero: bool,
}

impl SetSummary {
    /// Each set of `seeds` (one list of set results per seed, sets in the same order).
    pub(super) fn of(seeds: &[&[SetResult]]) -> Vec<Self> {
        let Some(first) = seeds.first() else {
            return Vec::new();
        };
        (0..first.len())
            .map(|i| {
                let results: Vec<&SetResult> = seeds.iter().filter_map(|s| s.get(i)).collect();
                let gains: Vec<f64> = results.iter().map(|r| r.gain.value).collect();
                let mean = |f: fn(&SetResult) -> f64| {
                    results.iter().map(|r| f(r)).sum::<f64>() / results.len().max(1) as f64
                };
                Self {
                    set: first[i].set.clone(),
                    mean_sft: mean(|r| r.sft),
                    mean_rl: mean(|r| r.rl),
                    mean_gain: mean_over_seeds(&gains),
                    every_gain_above_zero: gains.iter().all(|&g| g > 0.0),
                }
            })
            .collect()
    }
}

/// Prints a seed's sets, one line each.
pub(super) fn print_sets(seed: u64, sets: &[SetResult]) {
    for r in sets {
        println!(
            "seed {seed}, {}: supervised {:.1}% -> RL {:.1}% on {} tasks, gain {}",
            r.set,
            100.0 * r.sft,
            100.0 * r.rl,
            r.tasks,
            gain_in_points(&r.gain)
        );
    }
}

/// A gain in points with its 95% interval: `+3.2 points (95% interval +1.0 to +5.4)`.
pub(super) fn gain_in_points(gain: &Interval) -> String {
    format!(
        "{:+.1} points (95% interval {:+.1} to {:+.1})",
        100.0 * gain.value,
        100.0 * gain.low,
        100.0 * gain.high
    )
}

/// Prints the sets over the seeds as a table.
pub(super) fn print_summary(sets: &[SetSummary], seeds: usize) {
    println!(
        "| held-out set | supervised | RL | mean gain over {seeds} seeds (points) | 95% t interval | every seed above 0 |"
    );
    println!("|---|---|---|---|---|---|");
    for s in sets {
        let (gain, interval) = s.mean_gain.map_or(("-".into(), "-".into()), |g| {
            (
                format!("{:+.1}", 100.0 * g.value),
                format!("{:+.1} to {:+.1}", 100.0 * g.low, 100.0 * g.high),
            )
        });
        println!(
            "| {} | {:.1}% | {:.1}% | {gain} | {interval} | {} |",
            s.set,
            100.0 * s.mean_sft,
            100.0 * s.mean_rl,
            if s.every_gain_above_zero { "yes" } else { "no" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every out-of-distribution set differs from the training look, each in its own way.
    #[test]
    fn each_held_out_set_changes_one_thing_training_never_drew() {
        let seen = training_look((224, 224), None);
        assert_eq!(seen.variety.layouts, vec![Family::Toolbar, Family::Dialog]);
        let themes: Vec<&str> = seen.variety.themes.iter().map(|t| t.name).collect();
        assert_eq!(themes, ["light", "dark"]);
        let sets = held_out_sets(&seen);
        let names: Vec<&str> = sets.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "medium",
                "hard",
                "larger",
                "unseen-layout",
                "unseen-theme",
                "paraphrased"
            ]
        );
        let changes = |look: &Look| {
            [
                look.difficulty != seen.difficulty,
                look.size != seen.size,
                look.window != seen.window,
                look.variety.layouts != seen.variety.layouts,
                look.variety.themes != seen.variety.themes,
                look.variety.wording != seen.variety.wording,
            ]
        };
        for (i, (name, look)) in sets.iter().enumerate() {
            let changed = changes(look);
            assert_eq!(changed.iter().filter(|&&c| c).count(), 1, "{name}");
            assert_eq!(changed[0], i < 2, "{name}");
        }
        assert_eq!(sets[2].1.size, (448, 448));
        assert_eq!(sets[3].1.variety.layouts, vec![Family::List]);
        assert_eq!(sets[4].1.variety.themes[0].name, "ocean");
        assert_eq!(sets[5].1.variety.wording, Wording::Paraphrased);
        assert!((0..sets.len()).all(|i| set_seed(i) > VAL_SYNTH_SEED));
        // Training with the window anywhere: every set has it there; with it filling the image,
        // every set but the medium and hard ones, whose presets place it anywhere.
        for (window, moved) in [(Window::Anywhere, 6), (Window::Full, 2)] {
            let sets = held_out_sets(&training_look((224, 224), Some(window)));
            let anywhere = |look: &Look| look.knobs().window == Window::Anywhere;
            assert_eq!(sets.iter().filter(|(_, look)| anywhere(look)).count(), moved);
            assert!(anywhere(&sets[0].1) && anywhere(&sets[1].1));
        }
    }
}
