//! `data lint`: text problems in instructions and prompts that slow training down, and targets no
//! answer can hit.
//!
//! Seed 004 §5.1: one missing space ("motorcycle.Output") roughly halved the speed at which accuracy
//! rose. The rules here find that and its relatives; each finding names the sample and the text field.

use std::fmt;

use groundrl_score::data::{Content, Sample, Task};

use super::check::target_outside_image;

/// What a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// "motorcycle.Output": a sentence ends and the next begins without a space.
    MissingSpace,
    DoubledSpace,
    /// `<think>` without `</think>`, or the reverse.
    UnbalancedTag,
    /// `{{ x }}`, `{% ... %}` or `{name}` left in the text.
    UnfilledVariable,
    /// The text asks for one answer format while the sample expects another.
    FormatMismatch,
    /// A target lies wholly outside its image (by the declared size): training skips the sample.
    TargetOutsideImage,
}

impl Rule {
    pub fn name(self) -> &'static str {
        match self {
            Rule::MissingSpace => "missing-space",
            Rule::DoubledSpace => "doubled-space",
            Rule::UnbalancedTag => "unbalanced-tag",
            Rule::UnfilledVariable => "unfilled-variable",
            Rule::FormatMismatch => "format-mismatch",
            Rule::TargetOutsideImage => "target-outside-image",
        }
    }
}

/// One problem in one text field of one sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub sample_id: String,
    /// `instruction`, `prompt[i].content[j]`, `prompt` or `targets`.
    pub field: String,
    pub rule: Rule,
    /// What was found, with a little context.
    pub detail: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}: {}",
            self.sample_id,
            self.field,
            self.rule.name(),
            self.detail
        )
    }
}

/// Every finding in `samples`, in sample order.
pub fn lint(samples: &[Sample]) -> Vec<Finding> {
    samples.iter().flat_map(lint_sample).collect()
}

/// The findings of one sample: each text field on its own, then the format across the prompt, then
/// its targets against its image's declared size ([`target_outside_image`], what training skips).
pub fn lint_sample(sample: &Sample) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (field, text) in texts(sample) {
        let mut found = |rule, detail| {
            findings.push(Finding {
                sample_id: sample.id.clone(),
                field: field.clone(),
                rule,
                detail,
            })
        };
        for (rule, detail) in text_problems(text) {
            found(rule, detail);
        }
    }
    if let Some(detail) = format_mismatch(sample) {
        findings.push(Finding {
            sample_id: sample.id.clone(),
            field: "prompt".into(),
            rule: Rule::FormatMismatch,
            detail,
        });
    }
    if let Some(detail) = target_outside_image(sample) {
        findings.push(Finding {
            sample_id: sample.id.clone(),
            field: "targets".into(),
            rule: Rule::TargetOutsideImage,
            detail,
        });
    }
    findings
}

/// The instruction and every text part of the prompt, with their field names.
fn texts(sample: &Sample) -> Vec<(String, &str)> {
    let mut out = vec![("instruction".to_string(), sample.instruction.as_str())];
    for (i, message) in sample.prompt.iter().enumerate() {
        for (j, content) in message.content.iter().enumerate() {
            if let Content::Text { text } = content {
                out.push((format!("prompt[{i}].content[{j}]"), text.as_str()));
            }
        }
    }
    out
}

/// The single-text rules applied to `text`.
pub fn text_problems(text: &str) -> Vec<(Rule, String)> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    for w in 0..chars.len().saturating_sub(2) {
        let [a, b, c] = [chars[w], chars[w + 1], chars[w + 2]];
        if a.is_lowercase() && matches!(b, '.' | '!' | '?') && c.is_uppercase() {
            out.push((
                Rule::MissingSpace,
                format!("no space after {:?}", excerpt(&chars, w + 1)),
            ));
        }
    }
    if let Some(at) = text.find("  ") {
        out.push((
            Rule::DoubledSpace,
            format!("two spaces in {:?}", excerpt(&chars, text[..at].chars().count())),
        ));
    }
    out.extend(
        unbalanced_tags(text)
            .into_iter()
            .map(|d| (Rule::UnbalancedTag, d)),
    );
    out.extend(
        unfilled_variables(text)
            .into_iter()
            .map(|d| (Rule::UnfilledVariable, d)),
    );
    out
}

/// About 12 characters either side of `at`.
fn excerpt(chars: &[char], at: usize) -> String {
    chars[at.saturating_sub(12)..(at + 12).min(chars.len())]
        .iter()
        .collect()
}

/// `<name>` and `</name>` counts that differ, one message per tag name.
fn unbalanced_tags(text: &str) -> Vec<String> {
    let mut counts: std::collections::BTreeMap<&str, i64> = Default::default();
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find('>') else { break };
        let inner = &rest[..close];
        let (name, delta) = match inner.strip_prefix('/') {
            Some(name) => (name, -1),
            None => (inner, 1),
        };
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            *counts.entry(name).or_default() += delta;
        }
    }
    counts
        .into_iter()
        .filter(|&(_, n)| n != 0)
        .map(|(name, n)| format!("<{name}> opened {n:+} times more than closed"))
        .collect()
}

/// Template syntax left in the text: `{{`, `{%`, or a `{name}` placeholder.
fn unfilled_variables(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for marker in ["{{", "}}", "{%", "%}"] {
        if text.contains(marker) {
            out.push(format!("template marker {marker:?}"));
        }
    }
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        if let Some(close) = rest.find('}') {
            let name = &rest[..close];
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                out.push(format!("placeholder {{{name}}}"));
            }
        }
    }
    out
}

/// The answer formats a prompt text asks for, by their tell-tale phrases.
fn asked_formats(text: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if text.contains("bbox_2d") {
        out.push("json_list");
    } else if text.contains("[x1, y1, x2, y2]") {
        out.push("box");
    }
    if text.contains("(x, y)") || text.contains("point_2d") {
        out.push("point");
    }
    out
}

/// The formats whose answers the sample's reward can score: the prompt builder's `answer_format`
/// when recorded, else those that fit the task (a box answers a click by its centre).
fn expected_formats(sample: &Sample) -> Vec<&str> {
    if let Some(format) = sample.metadata.get("answer_format").and_then(|v| v.as_str()) {
        return vec![format];
    }
    match sample.task {
        Task::PointGrounding => vec!["point", "box"],
        Task::BoxGrounding | Task::ReferringExpression => vec!["box", "json_list"],
        Task::Detection => vec!["json_list"],
    }
}

/// A message when the prompt asks for a format the sample does not expect, or asks for none.
fn format_mismatch(sample: &Sample) -> Option<String> {
    if sample.prompt.is_empty() {
        return None;
    }
    let text: String = texts(sample)
        .into_iter()
        .skip(1)
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(" ");
    let asked = asked_formats(&text);
    let expected = expected_formats(sample);
    match asked.as_slice() {
        [] => Some(format!(
            "the prompt asks for no answer format; expected {}",
            expected.join(" or ")
        )),
        [one] if expected.contains(one) => None,
        _ => Some(format!(
            "the prompt asks for {}; expected {}",
            asked.join(" and "),
            expected.join(" or ")
        )),
    }
}
