//! The reward spec: a TOML file naming weighted reward components and their parameters.
//!
//! ```toml
//! model_frame = "resized"   # frame the model answers in (default: resized, Qwen2.5-VL)
//! detect_frame = true       # guess the frame from the numbers when they do not fit (default: true)
//! # min_pixels / max_pixels: smart_resize budget for records without `resized_size`
//! # max_boxes = 300: boxes (or points) of an answer that are scored; the rest are counted
//!
//! [components.iou]
//! kind = "iou"
//! weight = 0.6
//!
//! [components.length]
//! kind = "cosine_length"
//! weight = 0.2
//! correct_from = "iou"
//! correct_threshold = 0.5
//! max_length = 512
//! ```
//!
//! The total reward is `Σ weight * component`; every component's own value is reported too, in the
//! order of the file. A component may read another's value (`correct_from`, `task_from`: its
//! source). Unknown keys, unknown kinds, references to unknown components and dependency cycles are
//! refused when the spec is loaded, with the component named: a config that accepts a typo silently
//! trains with a reward nobody asked for. So are parameters that are not finite numbers (`nan`, `inf`) and
//! weights whose sum overflows: they would turn every reward into NaN.

use std::path::Path;

use serde::Deserialize;

use super::box_overlap::Overlap;
use super::confidence::ConfidenceParams;
use super::detection::{ApParams, WeightedSumParams};
use super::format::FormatParams;
use super::gated::{GateParams, ToolGainParams};
use super::length::{CosineLengthParams, LengthUnit};
use super::repetition::RepetitionParams;
use crate::frame::Frame;
use crate::resize::{DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, PixelBudget};

/// A loaded, validated reward spec.
#[derive(Clone, Debug, PartialEq)]
pub struct RewardSpec {
    /// The frame the model answers in.
    pub model_frame: Frame,
    /// Whether answers whose numbers do not fit `model_frame` may be read in another frame.
    pub detect_frame: bool,
    /// smart_resize budget for records that give no `resized_size`.
    pub budget: PixelBudget,
    /// Boxes (and points) of one answer that are scored; the rest are counted in
    /// [`super::ParseInfo::excess_boxes`] and, by box-list rewards, as unmatched predictions.
    pub max_boxes: usize,
    components: Vec<Component>,
    /// Component indices with every source before its user.
    eval_order: Vec<usize>,
    /// For each component, the one whose value it reads (`correct_from`, `task_from`), resolved.
    sources: Vec<Option<usize>>,
}

/// One named, weighted component.
#[derive(Clone, Debug, PartialEq)]
pub struct Component {
    pub name: String,
    pub weight: f64,
    pub kind: Kind,
}

/// The reward a component computes, with its parameters (`kind = "..."` in the TOML).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Kind {
    Iou(IouParams),
    Giou(NoParams),
    PointInBox(NoParams),
    GaussianPoint(NoParams),
    GaussianCoverage(NoParams),
    DenseDistance(NoParams),
    Ap(ApParams),
    WeightedSum(WeightedSumParams),
    CosineLength(CosineLengthParams),
    Repetition(RepetitionParams),
    Format(FormatParams),
    Confidence(ConfidenceParams),
    ToolGain(ToolGainParams),
    Gate(GateParams),
}

/// Parameters of the IoU reward.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IouParams {
    pub overlap: Overlap,
}

/// For rewards without parameters: refuses any key besides `kind` and `weight`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

impl Kind {
    /// The component whose value this one reads, if any, with the key that names it.
    fn source(&self) -> Option<(&'static str, &str)> {
        match self {
            Kind::CosineLength(p) => Some(("correct_from", &p.correct_from)),
            Kind::Confidence(p) => Some(("correct_from", &p.correct_from)),
            Kind::ToolGain(p) => Some(("task_from", &p.task_from)),
            _ => None,
        }
    }
}

/// Why a spec was refused.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read reward spec {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("reward spec: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("reward spec: components.{component}: {problem}")]
    Component { component: String, problem: String },
    #[error("reward spec: {0}")]
    Invalid(String),
}

/// The file as written, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    #[serde(default = "resized")]
    model_frame: Frame,
    #[serde(default = "yes")]
    detect_frame: bool,
    #[serde(default)]
    min_pixels: Option<u64>,
    #[serde(default)]
    max_pixels: Option<u64>,
    #[serde(default = "default_max_boxes")]
    max_boxes: usize,
    components: toml::Table,
}

/// Default [`RewardSpec::max_boxes`]: three times COCO's 100 detections per image, so that no
/// plausible answer is cut, while matching a capped answer stays well under a millisecond greedy.
pub const DEFAULT_MAX_BOXES: usize = 300;

fn default_max_boxes() -> usize {
    DEFAULT_MAX_BOXES
}

fn resized() -> Frame {
    Frame::Resized
}

fn yes() -> bool {
    true
}

impl RewardSpec {
    /// Reads and validates a spec file.
    pub fn load(path: &Path) -> Result<Self, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text)
    }

    /// Parses and validates a spec from TOML text.
    pub fn from_toml(text: &str) -> Result<Self, SpecError> {
        let file: SpecFile = toml::from_str(text)?;
        let budget = PixelBudget {
            min_pixels: file.min_pixels.unwrap_or(DEFAULT_MIN_PIXELS),
            max_pixels: file.max_pixels.unwrap_or(DEFAULT_MAX_PIXELS),
        };
        if budget.min_pixels > budget.max_pixels {
            return Err(SpecError::Invalid(format!(
                "min_pixels {} is larger than max_pixels {}",
                budget.min_pixels, budget.max_pixels
            )));
        }
        if file.max_boxes == 0 {
            return Err(SpecError::Invalid("max_boxes must be at least 1".into()));
        }
        let components = file
            .components
            .into_iter()
            .map(|(name, value)| parse_component(name, value))
            .collect::<Result<Vec<_>, _>>()?;
        if components.is_empty() {
            return Err(SpecError::Invalid(
                "no components: add at least one [components.NAME] table".into(),
            ));
        }
        let weights: f64 = components.iter().map(|c| c.weight.abs()).sum();
        if !weights.is_finite() {
            return Err(SpecError::Invalid(format!(
                "the weights' magnitudes add up to {weights}: totals would overflow"
            )));
        }
        let sources = sources(&components)?;
        let eval_order = evaluation_order(&components, &sources)?;
        Ok(Self {
            model_frame: file.model_frame,
            detect_frame: file.detect_frame,
            budget,
            max_boxes: file.max_boxes,
            components,
            eval_order,
            sources,
        })
    }

    /// Components in the order of the file.
    pub fn components(&self) -> &[Component] {
        &self.components
    }

    /// Indices into [`Self::components`], each after the component whose value it reads.
    pub fn eval_order(&self) -> &[usize] {
        &self.eval_order
    }

    /// Index of the component whose value component `i` reads (`correct_from`, `task_from`), if any.
    pub fn source(&self, i: usize) -> Option<usize> {
        self.sources[i]
    }

    /// The first component that needs the record's `num_tokens`, if any.
    pub fn needs_num_tokens(&self) -> Option<&str> {
        self.components.iter().find_map(|c| match &c.kind {
            Kind::CosineLength(p) if p.length_unit == LengthUnit::Tokens => Some(c.name.as_str()),
            _ => None,
        })
    }

    /// The first component that needs the image extent (the record's `image_size`), if any.
    pub fn needs_image_extent(&self) -> Option<&str> {
        self.components
            .iter()
            .find(|c| matches!(c.kind, Kind::DenseDistance(_)))
            .map(|c| c.name.as_str())
    }
}

/// One `[components.NAME]` table: `weight`, then the kind's own keys.
fn parse_component(name: String, value: toml::Value) -> Result<Component, SpecError> {
    let fail = |problem: String| SpecError::Component {
        component: name.clone(),
        problem,
    };
    let toml::Value::Table(mut table) = value else {
        return Err(fail("must be a table with `kind` and `weight`".into()));
    };
    let weight = match table.remove("weight") {
        Some(toml::Value::Float(w)) => w,
        Some(toml::Value::Integer(w)) => w as f64,
        Some(other) => return Err(fail(format!("weight must be a number, got {other}"))),
        None => return Err(fail("missing `weight`".into())),
    };
    if !weight.is_finite() {
        return Err(fail(format!("weight must be finite, got {weight}")));
    }
    if let Some((key, value)) = non_finite(&table) {
        return Err(fail(format!("{key} must be a finite number, got {value}")));
    }
    let kind: Kind = toml::Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| fail(e.message().into()))?;
    check_params(&kind).map_err(fail)?;
    Ok(Component { name, weight, kind })
}

/// Parameter ranges a type cannot express. `Err` is the problem in words (here, in
/// [`in_unit_interval`], [`finite`] and [`GateParams::check`]), which the caller files under the
/// component ([`SpecError::Component`]): a person fixes the spec, no caller acts on which check
/// failed.
fn check_params(kind: &Kind) -> Result<(), String> {
    match kind {
        Kind::WeightedSum(p) => {
            let weights_ok = p.position_weight >= 0.0 && p.completeness_weight >= 0.0;
            if !weights_ok || p.position_weight + p.completeness_weight <= 0.0 {
                return Err("position_weight and completeness_weight must be >= 0, not both 0".into());
            }
            in_unit_interval("iou_threshold", p.iou_threshold)
        }
        Kind::CosineLength(p) if p.max_length == 0 => Err("max_length must be positive".into()),
        Kind::CosineLength(p) => finite("correct_threshold", p.correct_threshold),
        Kind::Confidence(p) => finite("correct_threshold", p.correct_threshold),
        Kind::Gate(p) => p.check(),
        Kind::Repetition(p) if p.ngram == 0 => Err("ngram must be at least 1".into()),
        Kind::Repetition(p) if p.max_penalty.is_nan() || p.max_penalty > 0.0 => {
            Err(format!("max_penalty must be <= 0, got {}", p.max_penalty))
        }
        _ => Ok(()),
    }
}

/// The first parameter (at any depth) that is `nan` or `inf`, with its dotted key.
fn non_finite(table: &toml::Table) -> Option<(String, f64)> {
    table.iter().find_map(|(key, value)| match value {
        toml::Value::Float(f) if !f.is_finite() => Some((key.clone(), *f)),
        toml::Value::Table(inner) => non_finite(inner).map(|(k, f)| (format!("{key}.{k}"), f)),
        _ => None,
    })
}

fn in_unit_interval(key: &str, v: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(format!("{key} must be in [0, 1], got {v}"))
    }
}

fn finite(key: &str, v: f64) -> Result<(), String> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(format!("{key} must be finite, got {v}"))
    }
}

/// The component whose value each one reads; refuses unknown names and self-references.
fn sources(components: &[Component]) -> Result<Vec<Option<usize>>, SpecError> {
    let resolve = |(i, c): (usize, &Component)| {
        let Some((key, from)) = c.kind.source() else {
            return Ok(None);
        };
        match components.iter().position(|other| other.name == from) {
            Some(j) if j != i => Ok(Some(j)),
            Some(_) => Err(component_error(
                &c.name,
                &format!("{key} names the component itself"),
            )),
            None => Err(component_error(
                &c.name,
                &format!("{key} names {from:?}, which is not a component of this spec"),
            )),
        }
    };
    components.iter().enumerate().map(resolve).collect()
}

/// Orders components so each comes after its source; refuses cycles. Each component reads from at
/// most one other, so following the chain of sources from any component either ends or comes back:
/// a chain longer than the component count is a cycle.
fn evaluation_order(components: &[Component], sources: &[Option<usize>]) -> Result<Vec<usize>, SpecError> {
    let mut depth = vec![0usize; components.len()];
    for (i, d) in depth.iter_mut().enumerate() {
        let mut at = i;
        while let Some(next) = sources[at] {
            *d += 1;
            if *d > components.len() {
                return Err(component_error(
                    &components[i].name,
                    "its sources (correct_from, task_from) form a cycle",
                ));
            }
            at = next;
        }
    }
    let mut order: Vec<usize> = (0..components.len()).collect();
    order.sort_by_key(|&i| depth[i]);
    Ok(order)
}

fn component_error(name: &str, problem: &str) -> SpecError {
    SpecError::Component {
        component: name.to_string(),
        problem: problem.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
model_frame = "resized"
detect_frame = true
[components.length]
kind = "cosine_length"
weight = 0.2
correct_from = "iou"
correct_threshold = 0.5
max_length = 512
[components.iou]
kind = "iou"
weight = 0.6
[components.fmt]
kind = "format"
weight = 1
think_answer = true
"#;

    fn err(text: &str) -> String {
        RewardSpec::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn loads_in_file_order_and_evaluates_sources_first() {
        let spec = RewardSpec::from_toml(EXAMPLE).unwrap();
        let names: Vec<_> = spec.components().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["length", "iou", "fmt"]);
        assert_eq!(spec.components()[2].weight, 1.0);
        // length reads iou, so iou is evaluated before it
        let order = spec.eval_order();
        let pos = |i: usize| order.iter().position(|&x| x == i).unwrap();
        assert!(pos(1) < pos(0));
        assert_eq!(spec.needs_num_tokens(), Some("length"));
        assert_eq!(spec.budget, PixelBudget::default());
        match &spec.components()[0].kind {
            Kind::CosineLength(p) => {
                assert_eq!((p.min_wrong, p.max_correct, p.exceed_margin), (-10.0, 2.0, 16));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refuses_typos_with_the_component_named() {
        let e = err("[components.a]\nkind = \"iou\"\nweight = 1\noverlp = \"vlm_r1\"");
        assert!(e.contains("components.a") && e.contains("overlp"), "{e}");
        let e = err("[components.a]\nkind = \"iuo\"\nweight = 1");
        assert!(e.contains("components.a") && e.contains("iuo"), "{e}");
        let e = err("[components.a]\nkind = \"giou\"\nweight = 1\nextra = 2");
        assert!(e.contains("extra"), "{e}");
        let e = err("modelframe = \"pixel\"\n[components.a]\nkind = \"iou\"\nweight = 1");
        assert!(e.contains("modelframe"), "{e}");
        let e = err("[components.a]\nkind = \"iou\"");
        assert!(e.contains("missing `weight`"), "{e}");
        let e = err("[components.a]\nkind = \"repetition\"\nweight = 1\nmax_penalty = 0.5");
        assert!(e.contains("max_penalty must be <= 0"), "{e}");
        assert!(err("components = {}").contains("no components"));
    }

    #[test]
    fn refuses_unknown_references_and_cycles() {
        let e = err(
            "[components.len]\nkind = \"cosine_length\"\nweight = 1\ncorrect_from = \"acc\"\ncorrect_threshold = 0.5\nmax_length = 10",
        );
        assert!(e.contains("components.len") && e.contains("\"acc\""), "{e}");
        let cycle = "[components.a]\nkind = \"confidence\"\nweight = 1\ncorrect_from = \"b\"\ncorrect_threshold = 0.5\n\
                     [components.b]\nkind = \"confidence\"\nweight = 1\ncorrect_from = \"a\"\ncorrect_threshold = 0.5";
        assert!(err(cycle).contains("cycle"), "{}", err(cycle));
        let own = "[components.a]\nkind = \"confidence\"\nweight = 1\ncorrect_from = \"a\"\ncorrect_threshold = 0.5";
        assert!(err(own).contains("itself"));
    }

    #[test]
    fn tool_components_read_their_task_and_take_gate_defaults() {
        let spec = RewardSpec::from_toml(
            "[components.tool]\nkind = \"tool_gain\"\nweight = 0.3\ntask_from = \"iou\"\n\
             [components.gate]\nkind = \"gate\"\nweight = 0.1\ntau = 0.8\n\
             [components.iou]\nkind = \"iou\"\nweight = 0.6",
        )
        .unwrap();
        assert_eq!(spec.source(0), Some(2));
        assert_eq!(spec.source(1), None);
        let order = spec.eval_order();
        let pos = |i: usize| order.iter().position(|&x| x == i).unwrap();
        assert!(pos(2) < pos(0));
        let expected = GateParams {
            tau: 0.8,
            ..GateParams::default()
        };
        assert_eq!(spec.components()[1].kind, Kind::Gate(expected));

        let e = err("[components.tool]\nkind = \"tool_gain\"\nweight = 1\ntask_from = \"click\"");
        assert!(
            e.contains("components.tool") && e.contains("task_from names \"click\""),
            "{e}"
        );
        let e = err("[components.tool]\nkind = \"tool_gain\"\nweight = 1");
        assert!(e.contains("task_from"), "{e}");
        let cycle = "[components.a]\nkind = \"tool_gain\"\nweight = 1\ntask_from = \"b\"\n\
                     [components.b]\nkind = \"confidence\"\nweight = 1\ncorrect_from = \"a\"\ncorrect_threshold = 0.5";
        assert!(err(cycle).contains("cycle"), "{}", err(cycle));
        let e = err("[components.g]\nkind = \"gate\"\nweight = 1\ntua = 0.7");
        assert!(e.contains("components.g") && e.contains("tua"), "{e}");
        let e = err("[components.g]\nkind = \"gate\"\nweight = 1\nunnecessary = 0.5");
        assert!(e.contains("components.g") && e.contains("unnecessary"), "{e}");
    }

    #[test]
    fn refuses_non_finite_parameters_and_overflowing_weights() {
        let length = "[components.iou]\nkind = \"iou\"\nweight = 1\n\
                      [components.len]\nkind = \"cosine_length\"\nweight = 1\ncorrect_from = \"iou\"\n\
                      correct_threshold = 0.5\nmax_length = 100\n";
        assert_eq!(
            err(&format!("{length}min_wrong = nan")),
            "reward spec: components.len: min_wrong must be a finite number, got NaN"
        );
        assert_eq!(
            err(&format!("{length}max_correct = -inf")),
            "reward spec: components.len: max_correct must be a finite number, got -inf"
        );
        let e = err("[components.w]\nkind = \"weighted_sum\"\nweight = 1\nposition_weight = inf");
        assert_eq!(
            e,
            "reward spec: components.w: position_weight must be a finite number, got inf"
        );
        let huge = "[components.a]\nkind = \"iou\"\nweight = 1e308\n\
                    [components.b]\nkind = \"giou\"\nweight = -1e308\n";
        assert_eq!(
            err(huge),
            "reward spec: the weights' magnitudes add up to inf: totals would overflow"
        );
        assert_eq!(
            err("max_boxes = 0\n[components.a]\nkind = \"iou\"\nweight = 1"),
            "reward spec: max_boxes must be at least 1"
        );
        let spec = RewardSpec::from_toml("[components.a]\nkind = \"iou\"\nweight = 1").unwrap();
        assert_eq!(spec.max_boxes, DEFAULT_MAX_BOXES);
    }
}
