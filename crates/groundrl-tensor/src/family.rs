//! Which model family an HF folder holds, read from its `config.json`'s `model_type` before any weight
//! is touched, so that a folder of an unsupported architecture is refused with the supported ones named
//! instead of failing later on a missing tensor; and the one place that builds a family's model
//! ([`Family::load`], [`Family::architecture`]): everything else holds a `dyn Model`
//! ([`crate::model`]).

use std::fmt;
use std::path::Path;

use groundrl_score::frame::Frame;
use serde_json::Value;
use tch::{Device, Kind};

use crate::model::{Architecture, Model};
use crate::model_error::ModelError;
use crate::qwen2_5_vl::{Qwen25Vl, Qwen25VlConfig};
use crate::qwen3_5::{Qwen35, Qwen35Config};
use crate::qwen3_vl::{Qwen3Vl, Qwen3VlConfig};

/// A model family groundrl can load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// [`crate::qwen2_5_vl::Qwen25Vl`].
    Qwen25Vl,
    /// [`crate::qwen3_vl::Qwen3Vl`] (the dense models; the MoE ones are `qwen3_vl_moe`).
    Qwen3Vl,
    /// [`crate::qwen3_5::Qwen35`] (the dense models; the MoE ones are `qwen3_5_moe`).
    Qwen35,
}

/// Why a folder's family is unknown.
#[derive(Debug, thiserror::Error)]
pub enum FamilyError {
    #[error("{path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {problem}")]
    Config { path: String, problem: String },
    #[error(
        "{path}: model_type `{model_type}` is not supported{}; groundrl loads {}",
        unsupported_note(model_type),
        Family::supported()
    )]
    Unsupported { path: String, model_type: String },
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// Why a known `model_type` is refused, for the message.
fn unsupported_note(model_type: &str) -> &'static str {
    match model_type {
        "qwen3_vl_moe" => " (Qwen3-VL's mixture-of-experts models: MoE decoders are not supported)",
        "qwen3_5_moe" => " (Qwen3.5's mixture-of-experts models: MoE decoders are not supported)",
        _ => "",
    }
}

impl Family {
    pub const ALL: [Family; 3] = [Family::Qwen25Vl, Family::Qwen3Vl, Family::Qwen35];

    /// The `model_type` of the family's `config.json`.
    pub fn model_type(self) -> &'static str {
        match self {
            Family::Qwen25Vl => "qwen2_5_vl",
            Family::Qwen3Vl => crate::qwen3_vl::MODEL_TYPE,
            Family::Qwen35 => crate::qwen3_5::MODEL_TYPE,
        }
    }

    /// The frame the family's models write coordinates in, as they were trained to: Qwen2.5-VL in
    /// absolute pixels of the image after `smart_resize`, Qwen3-VL and Qwen3.5 on a 0-1000 grid over the image
    /// (docs/design.md, "Coordinate frames are explicit"). A frame setting of `auto` is this frame.
    pub fn answer_frame(self) -> Frame {
        match self {
            Family::Qwen25Vl => Frame::Resized,
            Family::Qwen3Vl | Family::Qwen35 => Frame::Qwen1000,
        }
    }

    /// The family of a `model_type`, if groundrl loads it.
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.model_type() == model_type)
    }

    /// The family of the HF folder `dir`, from its `config.json`.
    pub fn of_folder(dir: &Path) -> Result<Self, FamilyError> {
        let path = dir.join("config.json");
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| FamilyError::Read {
            path: shown.clone(),
            source,
        })?;
        let config = |problem: String| FamilyError::Config {
            path: shown.clone(),
            problem,
        };
        let value: Value = serde_json::from_str(&text).map_err(|e| config(e.to_string()))?;
        let model_type = value.get("model_type").and_then(Value::as_str).ok_or_else(|| {
            config(format!(
                "no `model_type` string; groundrl loads {}",
                Self::supported()
            ))
        })?;
        Self::from_model_type(model_type).ok_or_else(|| FamilyError::Unsupported {
            path: shown.clone(),
            model_type: model_type.to_owned(),
        })
    }

    /// The model of the HF folder `dir` (of this family): its `config.json` and weights, parameters
    /// in `kind` on `device`.
    pub fn load(self, dir: &Path, device: Device, kind: Kind) -> Result<Box<dyn Model>, ModelError> {
        Ok(match self {
            Family::Qwen25Vl => Box::new(Qwen25Vl::load(dir, device, kind)?),
            Family::Qwen3Vl => Box::new(Qwen3Vl::load(dir, device, kind)?),
            Family::Qwen35 => Box::new(Qwen35::load(dir, device, kind)?),
        })
    }

    /// The architecture numbers of the `config.json` at `path` (of this family).
    pub fn architecture(self, path: &Path) -> Result<Architecture, ModelError> {
        Ok(match self {
            Family::Qwen25Vl => Qwen25VlConfig::load(path)?.architecture(),
            Family::Qwen3Vl => Qwen3VlConfig::load(path)?.architecture(),
            Family::Qwen35 => Qwen35Config::load(path)?.architecture(),
        })
    }

    /// The supported `model_type`s, comma-separated, for messages.
    pub fn supported() -> String {
        Self::ALL.map(Family::model_type).join(", ")
    }
}

/// The model of the HF folder `dir`, of whichever supported family its `config.json` names.
pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Box<dyn Model>, FamilyError> {
    Ok(Family::of_folder(dir)?.load(dir, device, kind)?)
}

/// The architecture numbers of the HF folder `dir`, of whichever supported family it holds.
pub fn architecture(dir: &Path) -> Result<Architecture, FamilyError> {
    Ok(Family::of_folder(dir)?.architecture(&dir.join("config.json"))?)
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.model_type())
    }
}

#[cfg(test)]
mod tests {
    use groundrl_score::data::Sample;
    use groundrl_score::frame::FrameChoice;
    use groundrl_score::metrics::grounding::{EvalOptions, evaluate, read_predictions};
    use groundrl_score::reward::{RewardInput, RewardSpec, score_one};

    use super::*;

    fn folder(config: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), config).unwrap();
        dir
    }

    #[test]
    fn each_supported_model_type_names_its_family() {
        for family in Family::ALL {
            let dir = folder(&format!(r#"{{"model_type": "{family}", "text_config": {{}}}}"#));
            assert_eq!(Family::of_folder(dir.path()).unwrap(), family);
        }
    }

    #[test]
    fn auto_is_the_frame_of_the_folders_family() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        for (folder, family, frame) in [
            ("qwen3_vl/tiny_a", Family::Qwen3Vl, Frame::Qwen1000),
            ("qwen3_vl/tiny_b", Family::Qwen3Vl, Frame::Qwen1000),
            ("qwen2_5_vl/tiny_a", Family::Qwen25Vl, Frame::Resized),
            ("qwen3_5/tiny", Family::Qwen35, Frame::Qwen1000),
        ] {
            let found = Family::of_folder(&fixtures.join(folder)).unwrap();
            assert_eq!(found, family, "{folder}");
            assert_eq!(FrameChoice::Auto.resolve(found.answer_frame()), frame, "{folder}");
            let named = FrameChoice::Named(Frame::Pixel);
            assert_eq!(named.resolve(found.answer_frame()), Frame::Pixel, "{folder}");
        }
    }

    /// Qwen3-VL's click on the top centre of a 1280x720 screenshot, `point_2d` on its 0-1000 grid:
    /// right when read in Qwen3-VL's frame, wrong when read in Qwen2.5-VL's resized pixels, where
    /// (500, 250) is left of and below the target.
    #[test]
    fn a_qwen3_vl_click_scores_in_its_familys_frame_only() {
        let spec = RewardSpec::from_toml(
            "model_frame = \"auto\"\ndetect_frame = false\n[components.click]\nkind = \"point_in_box\"\nweight = 1.0\n",
        )
        .unwrap();
        let record: serde_json::Map<String, Value> = serde_json::from_str(
            r#"{"completion": "```json\n[{\"point_2d\": [500, 250], \"label\": \"search\"}]\n```",
                "target": {"boxes": [{"bbox": [600, 150, 680, 210]}], "frame": "pixel",
                           "image_size": [1280, 720]}}"#,
        )
        .unwrap();
        let input = RewardInput::from_json_object(&record).unwrap();
        let score = |family: Family| {
            let scored = score_one(&spec.clone().for_model(family.answer_frame()), &input).unwrap();
            (scored.total, scored.parse.frame)
        };
        assert_eq!(score(Family::Qwen3Vl), (1.0, Some(Frame::Qwen1000)));
        assert_eq!(score(Family::Qwen25Vl), (0.0, Some(Frame::Resized)));
        let sample: Sample = serde_json::from_str(
            r#"{"id": "s", "source": "screenspot/web", "task": "point_grounding",
                "images": [{"path": "a.png", "width": 1280, "height": 720}], "instruction": "search",
                "targets": [{"shape": {"type": "box", "coords": [600, 150, 680, 210]}}],
                "frame": "pixel"}"#,
        )
        .unwrap();
        let predictions =
            read_predictions(r#"{"id": "s", "completion": "{\"point_2d\": [500, 250]}"}"#).unwrap();
        let accuracy = |family: Family| {
            let report = evaluate(
                std::slice::from_ref(&sample),
                &predictions,
                &EvalOptions::new(family.answer_frame()),
            )
            .unwrap();
            (report.overall.correct, report.model_frame)
        };
        assert_eq!(accuracy(Family::Qwen3Vl), (1, Frame::Qwen1000));
        assert_eq!(accuracy(Family::Qwen25Vl), (0, Frame::Resized));
    }

    #[test]
    fn other_folders_are_refused_with_the_supported_types_listed() {
        let err = Family::of_folder(folder(r#"{"model_type": "qwen3_vl_moe"}"#).path()).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, FamilyError::Unsupported { .. }), "{text}");
        assert!(
            text.contains("`qwen3_vl_moe`") && text.contains("qwen2_5_vl, qwen3_vl, qwen3_5"),
            "{text}"
        );
        let err = Family::of_folder(folder(r#"{"model_type": "qwen3_5_moe"}"#).path()).unwrap_err();
        assert!(err.to_string().contains("Qwen3.5's mixture-of-experts"), "{err}");
        let err = Family::of_folder(folder(r#"{"hidden_size": 8}"#).path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no `model_type`") && err.contains("qwen3_vl"),
            "{err}"
        );
        let err = Family::of_folder(folder("{").path()).unwrap_err();
        assert!(matches!(err, FamilyError::Config { .. }), "{err}");
        let missing = tempfile::tempdir().unwrap();
        let err = Family::of_folder(missing.path()).unwrap_err();
        assert!(matches!(err, FamilyError::Read { .. }) && err.to_string().contains("config.json"));
    }
}
