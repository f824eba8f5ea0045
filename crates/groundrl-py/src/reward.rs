//! Reward specs: loaded from TOML text, scoring batches of (completion, target) on all cores.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use rayon::prelude::*;
use serde_json::{Map, Value};

use groundrl_score::data::error::from_json_value;
use groundrl_score::reward::input::{InputError, Target};
use groundrl_score::reward::{RewardInput, RewardSpec, Scored, score_one};

use crate::convert::{to_json, type_name};
use crate::{RecordError, SpecError};

/// The reward specs the package ships, by name: the benchmark specs (pixel frame) and
/// `configs/rewards/`, compiled in so that they load from any folder.
const BUILTIN_SPECS: &[(&str, &str)] = &[
    ("ap", include_str!("../../../scripts/bench/reward-specs/ap.toml")),
    (
        "iou",
        include_str!("../../../scripts/bench/reward-specs/iou.toml"),
    ),
    (
        "weighted_sum",
        include_str!("../../../scripts/bench/reward-specs/weighted_sum.toml"),
    ),
    (
        "length-only",
        include_str!("../../../configs/rewards/length-only.toml"),
    ),
    (
        "synthetic-click",
        include_str!("../../../configs/rewards/synthetic-click.toml"),
    ),
    (
        "synthetic-click-only",
        include_str!("../../../configs/rewards/synthetic-click-only.toml"),
    ),
    (
        "tool-gated",
        include_str!("../../../configs/rewards/tool-gated.toml"),
    ),
    (
        "words-length",
        include_str!("../../../configs/rewards/words-length.toml"),
    ),
];

/// The built-in specs: `(name, TOML text)`, in a fixed order.
#[pyfunction]
pub fn builtin_specs() -> Vec<(&'static str, &'static str)> {
    BUILTIN_SPECS.to_vec()
}

/// Per record: the total, each component's value (spec order), whether the answer was read.
type Batch = (Vec<f64>, Vec<Vec<f64>>, Vec<bool>);

#[pyclass(module = "groundrl._groundrl", name = "NativeRewardSpec", frozen)]
pub struct NativeRewardSpec {
    spec: RewardSpec,
}

#[pymethods]
impl NativeRewardSpec {
    #[new]
    fn new(text: &str) -> PyResult<Self> {
        let spec = RewardSpec::from_toml(text).map_err(|e| SpecError::new_err(e.to_string()))?;
        Ok(Self { spec })
    }

    /// Component names in the spec's order.
    fn component_names(&self) -> Vec<String> {
        self.spec.components().iter().map(|c| c.name.clone()).collect()
    }

    /// Component weights in the spec's order (the total is `Σ weight * value`).
    fn component_weights(&self) -> Vec<f64> {
        self.spec.components().iter().map(|c| c.weight).collect()
    }

    /// Scores `completions[i]` against `targets[i]` (a dict, or its JSON text); `num_tokens` and
    /// `tool_use`, when given, hold one entry (or None) per record.
    #[pyo3(signature = (completions, targets, num_tokens = None, tool_use = None))]
    fn score(
        &self,
        py: Python<'_>,
        completions: Vec<Bound<'_, PyAny>>,
        targets: Vec<Bound<'_, PyAny>>,
        num_tokens: Option<Vec<Option<u64>>>,
        tool_use: Option<Vec<Bound<'_, PyAny>>>,
    ) -> PyResult<Batch> {
        let n = completions.len();
        check_len("targets", targets.len(), n)?;
        check_len("num_tokens", num_tokens.as_ref().map_or(n, Vec::len), n)?;
        check_len("tool_use", tool_use.as_ref().map_or(n, Vec::len), n)?;
        let mut records = Vec::with_capacity(n);
        for (i, (completion, target)) in completions.into_iter().zip(&targets).enumerate() {
            let mut record = Map::new();
            record.insert(
                "completion".into(),
                Value::String(completion_text(i, &completion)?),
            );
            let mut target = field_json(i, "target", target)?;
            drop_nulls(&mut target);
            record.insert("target".into(), target);
            if let Some(tokens) = num_tokens.as_ref().and_then(|t| t[i]) {
                record.insert("num_tokens".into(), tokens.into());
            }
            if let Some(tools) = &tool_use {
                record.insert("tool_use".into(), field_json(i, "tool_use", &tools[i])?);
            }
            records.push(record);
        }
        let scored = py.detach(|| score_records(&self.spec, &records));
        Ok(columns(scored?, self.spec.components().len()))
    }
}

/// The completion's text; a str that is not valid Unicode (a lone surrogate) is refused by name.
fn completion_text(record: usize, completion: &Bound<'_, PyAny>) -> PyResult<String> {
    completion.extract::<String>().map_err(|e| {
        let problem = if completion.is_instance_of::<PyString>() {
            e.value(completion.py()).to_string()
        } else {
            format!("expected a str, got {}", type_name(completion))
        };
        PyTypeError::new_err(format!("record {record}: completion: {problem}"))
    })
}

fn check_len(name: &str, len: usize, expected: usize) -> PyResult<()> {
    if len == expected {
        return Ok(());
    }
    Err(PyValueError::new_err(format!(
        "{name}: {len} entries for {expected} completions; give one per completion"
    )))
}

/// `value` as JSON; a string is taken as JSON text (datasets often store the target that way).
pub fn field_json(record: usize, field: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    // Checked before extracting: a failed extraction builds a Python exception, which costs more
    // than converting a small target.
    if let Ok(text) = value.cast::<PyString>().map(|s| s.extract::<String>()) {
        let text = text.map_err(|e| RecordError::new_err(format!("record {record}: {field}: {e}")))?;
        return serde_json::from_str(&text)
            .map_err(|e| RecordError::new_err(format!("record {record}: {field}: not JSON: {e}")));
    }
    to_json(value).map_err(|e| {
        let path = if e.path.is_empty() {
            field.to_string()
        } else {
            format!("{field}.{}", e.field())
        };
        RecordError::new_err(format!(
            "record {record}: {}: {}",
            path.replace(".[", "["),
            e.problem
        ))
    })
}

/// Removes the keys whose value is null, in `value` and the objects it nests: a `datasets` or
/// Parquet struct column gives every row every key, None where the row has no value, and groundrl's
/// targets read an absent key as its default.
fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// Reads and scores every record in parallel; the first bad record (lowest index) is the error.
fn score_records(spec: &RewardSpec, records: &[Map<String, Value>]) -> PyResult<Vec<Scored>> {
    let results: Vec<_> = records
        .par_iter()
        .map(|record| RewardInput::from_json_object(record).and_then(|input| score_one(spec, &input)))
        .collect();
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.map_err(|e| RecordError::new_err(format!("record {i}: {}", located(e, &records[i])))))
        .collect()
}

/// The error, with the field inside the target named when the reader gave only `target` (serde's
/// messages for a box list or a frame do not say which element): the target is read again with its
/// path tracked. groundrl's Parquet layout (`targets` inside) keeps the reader's message.
fn located(e: InputError, record: &Map<String, Value>) -> String {
    let target = record.get("target");
    if e.field == "target"
        && let Some(target) = target.filter(|t| t.get("targets").is_none())
        && let Err(found) = from_json_value::<Target>(target.clone())
        && found.field != "record"
    {
        return format!("target.{}: {}", found.field, found.problem).replace(".[", "[");
    }
    e.to_string()
}

fn columns(scored: Vec<Scored>, components: usize) -> Batch {
    let mut per_component = vec![Vec::with_capacity(scored.len()); components];
    let (mut totals, mut parsed) = (Vec::with_capacity(scored.len()), Vec::with_capacity(scored.len()));
    for s in scored {
        totals.push(s.total);
        parsed.push(s.parse.ok);
        for (column, value) in per_component.iter_mut().zip(s.components) {
            column.push(value);
        }
    }
    (totals, per_component, parsed)
}
