//! The report's sections, each built from the [`Run`]: headline accuracy, run-health alarms, training curves, response
//! lengths, reward components, accuracy by source, calibration, curriculum figures, sample answers
//! and the config; and what every section draws with: its charts side by side, notes, percentages and
//! the step scalars as series. A section without data says why instead of drawing empty charts. The
//! tool-use section, shown only for runs whose model called tools, is [`super::tools`]'s.

use std::collections::{BTreeMap, BTreeSet};

use base64::prelude::{BASE64_STANDARD, Engine};

use super::run::{CONFIG_FILE, EVAL_DIR, EvalSet, METRICS_FILE, Run};
use crate::plot::{BarChart, BarSeries, LineChart, Marker, ReliabilityDiagram, Series, escape, format_value};
use crate::telemetry::{SampledSummary, StepRecord, check_curve};
use groundrl_score::metrics::gain::wilson;

/// Tags of the step scalars drawn (as [`StepRecord::scalars`] names them).
mod tags {
    pub const REWARD: &str = "reward/mean";
    pub const VAL_REWARD: &str = "train/val/reward";
    pub const ACCURACY: &str = "accuracy";
    pub const VAL_ACCURACY: &str = "train/val/accuracy";
    pub const LENGTH_MEAN: &str = "length/mean";
    pub const LENGTH_MAX: &str = "length/max";
    pub const TRUNCATED: &str = "length/truncated_share";
}

/// One part of the page.
pub(super) struct Section {
    /// The anchor the page's contents link to.
    pub(super) id: &'static str,
    pub(super) title: &'static str,
    pub(super) body: String,
}

/// Each scalar tag's `(step, value)` points, in log order.
pub(super) struct Timeline(BTreeMap<String, Vec<(f64, f64)>>);

impl Timeline {
    pub(super) fn new(steps: &[StepRecord]) -> Self {
        let mut tags: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for record in steps {
            for (tag, value) in record.scalars() {
                tags.entry(tag).or_default().push((record.step as f64, value));
            }
        }
        Self(tags)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The series of each of `tags` that was logged.
    pub(super) fn series(&self, tags: &[&str]) -> Vec<Series> {
        tags.iter()
            .filter_map(|&tag| Some(Series::new(tag, self.0.get(tag)?.clone())))
            .collect()
    }

    /// `reward/<component>/mean` of every reward component.
    fn component_tags(&self) -> Vec<&str> {
        self.0
            .keys()
            .map(String::as_str)
            .filter(|t| *t != tags::REWARD && t.starts_with("reward/") && t.ends_with("/mean"))
            .collect()
    }
}

/// `<p class="note">` with escaped text.
pub(super) fn note(text: &str) -> String {
    format!(r#"<p class="note">{}</p>"#, escape(text))
}

/// Charts side by side.
pub(super) fn charts(svgs: &[String]) -> String {
    format!(r#"<div class="charts">{}</div>"#, svgs.concat())
}

pub(super) fn percent(share: f64) -> String {
    format!("{:.1}%", 100.0 * share)
}

/// `right/n` and the accuracy, `–` for no answers.
pub(super) fn accuracy_cell((right, n): (usize, usize)) -> String {
    match n {
        0 => "–".to_string(),
        _ => format!("{} ({right}/{n})", percent(right as f64 / n as f64)),
    }
}

pub(super) fn no_steps() -> String {
    note(&format!("No training step logged yet ({METRICS_FILE})."))
}

fn no_evals() -> String {
    note(&format!("No held-out evaluation in {EVAL_DIR}/."))
}

/// Held-out accuracy per evaluation and its change from the first to the last, and the run's length.
pub(super) fn headline(run: &Run) -> Section {
    let mut body = String::new();
    if run.evals.is_empty() {
        body.push_str(&no_evals());
    } else {
        body.push_str(
            "<table class=\"headline\"><thead><tr><th>evaluation</th><th>samples</th><th>right</th>\
             <th>accuracy</th><th>95% interval</th><th>sampled pass@k</th><th>mean reward</th></tr></thead><tbody>",
        );
        for set in &run.evals {
            let (right, n) = set.correct_of(|_| true);
            let mean_reward = set.records.iter().map(|r| r.reward).sum::<f64>() / n.max(1) as f64;
            let (accuracy, interval, reward) = match wilson(right, n) {
                None => ("–".to_string(), "–".to_string(), "–".to_string()),
                Some(w) => (
                    percent(w.value),
                    format!("{} – {}", percent(w.low), percent(w.high)),
                    format_value(mean_reward),
                ),
            };
            body.push_str(&format!(
                r#"<tr><td>{}</td><td>{n}</td><td>{right}</td><td class="accuracy">{accuracy}</td><td>{interval}</td><td>{}</td><td>{reward}</td></tr>"#,
                escape(&set.label),
                pass_at_k(set)
            ));
        }
        body.push_str("</tbody></table>");
        body.push_str(&change(&run.evals));
    }
    match (run.steps.first(), run.steps.last()) {
        (Some(first), Some(last)) => body.push_str(&format!(
            r#"<p class="steps">{} training steps logged, steps {} to {} (epoch {}).</p>"#,
            run.steps.len(),
            first.step,
            last.step,
            last.epoch
        )),
        _ => body.push_str(&no_steps()),
    }
    Section {
        id: "headline",
        title: "Held-out accuracy",
        body,
    }
}

/// "after vs before: +50.0 points (25.0% → 75.0%)", for the first and last evaluations with
/// answers, with the 95% interval of the gain over the samples both answered.
fn change(evals: &[EvalSet]) -> String {
    let answered: Vec<(&EvalSet, f64)> = evals
        .iter()
        .filter_map(|set| {
            let (right, n) = set.correct_of(|_| true);
            (n > 0).then(|| (set, right as f64 / n as f64))
        })
        .collect();
    match (answered.first(), answered.last()) {
        (Some(&(from, a)), Some(&(to, b))) if answered.len() >= 2 => {
            let interval = to.gain_over(from).map_or(String::new(), |g| {
                format!(
                    "; 95% interval of the gain on the {} samples both answered: {:+.1} to {:+.1} points",
                    to.records.len().min(from.records.len()),
                    100.0 * g.low,
                    100.0 * g.high
                )
            });
            format!(
                r#"<p class="change">{} vs {}: <b>{:+.1} points</b> ({} → {}){interval}</p>"#,
                escape(&to.label),
                escape(&from.label),
                100.0 * (b - a),
                percent(a),
                percent(b)
            )
        }
        _ => String::new(),
    }
}

/// "71.2% (k = 8)": the share of samples with a correct answer among the ones sampled at the
/// training temperature, when the evaluation sampled any (`trainer.eval_samples`).
fn pass_at_k(set: &EvalSet) -> String {
    SampledSummary::of(&set.records).map_or("–".to_string(), |s| {
        format!("{} (k = {})", percent(s.pass_rate()), s.k)
    })
}

/// The run-health alarms the trainer raised, by step (the step records' `alarms`); `None` for a run
/// that raised none, so that a clean run's page does not carry an empty section.
pub(super) fn alarms(steps: &[StepRecord]) -> Option<Section> {
    let rows: String = steps
        .iter()
        .flat_map(|s| s.alarms.iter().map(move |a| (s.step, a)))
        .map(|(step, alarm)| format!("<tr><td>{step}</td><td>{}</td></tr>", escape(alarm)))
        .collect();
    (!rows.is_empty()).then(|| Section {
        id: "alarms",
        title: "Run-health alarms",
        body: format!(
            "<p>Raised while training, each when its condition started to hold (the thresholds are \
             the config's <code>[health]</code>).</p>\n<table><tr><th>step</th><th>alarm</th></tr>{rows}</table>"
        ),
    })
}

/// Reward and accuracy over steps, the best validation accuracy marked.
pub(super) fn training(timeline: &Timeline) -> Section {
    let body = if timeline.is_empty() {
        no_steps()
    } else {
        let reward = LineChart {
            title: "Reward".into(),
            x_label: "step".into(),
            y_label: "reward".into(),
            series: timeline.series(&[tags::REWARD, tags::VAL_REWARD]),
            ..LineChart::default()
        };
        let best_val = timeline.0.get(tags::VAL_ACCURACY).and_then(|points| {
            points
                .iter()
                .copied()
                .reduce(|best, p| if p.1 > best.1 { p } else { best })
        });
        let accuracy = LineChart {
            title: "Accuracy".into(),
            x_label: "step".into(),
            y_label: "accuracy".into(),
            series: timeline.series(&[tags::ACCURACY, tags::VAL_ACCURACY]),
            y_range: Some((0.0, 1.0)),
            marker: best_val.map(|(x, y)| Marker {
                x,
                y,
                label: format!("best val {}", percent(y)),
            }),
        };
        let mut body = charts(&[reward.svg(), accuracy.svg()]);
        body.push_str(&curve_note(timeline));
        body
    };
    Section {
        id: "training",
        title: "Reward and accuracy",
        body,
    }
}

/// Whether the training reward rose and stayed up ([`check_curve`]), in words.
fn curve_note(timeline: &Timeline) -> String {
    let rewards: Vec<f64> = timeline
        .0
        .get(tags::REWARD)
        .map(|points| points.iter().map(|p| p.1).collect())
        .unwrap_or_default();
    match check_curve(&rewards) {
        None => String::new(),
        Some(c) => format!(
            r#"<p class="curve">Training reward, moving average of {} steps: {} at the start, {} at the end; the end {} the best fifth of the run's averages ({}).</p>"#,
            c.window,
            format_value(c.start),
            format_value(c.end),
            if c.holds { "is within" } else { "fell below" },
            format_value(c.best_fifth)
        ),
    }
}

/// Response length in tokens (mean and longest) and the share cut at the token limit.
pub(super) fn lengths(timeline: &Timeline) -> Section {
    let body = if timeline.is_empty() {
        no_steps()
    } else {
        let tokens = LineChart {
            title: "Response length".into(),
            x_label: "step".into(),
            y_label: "tokens".into(),
            series: timeline.series(&[tags::LENGTH_MEAN, tags::LENGTH_MAX]),
            ..LineChart::default()
        };
        let truncated = LineChart {
            title: "Truncated at the token limit".into(),
            x_label: "step".into(),
            y_label: "share of completions".into(),
            series: timeline.series(&[tags::TRUNCATED]),
            y_range: Some((0.0, 1.0)),
            ..LineChart::default()
        };
        charts(&[tokens.svg(), truncated.svg()])
    };
    Section {
        id: "lengths",
        title: "Response length",
        body,
    }
}

/// Each reward component's mean over steps.
pub(super) fn components(timeline: &Timeline) -> Section {
    let tags = timeline.component_tags();
    let body = if timeline.is_empty() {
        no_steps()
    } else if tags.is_empty() {
        note("The reward spec has no named components.")
    } else {
        let chart = LineChart {
            title: "Reward components (mean)".into(),
            x_label: "step".into(),
            y_label: "reward".into(),
            series: timeline.series(&tags),
            ..LineChart::default()
        };
        charts(&[chart.svg()])
    };
    Section {
        id: "components",
        title: "Reward components",
        body,
    }
}

/// Held-out accuracy per source, one bar per evaluation, and the counts behind the bars.
pub(super) fn sources(evals: &[EvalSet]) -> Section {
    let names: BTreeSet<&str> = evals
        .iter()
        .flat_map(|set| set.records.iter().map(|r| r.source.as_str()))
        .collect();
    let body = if names.is_empty() {
        no_evals()
    } else {
        let count = |set: &EvalSet, source: &str| set.correct_of(|r| r.source == source);
        let series = evals.iter().map(|set| {
            let shares = names.iter().map(|&source| match count(set, source) {
                (_, 0) => f64::NAN,
                (right, n) => right as f64 / n as f64,
            });
            BarSeries::new(set.label.as_str(), shares.collect())
        });
        let chart = BarChart {
            title: "Held-out accuracy by source".into(),
            x_label: "source".into(),
            y_label: "accuracy".into(),
            categories: names.iter().map(|s| s.to_string()).collect(),
            series: series.collect(),
            y_range: Some((0.0, 1.0)),
            show_values: true,
        };
        let mut table = String::from(r#"<table class="sources"><thead><tr><th>source</th>"#);
        for set in evals {
            table.push_str(&format!("<th>{}</th>", escape(&set.label)));
        }
        table.push_str("</tr></thead><tbody>");
        for source in &names {
            table.push_str(&format!("<tr><td>{}</td>", escape(source)));
            for set in evals {
                table.push_str(&format!("<td>{}</td>", accuracy_cell(count(set, source))));
            }
            table.push_str("</tr>");
        }
        table.push_str("</tbody></table>");
        charts(&[chart.svg()]) + &table
    };
    Section {
        id: "sources",
        title: "Accuracy by source",
        body,
    }
}

/// A reliability diagram per evaluation whose answers stated a confidence: the final one (after a
/// tool call, the confidence stated with the answer, not the one stated before the call).
pub(super) fn calibration(evals: &[EvalSet]) -> Section {
    let mut diagrams = Vec::new();
    let mut silent = Vec::new();
    for set in evals {
        let answers: Vec<(f64, bool)> = set
            .records
            .iter()
            .filter_map(|r| Some((r.confidence?, r.correct)))
            .collect();
        if answers.is_empty() {
            silent.push(set.label.as_str());
        } else {
            diagrams.push(ReliabilityDiagram::new(format!("Calibration: {}", set.label), answers).svg());
        }
    }
    let body = match (evals.is_empty(), diagrams.is_empty()) {
        (true, _) => no_evals(),
        (false, true) => note(
            "No confidences stated: no evaluated answer gave one, so there is no calibration to show \
             (a prompt that asks for a confidence makes the model state one).",
        ),
        (false, false) => {
            let mut body = charts(&diagrams);
            if !silent.is_empty() {
                body.push_str(&note(&format!(
                    "No confidences stated in: {}.",
                    silent.join(", ")
                )));
            }
            body
        }
    };
    Section {
        id: "calibration",
        title: "Calibration",
        body,
    }
}

/// The curriculum's figures as images (kept apart from the page: their ids and styles cannot clash
/// with the report's), captioned with their paths.
pub(super) fn rounds(run: &Run) -> Section {
    let figures: String = run
        .rounds
        .iter()
        .map(|figure| {
            let path = escape(&figure.path);
            let data = BASE64_STANDARD.encode(&figure.svg);
            format!(
                r#"<figure class="round"><img alt="{path}" src="data:image/svg+xml;base64,{data}"><figcaption>{path}</figcaption></figure>"#
            )
        })
        .collect();
    Section {
        id: "rounds",
        title: "Curriculum rounds",
        body: format!(r#"<div class="charts">{figures}</div>"#),
    }
}

/// The sample answers of the last evaluation.
pub(super) fn samples(run: &Run) -> Section {
    let body = match run.evals.last() {
        None => no_evals(),
        Some(set) if run.samples.is_empty() => note(&format!("The {} evaluation has no records.", set.label)),
        Some(set) => {
            let figures: String = run.samples.iter().map(|s| s.html()).collect();
            format!(
                r#"<p>Answers of the <b>{}</b> evaluation: targets in green, the model's answer in red.</p><div class="samples">{figures}</div>"#,
                escape(&set.label)
            )
        }
    };
    Section {
        id: "samples",
        title: "Sample answers",
        body,
    }
}

/// The resolved config, verbatim.
pub(super) fn config(run: &Run) -> Section {
    let body = match &run.config {
        Some(text) => format!(r#"<pre class="config">{}</pre>"#, escape(text)),
        None => note(&format!("No {CONFIG_FILE} in the run folder.")),
    };
    Section {
        id: "config",
        title: "Config",
        body,
    }
}
