//! Qwen3-VL's `config.json`, read the way transformers 5.17 reads it.
//!
//! The language model's fields sit under `text_config`, the vision tower's under `vision_config`. Two
//! spellings of the rotary settings exist: the released checkpoints carry `rope_scaling: {rope_type,
//! mrope_section, mrope_interleaved}` with `rope_theta` beside it, transformers 5.x saves them together as
//! `rope_parameters`. Both are read. `mrope_interleaved` is not: transformers interleaves the frequency
//! channels whatever it says (see [`super::text`]). Whether the output head shares the embedding is the
//! top-level `tie_word_embeddings`; transformers ignores the copy under `text_config`. Missing fields take
//! transformers' class defaults. [`Qwen3VlConfig::to_json`] writes the layout transformers 5.17 saves.

use std::path::Path;

use serde_json::{Map, Value, json};
use tch::Kind;

use crate::model_error::ModelError;
use crate::qwen2_5_vl::config::Fields;

/// The `model_type` of a Qwen3-VL (dense) checkpoint.
pub const MODEL_TYPE: &str = "qwen3_vl";

/// The language model's shape: a Qwen3 decoder (RMSNorm on each head's queries and keys) with M-RoPE.
#[derive(Clone, Debug, PartialEq)]
pub struct TextConfig {
    pub vocab_size: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_hidden_layers: i64,
    pub num_attention_heads: i64,
    pub num_key_value_heads: i64,
    /// Given on its own: Qwen3's heads need not split `hidden_size` evenly.
    pub head_dim: i64,
    /// Biases on the q, k, v and o projections.
    pub attention_bias: bool,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    /// Rotary frequencies given to the (t, h, w) position components; sums to head_dim / 2. Interleaved:
    /// see [`super::text::frequency_components`].
    pub mrope_section: [i64; 3],
    pub max_position_embeddings: i64,
    pub bos_token_id: Option<i64>,
    /// One id or several; generation stops on any.
    pub eos_token_ids: Vec<i64>,
    pub pad_token_id: Option<i64>,
}

/// The vision tower's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct VisionConfig {
    pub depth: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_heads: i64,
    pub in_channels: i64,
    pub patch_size: i64,
    pub temporal_patch_size: i64,
    pub spatial_merge_size: i64,
    pub out_hidden_size: i64,
    /// Entries of the learned position table: a square grid of `sqrt` per side.
    pub num_position_embeddings: i64,
    /// Blocks whose outputs feed DeepStack, in the config's order: the i-th listed block has the i-th
    /// DeepStack merger.
    pub deepstack_visual_indexes: Vec<i64>,
    pub rope_theta: f64,
}

impl VisionConfig {
    pub fn head_dim(&self) -> i64 {
        self.hidden_size / self.num_heads
    }

    /// Values of one flattened patch row: channels x temporal x patch x patch (1536 for patch 16).
    pub fn patch_dim(&self) -> i64 {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    /// Side of the square learned position grid (48 for the released 2304 entries), as transformers
    /// computes it: `int(num_position_embeddings ** 0.5)`.
    pub fn position_grid_side(&self) -> i64 {
        (self.num_position_embeddings as f64).sqrt() as i64
    }
}

/// The whole model's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Qwen3VlConfig {
    pub text: TextConfig,
    pub vision: VisionConfig,
    pub image_token_id: i64,
    pub video_token_id: i64,
    pub vision_start_token_id: i64,
    pub vision_end_token_id: i64,
    /// The output projection shares the token embedding (Qwen3-VL-2B and 4B); no `lm_head.weight` then.
    pub tie_word_embeddings: bool,
}

impl Qwen3VlConfig {
    /// Reads `config.json` from a file.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        crate::qwen2_5_vl::config::read_config(path, Self::from_json)
    }

    /// Reads a Qwen3-VL config, refusing another `model_type`, and checks that the shapes fit together.
    pub fn from_json(value: &Value) -> Result<Self, String> {
        let top = value.as_object().ok_or("config is not a JSON object")?;
        require_model_type(top, MODEL_TYPE, "Qwen3-VL (dense)")?;
        let fields = Fields(top);
        let empty = Map::new();
        let config = Self {
            text: text_config(Fields(sub_object(top, "text_config", &empty)?))
                .map_err(|e| format!("text_config: {e}"))?,
            vision: vision_config(Fields(sub_object(top, "vision_config", &empty)?))
                .map_err(|e| format!("vision_config: {e}"))?,
            image_token_id: fields.int("image_token_id", 151655)?,
            video_token_id: fields.int("video_token_id", 151656)?,
            vision_start_token_id: fields.int("vision_start_token_id", 151652)?,
            vision_end_token_id: fields.int("vision_end_token_id", 151653)?,
            tie_word_embeddings: fields.bool("tie_word_embeddings", false)?,
        };
        config.validate()?;
        Ok(config)
    }

    /// The config as transformers 5.17's `save_pretrained` writes it, for parameters of `kind`: nested
    /// `text_config` and `vision_config`, rotary settings as `rope_parameters`. Reads back as `self`.
    pub fn to_json(&self, kind: Kind) -> Value {
        json!({
            "architectures": ["Qwen3VLForConditionalGeneration"],
            "model_type": MODEL_TYPE,
            "dtype": dtype_name(kind),
            "image_token_id": self.image_token_id,
            "video_token_id": self.video_token_id,
            "vision_start_token_id": self.vision_start_token_id,
            "vision_end_token_id": self.vision_end_token_id,
            "tie_word_embeddings": self.tie_word_embeddings,
            "text_config": text_json(&self.text),
            "vision_config": vision_json(&self.vision),
        })
    }

    /// Checks the relations the model relies on, so a bad config fails here and not inside a matmul.
    pub fn validate(&self) -> Result<(), String> {
        validate_text(&self.text)?;
        validate_vision(&self.vision, self.text.num_hidden_layers, self.text.hidden_size)?;
        let ids = [
            self.image_token_id,
            self.video_token_id,
            self.vision_start_token_id,
            self.vision_end_token_id,
        ];
        if let Some(id) = ids.iter().find(|&&id| id < 0 || id >= self.text.vocab_size) {
            return Err(format!(
                "special token id {id} is outside the vocabulary (size {})",
                self.text.vocab_size
            ));
        }
        Ok(())
    }
}

fn text_json(t: &TextConfig) -> Value {
    let eos = match t.eos_token_ids.as_slice() {
        [one] => json!(one),
        many => json!(many),
    };
    json!({
        "model_type": "qwen3_vl_text",
        "vocab_size": t.vocab_size,
        "hidden_size": t.hidden_size,
        "intermediate_size": t.intermediate_size,
        "num_hidden_layers": t.num_hidden_layers,
        "num_attention_heads": t.num_attention_heads,
        "num_key_value_heads": t.num_key_value_heads,
        "head_dim": t.head_dim,
        "attention_bias": t.attention_bias,
        "hidden_act": "silu",
        "rms_norm_eps": t.rms_norm_eps,
        "max_position_embeddings": t.max_position_embeddings,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": t.rope_theta,
            "mrope_section": t.mrope_section,
            "mrope_interleaved": true,
        },
        "bos_token_id": t.bos_token_id,
        "eos_token_id": eos,
        "pad_token_id": t.pad_token_id,
    })
}

pub(crate) fn vision_json(v: &VisionConfig) -> Value {
    json!({
        "model_type": "qwen3_vl_vision",
        "depth": v.depth,
        "hidden_size": v.hidden_size,
        "intermediate_size": v.intermediate_size,
        "num_heads": v.num_heads,
        "in_channels": v.in_channels,
        "patch_size": v.patch_size,
        "temporal_patch_size": v.temporal_patch_size,
        "spatial_merge_size": v.spatial_merge_size,
        "out_hidden_size": v.out_hidden_size,
        "num_position_embeddings": v.num_position_embeddings,
        "deepstack_visual_indexes": v.deepstack_visual_indexes,
        "hidden_act": "gelu_pytorch_tanh",
        "rope_parameters": {"rope_type": "axial", "rope_theta": v.rope_theta},
    })
}

/// transformers' name of a parameter dtype, as `config.json`'s `dtype` gives it.
pub(crate) fn dtype_name(kind: Kind) -> &'static str {
    match kind {
        Kind::BFloat16 => "bfloat16",
        Kind::Half => "float16",
        _ => "float32",
    }
}

/// `text_config` or `vision_config`: an object, or `empty` (transformers' defaults) when absent.
pub(crate) fn sub_object<'a>(
    top: &'a Map<String, Value>,
    key: &str,
    empty: &'a Map<String, Value>,
) -> Result<&'a Map<String, Value>, String> {
    match top.get(key) {
        Some(Value::Object(o)) => Ok(o),
        None | Some(Value::Null) => Ok(empty),
        Some(_) => Err(format!("`{key}` is not an object")),
    }
}

fn text_config(f: Fields) -> Result<TextConfig, String> {
    require_str(f, "hidden_act", "silu")?;
    // transformers 5.x: `rope_parameters: {rope_type, rope_theta, mrope_section}`; the released
    // checkpoints: `rope_scaling: {rope_type, mrope_section}` and `rope_theta` beside it.
    let rope = f
        .object("rope_parameters")?
        .or(f.object("rope_scaling")?)
        .map(Fields);
    if let Some(r) = rope {
        require_str(r, "rope_type", "default")?;
    }
    let rope_theta = match rope.map(|r| r.opt_float("rope_theta")).transpose()?.flatten() {
        Some(theta) => theta,
        None => f.float("rope_theta", 500_000.0)?,
    };
    let section = match rope {
        Some(r) => r.int_list("mrope_section", &[24, 20, 20])?,
        None => vec![24, 20, 20],
    };
    let mrope_section: [i64; 3] = section
        .try_into()
        .map_err(|s: Vec<i64>| format!("mrope_section {s:?} does not have 3 entries"))?;
    let heads = f.int("num_attention_heads", 32)?;
    Ok(TextConfig {
        vocab_size: f.int("vocab_size", 151936)?,
        hidden_size: f.int("hidden_size", 4096)?,
        intermediate_size: f.int("intermediate_size", 22016)?,
        num_hidden_layers: f.int("num_hidden_layers", 32)?,
        num_attention_heads: heads,
        num_key_value_heads: f.opt_int("num_key_value_heads")?.unwrap_or(heads),
        head_dim: f.int("head_dim", 128)?,
        attention_bias: f.bool("attention_bias", false)?,
        rms_norm_eps: f.float("rms_norm_eps", 1e-6)?,
        rope_theta,
        mrope_section,
        max_position_embeddings: f.int("max_position_embeddings", 128000)?,
        bos_token_id: f.opt_int("bos_token_id")?,
        // Absent: Qwen's `<|im_end|>`.
        eos_token_ids: eos_token_ids(f, &[151645])?,
        pad_token_id: f.opt_int("pad_token_id")?,
    })
}

/// `eos_token_id` as one id or a list; absent means `absent`.
pub(crate) fn eos_token_ids(f: Fields, absent: &[i64]) -> Result<Vec<i64>, String> {
    match f.0.get("eos_token_id") {
        None => Ok(absent.to_vec()),
        Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(ids)) => ids
            .iter()
            .map(Value::as_i64)
            .collect::<Option<_>>()
            .ok_or_else(|| "`eos_token_id` has a non-integer".into()),
        Some(id) => Ok(vec![id.as_i64().ok_or("`eos_token_id` is not an integer")?]),
    }
}

pub(crate) fn vision_config(f: Fields) -> Result<VisionConfig, String> {
    require_str(f, "hidden_act", "gelu_pytorch_tanh")?;
    let rope_theta = match f.object("rope_parameters")? {
        Some(r) => Fields(r).float("rope_theta", 10000.0)?,
        None => 10000.0,
    };
    let heads = match f.opt_int("num_heads")? {
        Some(h) => h,
        None => f.int("num_attention_heads", 16)?,
    };
    Ok(VisionConfig {
        depth: f.int("depth", 27)?,
        hidden_size: f.int("hidden_size", 1152)?,
        intermediate_size: f.int("intermediate_size", 4304)?,
        num_heads: heads,
        in_channels: f.int("in_channels", 3)?,
        patch_size: f.int("patch_size", 16)?,
        temporal_patch_size: f.int("temporal_patch_size", 2)?,
        spatial_merge_size: f.int("spatial_merge_size", 2)?,
        out_hidden_size: f.int("out_hidden_size", 3584)?,
        num_position_embeddings: f.int("num_position_embeddings", 2304)?,
        deepstack_visual_indexes: f.int_list("deepstack_visual_indexes", &[8, 16, 24])?,
        rope_theta,
    })
}

/// Refuses a config whose `model_type` is not `model_type`, naming the family it was asked of.
pub(crate) fn require_model_type(
    top: &Map<String, Value>,
    model_type: &str,
    family: &str,
) -> Result<(), String> {
    match top.get("model_type").and_then(Value::as_str) {
        Some(found) if found == model_type => Ok(()),
        Some(other) => Err(format!(
            "model_type is `{other}`, not `{model_type}`: this is not a {family} checkpoint"
        )),
        None => Err(format!("no `model_type` (a {family} config says `{model_type}`)")),
    }
}

/// Refuses a string field other than the one value this model computes (an activation, a rotary
/// type): another would silently compute something else. Absent takes transformers' default, `value`.
pub(crate) fn require_str(f: Fields, key: &str, value: &str) -> Result<(), String> {
    match f.0.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) if s == value => Ok(()),
        Some(other) => Err(format!("`{key}` is {other}; only \"{value}\" is supported")),
    }
}

fn positive(fields: &[(&str, i64)]) -> Result<(), String> {
    match fields.iter().find(|(_, value)| *value <= 0) {
        Some((name, value)) => Err(format!("`{name}` must be positive, found {value}")),
        None => Ok(()),
    }
}

fn validate_text(t: &TextConfig) -> Result<(), String> {
    positive(&[
        ("vocab_size", t.vocab_size),
        ("hidden_size", t.hidden_size),
        ("intermediate_size", t.intermediate_size),
        ("num_hidden_layers", t.num_hidden_layers),
        ("num_attention_heads", t.num_attention_heads),
        ("num_key_value_heads", t.num_key_value_heads),
        ("head_dim", t.head_dim),
    ])?;
    if t.num_attention_heads % t.num_key_value_heads != 0 {
        return Err(format!(
            "num_attention_heads {} is not a multiple of num_key_value_heads {}",
            t.num_attention_heads, t.num_key_value_heads
        ));
    }
    if t.mrope_section.iter().any(|&s| s < 0) || t.mrope_section.iter().sum::<i64>() * 2 != t.head_dim {
        return Err(format!(
            "mrope_section {:?} must sum to head_dim / 2 = {}",
            t.mrope_section,
            t.head_dim / 2
        ));
    }
    Ok(())
}

/// The vision config's own relations and its fit to a decoder of `layers` layers of `hidden` width
/// (DeepStack levels are added to decoder layers; the merged features replace token embeddings).
pub(crate) fn validate_vision(v: &VisionConfig, layers: i64, hidden: i64) -> Result<(), String> {
    positive(&[
        ("vision_config.depth", v.depth),
        ("vision_config.hidden_size", v.hidden_size),
        ("vision_config.intermediate_size", v.intermediate_size),
        ("vision_config.num_heads", v.num_heads),
        ("vision_config.in_channels", v.in_channels),
        ("vision_config.patch_size", v.patch_size),
        ("vision_config.temporal_patch_size", v.temporal_patch_size),
        ("vision_config.spatial_merge_size", v.spatial_merge_size),
        ("vision_config.num_position_embeddings", v.num_position_embeddings),
    ])?;
    if v.hidden_size % v.num_heads != 0 || v.head_dim() % 4 != 0 {
        return Err(format!(
            "vision hidden_size {} must split into num_heads {} heads of a size divisible by 4",
            v.hidden_size, v.num_heads
        ));
    }
    let side = v.position_grid_side();
    if side * side != v.num_position_embeddings {
        return Err(format!(
            "vision num_position_embeddings {} is not a square grid",
            v.num_position_embeddings
        ));
    }
    let levels = &v.deepstack_visual_indexes;
    if let Some(bad) = levels.iter().find(|&&i| i < 0 || i >= v.depth) {
        return Err(format!(
            "vision deepstack_visual_indexes has {bad}, outside 0..{}",
            v.depth
        ));
    }
    if (1..levels.len()).any(|i| levels[..i].contains(&levels[i])) {
        return Err(format!(
            "vision deepstack_visual_indexes {levels:?} repeats a block"
        ));
    }
    if levels.len() as i64 > layers {
        return Err(format!(
            "{} DeepStack levels but only {layers} decoder layers to add them to",
            levels.len(),
        ));
    }
    if v.out_hidden_size != hidden {
        return Err(format!(
            "vision out_hidden_size {} differs from the language model's hidden_size {hidden}",
            v.out_hidden_size
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The released Qwen3-VL-4B-Instruct config's fields (the legacy `rope_scaling` spelling), as its
    /// config.json on the Hub has them.
    fn released_4b() -> Value {
        json!({
            "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
            "image_token_id": 151655, "video_token_id": 151656,
            "vision_start_token_id": 151652, "vision_end_token_id": 151653, "tie_word_embeddings": true,
            "text_config": {
                "attention_bias": false, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128,
                "hidden_act": "silu", "hidden_size": 2560, "intermediate_size": 9728,
                "max_position_embeddings": 262144, "model_type": "qwen3_vl_text", "num_attention_heads": 32,
                "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
                "rope_scaling": {"mrope_interleaved": true, "mrope_section": [24, 20, 20], "rope_type": "default"},
                "rope_theta": 5000000, "tie_word_embeddings": true, "vocab_size": 151936
            },
            "vision_config": {
                "deepstack_visual_indexes": [5, 11, 17], "depth": 24, "hidden_act": "gelu_pytorch_tanh",
                "hidden_size": 1024, "in_channels": 3, "intermediate_size": 4096, "model_type": "qwen3_vl",
                "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 2560, "patch_size": 16,
                "spatial_merge_size": 2, "temporal_patch_size": 2
            }
        })
    }

    #[test]
    fn reads_the_released_layout() {
        let c = Qwen3VlConfig::from_json(&released_4b()).unwrap();
        let t = &c.text;
        assert_eq!(
            (
                t.hidden_size,
                t.num_hidden_layers,
                t.num_key_value_heads,
                t.head_dim
            ),
            (2560, 36, 8, 128)
        );
        assert_eq!(
            (t.mrope_section, t.rope_theta, t.attention_bias),
            ([24, 20, 20], 5e6, false)
        );
        assert_eq!(
            (t.bos_token_id, t.eos_token_ids.as_slice()),
            (Some(151643), &[151645][..])
        );
        let v = &c.vision;
        assert_eq!(
            (v.head_dim(), v.patch_dim(), v.position_grid_side()),
            (64, 1536, 48)
        );
        assert_eq!(
            (v.deepstack_visual_indexes.as_slice(), v.rope_theta),
            (&[5, 11, 17][..], 10000.0)
        );
        assert!(c.tie_word_embeddings);
    }

    /// The 4B preset is the released config as read, but for the pad id the preset names.
    #[test]
    fn the_4b_preset_is_the_released_config() {
        let mut preset = crate::qwen3_vl::presets::qwen3_vl_4b();
        assert_eq!(preset.text.pad_token_id, Some(151643));
        preset.text.pad_token_id = None;
        assert_eq!(preset, Qwen3VlConfig::from_json(&released_4b()).unwrap());
    }

    #[test]
    fn to_json_reads_back_as_itself() {
        let c = Qwen3VlConfig::from_json(&released_4b()).unwrap();
        let written = c.to_json(Kind::BFloat16);
        assert_eq!(Qwen3VlConfig::from_json(&written).unwrap(), c);
        assert_eq!(written["dtype"], "bfloat16");
        assert_eq!(
            written["text_config"]["rope_parameters"]["mrope_section"],
            json!([24, 20, 20])
        );
        assert_eq!(written["text_config"]["eos_token_id"], json!(151645));
    }

    #[test]
    fn rope_parameters_win_and_only_the_top_level_ties() {
        let mut v = released_4b();
        v["text_config"]["rope_parameters"] =
            json!({"rope_type": "default", "rope_theta": 7.0, "mrope_section": [32, 16, 16]});
        v["tie_word_embeddings"] = json!(false);
        let c = Qwen3VlConfig::from_json(&v).unwrap();
        assert_eq!((c.text.rope_theta, c.text.mrope_section), (7.0, [32, 16, 16]));
        assert!(!c.tie_word_embeddings);
    }

    #[test]
    fn other_families_and_inconsistent_shapes_are_refused_with_the_field_named() {
        let refused = |edit: &dyn Fn(&mut Value)| {
            let mut v = released_4b();
            edit(&mut v);
            Qwen3VlConfig::from_json(&v).unwrap_err()
        };
        let err = refused(&|v| v["model_type"] = json!("qwen2_5_vl"));
        assert!(err.contains("qwen2_5_vl") && err.contains("qwen3_vl"), "{err}");
        assert!(refused(&|v| v["model_type"] = json!("qwen3_vl_moe")).contains("qwen3_vl_moe"));
        assert!(refused(&|v| _ = v.as_object_mut().unwrap().remove("model_type")).contains("model_type"));
        let err = refused(&|v| v["text_config"]["rope_scaling"]["mrope_section"] = json!([24, 20, 16]));
        assert!(err.contains("mrope_section"), "{err}");
        let err = refused(&|v| v["text_config"]["rope_scaling"]["rope_type"] = json!("yarn"));
        assert!(err.contains("yarn"), "{err}");
        let err = refused(&|v| v["vision_config"]["hidden_act"] = json!("silu"));
        assert!(
            err.contains("vision_config") && err.contains("gelu_pytorch_tanh"),
            "{err}"
        );
        assert!(refused(&|v| v["vision_config"]["num_position_embeddings"] = json!(2300)).contains("square"));
        assert!(refused(&|v| v["vision_config"]["deepstack_visual_indexes"] = json!([5, 24])).contains("24"));
        assert!(
            refused(&|v| v["vision_config"]["deepstack_visual_indexes"] = json!([5, 5])).contains("repeats")
        );
        assert!(
            refused(&|v| v["vision_config"]["out_hidden_size"] = json!(2048)).contains("out_hidden_size")
        );
        assert!(refused(&|v| v["text_config"]["num_key_value_heads"] = json!(5)).contains("multiple"));
        assert!(refused(&|v| v["image_token_id"] = json!(999_999)).contains("999999"));
    }
}
