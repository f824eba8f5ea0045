//! The "Tools" section, for runs whose model was offered tools (the zoom tool): how
//! often it called them over training, how the calls went, and whether answers that used a tool were
//! more often right, by how small the target was (zooming should help most on the smallest ones).

use super::run::{EvalSet, Run};
use super::sections::{Section, Timeline, accuracy_cell, charts, no_steps, note, percent};
use crate::plot::{BarChart, BarSeries, LineChart, escape};
use crate::telemetry::EvalRecord;

/// Tags of the step scalars drawn (as `StepRecord::scalars` names them).
mod tags {
    pub const USE_RATE: &str = "tools/use_rate";
    pub const CALLS_PER_SAMPLE: &str = "tools/calls_per_sample";
}

/// Upper bounds (exclusive) of the target-size buckets and their names; sizes are the target's
/// smaller side over the image's (`telemetry::stats::target_size`).
const SIZE_BUCKETS: [(f64, &str); 4] = [
    (0.02, "< 2%"),
    (0.05, "2-5%"),
    (0.10, "5-10%"),
    (f64::INFINITY, ">= 10%"),
];
/// The bucket of records without a target size (written before sizes were recorded).
const UNKNOWN_SIZE: &str = "unknown";

/// Whether the run used tools: a training step with tool calls or an evaluated answer with one.
pub(super) fn used_tools(run: &Run) -> bool {
    run.steps.iter().any(|s| s.rollout.tool_calls_per_sample > 0.0)
        || run
            .evals
            .iter()
            .any(|set| set.records.iter().any(|r| r.tool_calls > 0))
}

/// Tool use over training, held-out accuracy with and without tools by target size, and the
/// outcomes of the calls.
pub(super) fn section(run: &Run, timeline: &Timeline) -> Section {
    let mut body = use_over_training(timeline);
    body.push_str(&by_target_size(&run.evals));
    body.push_str(&outcomes(run));
    Section {
        id: "tools",
        title: "Tools",
        body,
    }
}

/// The tool-use rate and the calls per completion, step by step.
fn use_over_training(timeline: &Timeline) -> String {
    if timeline.is_empty() {
        return no_steps();
    }
    let chart = LineChart {
        title: "Tool use in training".into(),
        x_label: "step".into(),
        y_label: "per completion".into(),
        series: timeline.series(&[tags::USE_RATE, tags::CALLS_PER_SAMPLE]),
        ..LineChart::default()
    };
    charts(&[chart.svg()])
}

/// The bucket names in order, with the unknown-size bucket only when some record needs it.
fn buckets(evals: &[&EvalSet]) -> Vec<&'static str> {
    let mut names: Vec<&str> = SIZE_BUCKETS.iter().map(|&(_, name)| name).collect();
    if evals
        .iter()
        .any(|set| set.records.iter().any(|r| r.target_size.is_none()))
    {
        names.push(UNKNOWN_SIZE);
    }
    names
}

/// The name of the bucket a record falls in.
fn bucket_of(record: &EvalRecord) -> &'static str {
    match record.target_size {
        None => UNKNOWN_SIZE,
        Some(size) => SIZE_BUCKETS
            .iter()
            .find(|&&(below, _)| size < below)
            .map_or(UNKNOWN_SIZE, |&(_, name)| name),
    }
}

/// Whether an evaluated answer used a tool: a call ran.
fn with_tools(record: &EvalRecord) -> bool {
    record.tool_calls_ok > 0
}

/// Per evaluation, a bar chart of accuracy with and without tools per target-size bucket (each
/// category names how many answers it holds, so a bar over a handful is seen as such), then one
/// table of the counts behind every bar.
fn by_target_size(evals: &[EvalSet]) -> String {
    let evals: Vec<&EvalSet> = evals.iter().filter(|set| !set.records.is_empty()).collect();
    if evals.is_empty() {
        return note("No held-out evaluation: no accuracy by target size.");
    }
    let names = buckets(&evals);
    let count = |set: &EvalSet, bucket: &str, tools: bool| {
        set.correct_of(|r| bucket_of(r) == bucket && with_tools(r) == tools)
    };
    let share = |(right, n): (usize, usize)| if n == 0 { f64::NAN } else { right as f64 / n as f64 };
    let svgs: Vec<String> = evals
        .iter()
        .map(|set| {
            let series = [(true, "with tools"), (false, "without tools")].map(|(tools, name)| {
                BarSeries::new(name, names.iter().map(|b| share(count(set, b, tools))).collect())
            });
            let categories = names
                .iter()
                .map(|b| format!("{b} (n={})", set.correct_of(|r| bucket_of(r) == *b).1))
                .collect();
            BarChart {
                title: format!("Accuracy by target size: {}", set.label),
                x_label: "target's smaller side, share of the image's".into(),
                y_label: "accuracy".into(),
                categories,
                series: series.into(),
                y_range: Some((0.0, 1.0)),
                show_values: true,
            }
            .svg()
        })
        .collect();
    let mut table = String::from(r#"<table class="tools-by-size"><thead><tr><th>target size</th>"#);
    for set in &evals {
        for kind in ["with tools", "without tools"] {
            table.push_str(&format!("<th>{}: {kind}</th>", escape(&set.label)));
        }
    }
    table.push_str("</tr></thead><tbody>");
    for bucket in &names {
        table.push_str(&format!("<tr><td>{}</td>", escape(bucket)));
        for set in &evals {
            for tools in [true, false] {
                table.push_str(&format!("<td>{}</td>", accuracy_cell(count(set, bucket, tools))));
            }
        }
        table.push_str("</tr>");
    }
    table.push_str("</tbody></table>");
    charts(&svgs) + &table
}

/// How the calls went: in training, each outcome's count and share of the calls; per evaluation,
/// how many answers called a tool and how many calls ran.
fn outcomes(run: &Run) -> String {
    let calls: u64 = run.steps.iter().map(|s| s.rollout.tool_calls).sum();
    let mut body = String::new();
    if calls == 0 {
        body.push_str(&note("No tool call in the logged training steps."));
    } else {
        let mut failures = std::collections::BTreeMap::<&str, u64>::new();
        for (outcome, &n) in run.steps.iter().flat_map(|s| &s.rollout.tool_call_failures) {
            *failures.entry(outcome.as_str()).or_default() += n;
        }
        let ok = calls.saturating_sub(failures.values().sum());
        body.push_str(
            r#"<table class="tool-outcomes"><thead><tr><th>outcome (training)</th><th>calls</th><th>share</th></tr></thead><tbody>"#,
        );
        for (outcome, n) in std::iter::once(("ok", ok)).chain(failures) {
            body.push_str(&format!(
                "<tr><td>{}</td><td>{n}</td><td>{}</td></tr>",
                escape(outcome),
                percent(n as f64 / calls as f64)
            ));
        }
        body.push_str("</tbody></table>");
    }
    let evals: Vec<&EvalSet> = run.evals.iter().filter(|set| !set.records.is_empty()).collect();
    if !evals.is_empty() {
        body.push_str(
            r#"<table class="tool-evals"><thead><tr><th>evaluation</th><th>answers</th><th>used a tool</th><th>calls</th><th>calls that ran</th></tr></thead><tbody>"#,
        );
        for set in evals {
            let n = set.records.len();
            let used = set.records.iter().filter(|r| with_tools(r)).count();
            let calls: u64 = set.records.iter().map(|r| u64::from(r.tool_calls)).sum();
            let ran: u64 = set.records.iter().map(|r| u64::from(r.tool_calls_ok)).sum();
            body.push_str(&format!(
                "<tr><td>{}</td><td>{n}</td><td>{used} ({})</td><td>{calls}</td><td>{ran}</td></tr>",
                escape(&set.label),
                percent(used as f64 / n as f64)
            ));
        }
        body.push_str("</tbody></table>");
    }
    body
}
