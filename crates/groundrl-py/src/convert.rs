//! Python values to JSON values, so that records given as dicts and lists go through the same
//! checked readers as the CLI's JSON lines (one set of rules, one set of error messages).

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// A value that has no JSON form, with the path of the field that holds it (`target.boxes[0].bbox`).
#[derive(Debug)]
pub struct ConvertError {
    pub path: Vec<String>,
    pub problem: String,
}

impl ConvertError {
    fn new(problem: impl Into<String>) -> Self {
        Self {
            path: Vec::new(),
            problem: problem.into(),
        }
    }

    fn under(mut self, segment: String) -> Self {
        self.path.push(segment);
        self
    }

    /// The field path, outermost first (`target.boxes[0]`); `record` for the value itself.
    pub fn field(&self) -> String {
        let mut field = String::new();
        for segment in self.path.iter().rev() {
            if !segment.starts_with('[') && !field.is_empty() {
                field.push('.');
            }
            field.push_str(segment);
        }
        if field.is_empty() { "record".into() } else { field }
    }
}

/// Converts `obj`: None, bool, int, float (finite), str, dict with str keys, list, tuple, and
/// anything with a `tolist()` method (numpy arrays and scalars, as datasets loaded from Parquet hold).
pub fn to_json(obj: &Bound<'_, PyAny>) -> Result<Value, ConvertError> {
    to_json_within(obj, MAX_DEPTH)
}

/// Nesting allowed, as serde_json allows in JSON text: deeper values would overflow the stack.
const MAX_DEPTH: usize = 128;

fn to_json_within(obj: &Bound<'_, PyAny>, depth: usize) -> Result<Value, ConvertError> {
    let Some(depth) = depth.checked_sub(1) else {
        return Err(ConvertError::new(format!(
            "nested deeper than {MAX_DEPTH} levels"
        )));
    };
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        return int_to_json(obj);
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return float_to_json(f.value());
    }
    if obj.is_instance_of::<PyString>() {
        return obj
            .extract::<String>()
            .map(Value::String)
            .map_err(|e| ConvertError::new(e.to_string()));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        return dict_to_json(d, depth);
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return seq_to_json(l.iter(), depth);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return seq_to_json(t.iter(), depth);
    }
    if let Ok(listed) = obj.call_method0("tolist") {
        return to_json_within(&listed, depth);
    }
    Err(ConvertError::new(format!(
        "a value of type {} has no JSON form",
        type_name(obj)
    )))
}

/// The Python type's name, for messages.
pub fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

fn int_to_json(obj: &Bound<'_, PyAny>) -> Result<Value, ConvertError> {
    if let Ok(i) = obj.extract::<i64>() {
        return Ok(Value::Number(i.into()));
    }
    if let Ok(u) = obj.extract::<u64>() {
        return Ok(Value::Number(u.into()));
    }
    Err(ConvertError::new("integer out of the 64-bit range"))
}

fn float_to_json(f: f64) -> Result<Value, ConvertError> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| ConvertError::new(format!("{f} is not a finite number")))
}

fn dict_to_json(d: &Bound<'_, PyDict>, depth: usize) -> Result<Value, ConvertError> {
    let mut map = Map::with_capacity(d.len());
    for (k, v) in d.iter() {
        let key: String = k
            .extract()
            .map_err(|_| ConvertError::new("dict keys must be strings"))?;
        let value = to_json_within(&v, depth).map_err(|e| e.under(key.clone()))?;
        map.insert(key, value);
    }
    Ok(Value::Object(map))
}

fn seq_to_json<'py>(
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    depth: usize,
) -> Result<Value, ConvertError> {
    items
        .enumerate()
        .map(|(i, v)| to_json_within(&v, depth).map_err(|e| e.under(format!("[{i}]"))))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}
