//! Grounding accuracy as ScreenSpot, ScreenSpot-Pro and OSWorld-G score it, for `groundrl.eval.grounding`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::json;

use groundrl_score::data::Sample;
use groundrl_score::data::error::from_json_value;
use groundrl_score::frame::Frame;
use groundrl_score::metrics::grounding::{EvalOptions, GroundingError, evaluate, read_predictions};
use groundrl_score::resize::PixelBudget;

use crate::RecordError;
use crate::reward::field_json;

/// The report as JSON (`report`) and as the CLI prints it (`text`). `samples` are groundrl samples
/// (dicts or JSON text), `predictions` the lines of a predictions file (dicts or JSON text).
#[pyfunction]
#[pyo3(signature = (samples, predictions, model_frame = "resized", detect_frame = false, min_pixels = 3136, max_pixels = 12_845_056))]
pub fn grounding_json(
    py: Python<'_>,
    samples: Vec<Bound<'_, PyAny>>,
    predictions: Vec<Bound<'_, PyAny>>,
    model_frame: &str,
    detect_frame: bool,
    min_pixels: u64,
    max_pixels: u64,
) -> PyResult<String> {
    let model_frame: Frame = model_frame
        .parse()
        .map_err(|e| PyValueError::new_err(format!("model_frame: {e}")))?;
    let options = EvalOptions {
        model_frame,
        detect_frame,
        budget: PixelBudget {
            min_pixels,
            max_pixels,
        },
    };
    let samples = read_samples(&samples)?;
    let lines = predictions
        .iter()
        .enumerate()
        .map(|(i, p)| field_json(i, "prediction", p).map(|v| v.to_string()))
        .collect::<PyResult<Vec<_>>>()?
        .join("\n");
    let report = py.detach(|| {
        let predictions = read_predictions(&lines)?;
        evaluate(&samples, &predictions, &options)
    });
    let report = report.map_err(grounding_error)?;
    Ok(json!({"report": report, "text": report.to_text()}).to_string())
}

fn read_samples(samples: &[Bound<'_, PyAny>]) -> PyResult<Vec<Sample>> {
    samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let value = field_json(i, "sample", s)?;
            from_json_value(value)
                .map_err(|e| RecordError::new_err(format!("sample {i}: {}: {}", e.field, e.problem)))
        })
        .collect()
}

/// Prediction errors name a 1-based line of a file; here the predictions are a list, so name the index.
fn grounding_error(e: GroundingError) -> PyErr {
    match e {
        GroundingError::Prediction { line, field, problem } => {
            RecordError::new_err(format!("prediction {}: {field}: {problem}", line - 1))
        }
        other => RecordError::new_err(other.to_string()),
    }
}
