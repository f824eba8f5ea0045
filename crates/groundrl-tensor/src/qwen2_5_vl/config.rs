//! Qwen2.5-VL's `config.json`, read the way transformers 5.17 reads it and written back in its layout.
//!
//! Two layouts exist in the wild: the released checkpoints keep the language model's fields at the top
//! level (`hidden_size`, `rope_theta`, `rope_scaling: {type: mrope, mrope_section}`), while transformers
//! 5.x saves them under `text_config` with `rope_parameters`. Both are read; when `text_config` is
//! present its fields win, as in transformers. Missing fields take transformers' class defaults.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::model_error::ModelError;

/// The language model's shape (Qwen2 decoder with M-RoPE).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TextConfig {
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_hidden_layers: i64,
    pub num_attention_heads: i64,
    pub num_key_value_heads: i64,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    /// Rotary frequency chunks given to the (t, h, w) position components; sums to head_dim / 2.
    pub mrope_section: Vec<i64>,
    pub max_position_embeddings: i64,
    pub bos_token_id: Option<i64>,
    /// One id or several; generation stops on any.
    pub eos_token_ids: Vec<i64>,
    pub pad_token_id: Option<i64>,
}

impl TextConfig {
    pub fn head_dim(&self) -> i64 {
        self.hidden_size / self.num_attention_heads
    }
}

/// The vision tower's shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VisionConfig {
    pub depth: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_heads: i64,
    pub in_channels: i64,
    pub patch_size: i64,
    pub temporal_patch_size: i64,
    pub spatial_merge_size: i64,
    /// Window edge in input pixels (112 = 4x4 merged tokens for patch 14, merge 2).
    pub window_size: i64,
    pub out_hidden_size: i64,
    /// Blocks that attend over the whole image; the others attend within windows.
    pub fullatt_block_indexes: Vec<i64>,
    pub tokens_per_second: i64,
    pub rope_theta: f64,
}

impl VisionConfig {
    pub fn head_dim(&self) -> i64 {
        self.hidden_size / self.num_heads
    }

    /// Values of one flattened patch row: channels x temporal x patch x patch (1176 for Qwen2.5-VL).
    pub fn patch_dim(&self) -> i64 {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }
}

/// The whole model's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Qwen25VlConfig {
    pub text: TextConfig,
    pub vision: VisionConfig,
    pub image_token_id: i64,
    pub video_token_id: i64,
    pub vision_start_token_id: i64,
    pub vision_end_token_id: i64,
    /// The output projection shares the token embedding (Qwen2.5-VL-3B); then no `lm_head.weight` is stored.
    pub tie_word_embeddings: bool,
}

impl Qwen25VlConfig {
    /// Reads `config.json` from a file.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        read_config(path, Self::from_json)
    }

    /// Reads either config layout (see the module docs) and checks that the shapes fit together.
    /// `Err` (here, in [`Self::validate`] and in the field readers) is a message naming the field at
    /// fault, which [`Self::load`] files under the file's path ([`ModelError::File`]): a model is
    /// never built from a config that fails, so no caller acts on which check it was.
    pub fn from_json(value: &Value) -> Result<Self, String> {
        let top = value.as_object().ok_or("config is not a JSON object")?;
        let text_obj = match top.get("text_config") {
            Some(Value::Object(t)) => t,
            Some(_) => return Err("`text_config` is not an object".into()),
            None => top,
        };
        let empty = Map::new();
        let vision_obj = match top.get("vision_config") {
            Some(Value::Object(v)) => v,
            Some(_) => return Err("`vision_config` is not an object".into()),
            None => &empty,
        };
        let fields = Fields(top);
        let tied = fields.bool("tie_word_embeddings", false)?
            || Fields(text_obj).bool("tie_word_embeddings", false)?;
        let config = Self {
            text: text_config(Fields(text_obj), fields)?,
            vision: vision_config(Fields(vision_obj))?,
            image_token_id: fields.int("image_token_id", 151655)?,
            video_token_id: fields.int("video_token_id", 151656)?,
            vision_start_token_id: fields.int("vision_start_token_id", 151652)?,
            vision_end_token_id: fields.int("vision_end_token_id", 151653)?,
            tie_word_embeddings: tied,
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks the relations the model relies on, so a bad config fails here and not inside a matmul.
    pub fn validate(&self) -> Result<(), String> {
        let t = &self.text;
        let v = &self.vision;
        let positive = [
            ("vocab_size", t.vocab_size),
            ("hidden_size", t.hidden_size),
            ("intermediate_size", t.intermediate_size),
            ("num_hidden_layers", t.num_hidden_layers),
            ("num_attention_heads", t.num_attention_heads),
            ("num_key_value_heads", t.num_key_value_heads),
            ("vision_config.depth", v.depth),
            ("vision_config.hidden_size", v.hidden_size),
            ("vision_config.num_heads", v.num_heads),
            ("vision_config.patch_size", v.patch_size),
            ("vision_config.spatial_merge_size", v.spatial_merge_size),
            ("vision_config.temporal_patch_size", v.temporal_patch_size),
        ];
        if let Some((name, value)) = positive.iter().find(|(_, value)| *value <= 0) {
            return Err(format!("`{name}` must be positive, found {value}"));
        }
        if t.hidden_size % t.num_attention_heads != 0 || t.num_attention_heads % t.num_key_value_heads != 0 {
            return Err(format!(
                "hidden_size {} / num_attention_heads {} / num_key_value_heads {} do not divide evenly",
                t.hidden_size, t.num_attention_heads, t.num_key_value_heads
            ));
        }
        let rotary_half: i64 = t.mrope_section.iter().sum();
        if t.mrope_section.len() != 3 || rotary_half * 2 != t.head_dim() {
            return Err(format!(
                "mrope_section {:?} must have 3 entries summing to head_dim / 2 = {}",
                t.mrope_section,
                t.head_dim() / 2
            ));
        }
        if v.hidden_size % v.num_heads != 0 || v.head_dim() % 4 != 0 {
            return Err(format!(
                "vision hidden_size {} must split into num_heads {} heads of a size divisible by 4",
                v.hidden_size, v.num_heads
            ));
        }
        if v.window_size % (v.patch_size * v.spatial_merge_size) != 0 {
            return Err(format!(
                "vision window_size {} is not a multiple of patch_size x spatial_merge_size",
                v.window_size
            ));
        }
        if let Some(bad) = v.fullatt_block_indexes.iter().find(|&&i| i < 0 || i >= v.depth) {
            return Err(format!(
                "vision fullatt_block_indexes has {bad}, outside 0..{}",
                v.depth
            ));
        }
        if v.out_hidden_size != t.hidden_size {
            return Err(format!(
                "vision out_hidden_size {} differs from the language model's hidden_size {}",
                v.out_hidden_size, t.hidden_size
            ));
        }
        let ids = [
            self.image_token_id,
            self.video_token_id,
            self.vision_start_token_id,
            self.vision_end_token_id,
        ];
        if let Some(id) = ids.iter().find(|&&id| id < 0 || id >= t.vocab_size) {
            return Err(format!(
                "special token id {id} is outside the vocabulary (size {})",
                t.vocab_size
            ));
        }
        Ok(())
    }

    /// The config in transformers 5.17's layout (`text_config`, `rope_parameters`), which it loads as is.
    pub fn to_json(&self) -> Value {
        let t = &self.text;
        let v = &self.vision;
        let eos = match t.eos_token_ids.as_slice() {
            [one] => json!(one),
            many => json!(many),
        };
        json!({
            "architectures": ["Qwen2_5_VLForConditionalGeneration"],
            "model_type": "qwen2_5_vl",
            "image_token_id": self.image_token_id,
            "video_token_id": self.video_token_id,
            "vision_start_token_id": self.vision_start_token_id,
            "vision_end_token_id": self.vision_end_token_id,
            "tie_word_embeddings": self.tie_word_embeddings,
            "text_config": {
                "model_type": "qwen2_5_vl_text",
                "vocab_size": t.vocab_size,
                "hidden_size": t.hidden_size,
                "intermediate_size": t.intermediate_size,
                "num_hidden_layers": t.num_hidden_layers,
                "num_attention_heads": t.num_attention_heads,
                "num_key_value_heads": t.num_key_value_heads,
                "hidden_act": "silu",
                "rms_norm_eps": t.rms_norm_eps,
                "max_position_embeddings": t.max_position_embeddings,
                "rope_parameters": {"rope_type": "default", "rope_theta": t.rope_theta, "mrope_section": t.mrope_section},
                "bos_token_id": t.bos_token_id,
                "eos_token_id": eos,
                "pad_token_id": t.pad_token_id,
                "tie_word_embeddings": self.tie_word_embeddings,
            },
            "vision_config": {
                "model_type": "qwen2_5_vl_vision",
                "depth": v.depth,
                "hidden_size": v.hidden_size,
                "intermediate_size": v.intermediate_size,
                "num_heads": v.num_heads,
                "in_channels": v.in_channels,
                "patch_size": v.patch_size,
                "temporal_patch_size": v.temporal_patch_size,
                "spatial_merge_size": v.spatial_merge_size,
                "window_size": v.window_size,
                "out_hidden_size": v.out_hidden_size,
                "fullatt_block_indexes": v.fullatt_block_indexes,
                "tokens_per_second": v.tokens_per_second,
                "hidden_act": "silu",
                "rope_parameters": {"rope_type": "axial", "rope_theta": v.rope_theta},
            },
        })
    }
}

fn text_config(f: Fields, top: Fields) -> Result<TextConfig, String> {
    f.require_silu("hidden_act")?;
    let heads = f.int("num_attention_heads", 64)?;
    // Released checkpoints: `rope_scaling: {type: "mrope", mrope_section}` and a top-level `rope_theta`;
    // transformers 5.x: `rope_parameters: {rope_theta, mrope_section}`.
    let rope = f
        .object("rope_parameters")?
        .or(f.object("rope_scaling")?)
        .map(Fields);
    let rope_theta = match rope.map(|r| r.opt_float("rope_theta")).transpose()?.flatten() {
        Some(theta) => theta,
        None => f.float("rope_theta", top.float("rope_theta", 1_000_000.0)?)?,
    };
    let mrope_section = match rope {
        Some(r) => r.int_list("mrope_section", &[16, 24, 24])?,
        None => vec![16, 24, 24],
    };
    let eos_token_ids = match f.0.get("eos_token_id").or(top.0.get("eos_token_id")) {
        None => vec![151645],
        Some(Value::Null) => vec![],
        Some(Value::Array(ids)) => ids
            .iter()
            .map(Value::as_i64)
            .collect::<Option<_>>()
            .ok_or("`eos_token_id` list")?,
        Some(id) => vec![id.as_i64().ok_or("`eos_token_id` is not an integer")?],
    };
    Ok(TextConfig {
        vocab_size: f.int("vocab_size", 152064)?,
        hidden_size: f.int("hidden_size", 8192)?,
        intermediate_size: f.int("intermediate_size", 29568)?,
        num_hidden_layers: f.int("num_hidden_layers", 80)?,
        num_attention_heads: heads,
        num_key_value_heads: f.opt_int("num_key_value_heads")?.unwrap_or(heads),
        rms_norm_eps: f.float("rms_norm_eps", 1e-5)?,
        rope_theta,
        mrope_section,
        max_position_embeddings: f.int("max_position_embeddings", 32768)?,
        bos_token_id: f.opt_int("bos_token_id")?,
        eos_token_ids,
        pad_token_id: f.opt_int("pad_token_id")?,
    })
}

fn vision_config(f: Fields) -> Result<VisionConfig, String> {
    f.require_silu("hidden_act")
        .map_err(|e| format!("vision_config: {e}"))?;
    let rope_theta = match f.object("rope_parameters")? {
        Some(r) => Fields(r).float("rope_theta", 10000.0)?,
        None => 10000.0,
    };
    let heads = match f.opt_int("num_heads")? {
        Some(h) => h,
        None => f.int("num_attention_heads", 16)?,
    };
    let vision = |e: String| format!("vision_config: {e}");
    Ok(VisionConfig {
        depth: f.int("depth", 32).map_err(vision)?,
        hidden_size: f.int("hidden_size", 3584).map_err(vision)?,
        intermediate_size: f.int("intermediate_size", 3420).map_err(vision)?,
        num_heads: heads,
        in_channels: f.int("in_channels", 3).map_err(vision)?,
        patch_size: f.int("patch_size", 14).map_err(vision)?,
        temporal_patch_size: f.int("temporal_patch_size", 2).map_err(vision)?,
        spatial_merge_size: f.int("spatial_merge_size", 2).map_err(vision)?,
        window_size: f.int("window_size", 112).map_err(vision)?,
        out_hidden_size: f.int("out_hidden_size", 3584).map_err(vision)?,
        fullatt_block_indexes: f
            .int_list("fullatt_block_indexes", &[7, 15, 23, 31])
            .map_err(vision)?,
        tokens_per_second: f.int("tokens_per_second", 4).map_err(vision)?,
        rope_theta,
    })
}

/// Typed reads of a JSON object's fields with defaults; errors name the field.
/// A family's `config.json` at `path` read by `parse` (its `from_json`), whose message naming the
/// field at fault is filed under the file's path.
pub(crate) fn read_config<T>(
    path: &Path,
    parse: impl FnOnce(&Value) -> Result<T, String>,
) -> Result<T, ModelError> {
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| ModelError::file(path, e))?;
    parse(&value).map_err(|e| ModelError::file(path, e))
}

#[derive(Clone, Copy)]
pub(crate) struct Fields<'a>(pub(crate) &'a Map<String, Value>);

impl<'a> Fields<'a> {
    pub(crate) fn opt_int(self, key: &str) -> Result<Option<i64>, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| format!("`{key}` is not an integer: {v}")),
        }
    }

    pub(crate) fn int(self, key: &str, default: i64) -> Result<i64, String> {
        Ok(self.opt_int(key)?.unwrap_or(default))
    }

    pub(crate) fn opt_float(self, key: &str) -> Result<Option<f64>, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| format!("`{key}` is not a number: {v}")),
        }
    }

    pub(crate) fn float(self, key: &str, default: f64) -> Result<f64, String> {
        Ok(self.opt_float(key)?.unwrap_or(default))
    }

    pub(crate) fn bool(self, key: &str, default: bool) -> Result<bool, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| format!("`{key}` is not true/false: {v}")),
        }
    }

    pub(crate) fn object(self, key: &str) -> Result<Option<&'a Map<String, Value>>, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(o)) => Ok(Some(o)),
            Some(v) => Err(format!("`{key}` is not an object: {v}")),
        }
    }

    pub(crate) fn int_list(self, key: &str, default: &[i64]) -> Result<Vec<i64>, String> {
        match self.0.get(key) {
            None | Some(Value::Null) => Ok(default.to_vec()),
            Some(Value::Array(items)) => items
                .iter()
                .map(Value::as_i64)
                .collect::<Option<_>>()
                .ok_or_else(|| format!("`{key}` has a non-integer")),
            Some(v) => Err(format!("`{key}` is not a list: {v}")),
        }
    }

    /// Only SiLU-gated MLPs exist in Qwen2.5-VL; another activation would silently compute something else.
    fn require_silu(self, key: &str) -> Result<(), String> {
        match self.0.get(key).and_then(Value::as_str) {
            None | Some("silu") => Ok(()),
            Some(other) => Err(format!("`{key}` is {other:?}; only \"silu\" is supported")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The released Qwen2.5-VL-3B-Instruct config's fields (flat layout), as its config.json on the Hub has
    /// them.
    fn released_3b() -> Value {
        json!({
            "architectures": ["Qwen2_5_VLForConditionalGeneration"],
            "hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
            "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 128000,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "tie_word_embeddings": true, "bos_token_id": 151643, "eos_token_id": 151645,
            "vision_start_token_id": 151652, "vision_end_token_id": 151653, "image_token_id": 151655,
            "vision_config": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                "out_hidden_size": 2048, "fullatt_block_indexes": [7, 15, 23, 31], "window_size": 112,
                "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "tokens_per_second": 2}
        })
    }

    #[test]
    fn reads_the_released_flat_layout() {
        let c = Qwen25VlConfig::from_json(&released_3b()).unwrap();
        assert_eq!(
            (
                c.text.hidden_size,
                c.text.num_hidden_layers,
                c.text.num_key_value_heads
            ),
            (2048, 36, 2)
        );
        assert_eq!(c.text.head_dim(), 128);
        assert_eq!(c.text.mrope_section, vec![16, 24, 24]);
        assert_eq!(c.text.rope_theta, 1e6);
        assert_eq!(c.text.eos_token_ids, vec![151645]);
        assert!(c.tie_word_embeddings);
        assert_eq!(
            (c.vision.hidden_size, c.vision.head_dim(), c.vision.patch_dim()),
            (1280, 80, 1176)
        );
        assert_eq!(c.vision.rope_theta, 10000.0);
        assert_eq!(c.video_token_id, 151656);
    }

    #[test]
    fn to_json_round_trips_through_the_nested_layout() {
        let c = Qwen25VlConfig::from_json(&released_3b()).unwrap();
        let again = Qwen25VlConfig::from_json(&c.to_json()).unwrap();
        assert_eq!(c, again);
        assert_eq!(
            c.to_json()["text_config"]["rope_parameters"]["mrope_section"],
            json!([16, 24, 24])
        );
    }

    #[test]
    fn nested_text_config_wins_over_top_level_fields() {
        let mut v = released_3b();
        v["text_config"] = json!({"hidden_size": 2048, "num_hidden_layers": 2, "num_attention_heads": 16,
            "num_key_value_heads": 2, "vocab_size": 151936,
            "rope_parameters": {"rope_theta": 5.0, "mrope_section": [16, 24, 24]}});
        let c = Qwen25VlConfig::from_json(&v).unwrap();
        assert_eq!(c.text.num_hidden_layers, 2);
        assert_eq!(c.text.rope_theta, 5.0);
    }

    #[test]
    fn inconsistent_shapes_are_refused_with_the_field_named() {
        let mut v = released_3b();
        v["rope_scaling"]["mrope_section"] = json!([16, 24, 20]);
        assert!(
            Qwen25VlConfig::from_json(&v)
                .unwrap_err()
                .contains("mrope_section")
        );
        let mut v = released_3b();
        v["vision_config"]["out_hidden_size"] = json!(1024);
        assert!(
            Qwen25VlConfig::from_json(&v)
                .unwrap_err()
                .contains("out_hidden_size")
        );
        let mut v = released_3b();
        v["num_key_value_heads"] = json!("two");
        assert!(
            Qwen25VlConfig::from_json(&v)
                .unwrap_err()
                .contains("num_key_value_heads")
        );
        let mut v = released_3b();
        v["hidden_act"] = json!("gelu");
        assert!(Qwen25VlConfig::from_json(&v).unwrap_err().contains("silu"));
        let mut v = released_3b();
        v["image_token_id"] = json!(999_999);
        assert!(Qwen25VlConfig::from_json(&v).unwrap_err().contains("999999"));
    }
}
