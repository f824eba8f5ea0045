//! The native half of the Python package `groundrl` (python/groundrl/ holds the Python half, which
//! wraps these functions in typed classes and numpy arrays).
//!
//! Everything here converts Python values to the inputs `groundrl-score` already checks, runs the
//! work with the GIL released (batches on all cores with rayon), and turns every failure into a
//! Python exception naming the record and field: no input may crash the interpreter.

mod coco;
mod convert;
mod grounding;
mod reward;

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use groundrl_score::parse::{Answer, parse_completion};
use groundrl_score::resize::{FACTOR, PixelBudget, smart_resize as resize};
use serde_json::{Value, json};

/// A batch allocates and frees many small values (the records converted from Python, the parsed
/// answers); glibc's allocator spent about a quarter of the scoring time in `perf` on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

create_exception!(
    groundrl,
    RecordError,
    PyValueError,
    "A record that cannot be read or scored; the message names the record and the field."
);
create_exception!(
    groundrl,
    SpecError,
    PyValueError,
    "A reward spec that does not load; the message names the component and key."
);
create_exception!(
    groundrl,
    CocoError,
    PyValueError,
    "COCO ground truth or detections that cannot be evaluated; the message names the record."
);

/// What the parser reads in one completion, as JSON: the answer with `"ok": true`, or `"ok": false`
/// with the failure's `reason` and `detail`.
#[pyfunction]
fn parse_json(py: Python<'_>, text: &str) -> String {
    py.detach(|| match parse_completion(text) {
        Ok(parsed) => json!({
            "ok": true,
            "answer": answer_json(&parsed.answer),
            "syntax": parsed.syntax,
            "frame_hint": parsed.frame_hint,
            "confidence": parsed.confidence,
            "structure": parsed.structure,
        }),
        Err(failure) => json!({"ok": false, "reason": failure.reason(), "detail": failure.to_string()}),
    })
    .to_string()
}

/// The answer as `{"kind": ..., ...}`: serde's internally tagged form cannot hold a list of boxes.
fn answer_json(answer: &Answer) -> Value {
    let labeled = |coords: &[f64], label: &Option<String>| json!({"coords": coords, "label": label});
    match answer {
        Answer::Boxes(boxes) => {
            json!({"kind": "boxes", "boxes": boxes.iter().map(|b| labeled(&b.coords, &b.label)).collect::<Vec<_>>()})
        }
        Answer::Points(points) => {
            json!({"kind": "points", "points": points.iter().map(|p| labeled(&p.coords, &p.label)).collect::<Vec<_>>()})
        }
        Answer::NoObjects => json!({"kind": "no_objects"}),
        Answer::ToolCall(call) => {
            json!({"kind": "tool_call", "name": call.name, "arguments": call.arguments})
        }
    }
}

/// Qwen2.5-VL's `smart_resize`: the resized `(height, width)`, multiples of 28 within the pixel budget.
#[pyfunction]
#[pyo3(signature = (height, width, factor = FACTOR, min_pixels = 3136, max_pixels = 12_845_056))]
fn smart_resize(
    height: u64,
    width: u64,
    factor: u32,
    min_pixels: u64,
    max_pixels: u64,
) -> PyResult<(u32, u32)> {
    if factor != FACTOR {
        return Err(PyValueError::new_err(format!(
            "factor: only Qwen2.5-VL's {FACTOR} (patch 14 x merge 2) is supported, got {factor}"
        )));
    }
    let budget = PixelBudget {
        min_pixels,
        max_pixels,
    };
    let resized = resize(height, width, budget).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((resized.height, resized.width))
}

#[pymodule]
fn _groundrl(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("RecordError", py.get_type::<RecordError>())?;
    m.add("SpecError", py.get_type::<SpecError>())?;
    m.add("CocoError", py.get_type::<CocoError>())?;
    m.add_function(wrap_pyfunction!(parse_json, m)?)?;
    m.add_function(wrap_pyfunction!(smart_resize, m)?)?;
    m.add_class::<reward::NativeRewardSpec>()?;
    m.add_function(wrap_pyfunction!(reward::builtin_specs, m)?)?;
    coco::register(m)?;
    m.add_function(wrap_pyfunction!(grounding::grounding_json, m)?)?;
    Ok(())
}
