//! Qwen3.5's `text_config`, read the way transformers 5.17 reads it: absent fields take its class
//! defaults (the Qwen3.5-9B shape), the rotary settings sit in `rope_parameters` (the share of each
//! head the rotation turns, `partial_rotary_factor`, there or beside it; 0.25 when absent), and
//! `layer_types` lists each layer's token mixer, or, absent, every `full_attention_interval`-th layer
//! (default 4) is full attention and the others linear attention. The legacy names `mamba` and
//! `attention` mean linear and full attention, as transformers remaps them.
//!
//! The whole model's config ([`Qwen35Config`]) is Qwen3-VL's layout: that `text_config`, a
//! `vision_config` of Qwen3-VL's tower without DeepStack, the vision token ids and whether the output
//! head is the embedding.

use std::path::Path;

use serde_json::{Map, Value, json};
use tch::Kind;

use super::full_attention::FullAttentionConfig;
use super::linear_attention::LinearAttentionConfig;
use super::text::{LayerType, TextConfig};
use crate::model_error::ModelError;
use crate::qwen2_5_vl::config::Fields;
use crate::qwen3_vl::config::{
    VisionConfig, dtype_name, eos_token_ids, require_model_type, require_str, sub_object, validate_vision,
    vision_config, vision_json,
};

/// The `model_type` of Qwen3.5's (dense) `config.json`.
pub const MODEL_TYPE: &str = "qwen3_5";

/// A Qwen3.5 checkpoint's `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct Qwen35Config {
    pub text: TextConfig,
    /// Qwen3-VL's tower; `deepstack_visual_indexes` is always empty (Qwen3.5 has no DeepStack).
    pub vision: VisionConfig,
    pub image_token_id: i64,
    pub video_token_id: i64,
    pub vision_start_token_id: i64,
    pub vision_end_token_id: i64,
    /// The output head is the token embedding (the top-level key, as transformers reads it).
    pub tie_word_embeddings: bool,
}

impl Qwen35Config {
    /// Reads `config.json` from a file.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        crate::qwen2_5_vl::config::read_config(path, Self::from_json)
    }

    /// Reads a Qwen3.5 config, refusing another `model_type`, and checks that the shapes fit together.
    pub fn from_json(value: &Value) -> Result<Self, String> {
        let top = value.as_object().ok_or("config is not a JSON object")?;
        require_model_type(top, MODEL_TYPE, "Qwen3.5 (dense)")?;
        let fields = Fields(top);
        let empty = Map::new();
        let text = text_config(&Value::Object(sub_object(top, "text_config", &empty)?.clone()))
            .map_err(|e| format!("text_config: {e}"))?;
        let mut vision = vision_config(Fields(sub_object(top, "vision_config", &empty)?))
            .map_err(|e| format!("vision_config: {e}"))?;
        vision.deepstack_visual_indexes.clear();
        let config = Self {
            text,
            vision,
            image_token_id: fields.int("image_token_id", 248_056)?,
            video_token_id: fields.int("video_token_id", 248_057)?,
            vision_start_token_id: fields.int("vision_start_token_id", 248_053)?,
            vision_end_token_id: fields.int("vision_end_token_id", 248_054)?,
            tie_word_embeddings: fields.bool("tie_word_embeddings", false)?,
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks the relations the model relies on, so a bad config fails here and not inside a matmul.
    pub fn validate(&self) -> Result<(), String> {
        validate(&self.text).map_err(|e| format!("text_config: {e}"))?;
        validate_vision(
            &self.vision,
            self.text.layer_types.len() as i64,
            self.text.hidden_size,
        )
        .map_err(|e| format!("vision_config: {e}"))?;
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

    /// The config as transformers 5.17's `save_pretrained` writes it, for parameters of `kind`. Reads
    /// back as `self`.
    pub fn to_json(&self, kind: Kind) -> Value {
        let mut vision = vision_json(&self.vision);
        if let Some(v) = vision.as_object_mut() {
            v.remove("deepstack_visual_indexes");
            v.insert("model_type".into(), json!("qwen3_5_vision"));
        }
        json!({
            "architectures": ["Qwen3_5ForConditionalGeneration"],
            "model_type": MODEL_TYPE,
            "dtype": dtype_name(kind),
            "image_token_id": self.image_token_id,
            "video_token_id": self.video_token_id,
            "vision_start_token_id": self.vision_start_token_id,
            "vision_end_token_id": self.vision_end_token_id,
            "tie_word_embeddings": self.tie_word_embeddings,
            "text_config": text_json(&self.text, self.tie_word_embeddings),
            "vision_config": vision,
        })
    }
}

/// A `text_config` as transformers writes it.
fn text_json(t: &TextConfig, tied: bool) -> Value {
    let (a, l) = (&t.attention, &t.linear);
    let layer_types: Vec<&str> = (t.layer_types.iter())
        .map(|kind| match kind {
            LayerType::LinearAttention => "linear_attention",
            LayerType::FullAttention => "full_attention",
        })
        .collect();
    json!({
        "model_type": "qwen3_5_text",
        "vocab_size": t.vocab_size,
        "hidden_size": t.hidden_size,
        "intermediate_size": t.intermediate_size,
        "num_hidden_layers": t.layer_types.len(),
        "layer_types": layer_types,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim,
        "attention_bias": a.attention_bias,
        "linear_num_key_heads": l.key_heads,
        "linear_num_value_heads": l.value_heads,
        "linear_key_head_dim": l.key_head_dim,
        "linear_value_head_dim": l.value_head_dim,
        "linear_conv_kernel_dim": l.conv_kernel,
        "hidden_act": "silu",
        "rms_norm_eps": t.rms_norm_eps,
        "tie_word_embeddings": tied,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": t.rope_theta,
            "partial_rotary_factor": t.partial_rotary_factor,
            "mrope_section": t.mrope_section,
            "mrope_interleaved": true,
        },
        "eos_token_id": t.eos_token_ids,
    })
}

/// Reads a `text_config` object and checks that its shapes fit together.
pub fn text_config(value: &Value) -> Result<TextConfig, String> {
    let f = Fields(value.as_object().ok_or("text_config is not a JSON object")?);
    require_str(f, "hidden_act", "silu")?;
    let rope = f.object("rope_parameters")?.map(Fields);
    if let Some(r) = rope {
        require_str(r, "rope_type", "default")?;
    }
    let in_rope = |key: &str| rope.map(|r| r.opt_float(key)).transpose().map(Option::flatten);
    let partial_rotary_factor = match in_rope("partial_rotary_factor")? {
        Some(p) => p,
        None => f.float("partial_rotary_factor", 0.25)?,
    };
    let hidden_size = f.int("hidden_size", 4096)?;
    let rms_norm_eps = f.float("rms_norm_eps", 1e-6)?;
    let layers = f.int("num_hidden_layers", 32)?;
    let config = TextConfig {
        vocab_size: f.int("vocab_size", 248_320)?,
        hidden_size,
        intermediate_size: f.int("intermediate_size", 12_288)?,
        layer_types: layer_types(f, layers)?,
        attention: FullAttentionConfig {
            hidden_size,
            heads: f.int("num_attention_heads", 16)?,
            kv_heads: f.int("num_key_value_heads", 4)?,
            head_dim: f.int("head_dim", 256)?,
            attention_bias: f.bool("attention_bias", false)?,
            rms_norm_eps,
        },
        linear: LinearAttentionConfig {
            hidden_size,
            key_heads: f.int("linear_num_key_heads", 16)?,
            value_heads: f.int("linear_num_value_heads", 32)?,
            key_head_dim: f.int("linear_key_head_dim", 128)?,
            value_head_dim: f.int("linear_value_head_dim", 128)?,
            conv_kernel: f.int("linear_conv_kernel_dim", 4)?,
            rms_norm_eps,
        },
        partial_rotary_factor,
        rope_theta: in_rope("rope_theta")?.unwrap_or(10_000.0),
        mrope_section: mrope_section(rope)?,
        rms_norm_eps,
        eos_token_ids: eos_token_ids(f, &[])?,
    };
    validate(&config)?;
    Ok(config)
}

/// The rotary frequencies each M-RoPE position component takes (interleaved, as Qwen3-VL's), from
/// `rope_parameters` (transformers' default [11, 11, 10] when absent).
fn mrope_section(rope: Option<Fields>) -> Result<[i64; 3], String> {
    let listed = match rope {
        Some(r) => r.int_list("mrope_section", &[11, 11, 10])?,
        None => vec![11, 11, 10],
    };
    listed
        .try_into()
        .map_err(|s: Vec<i64>| format!("mrope_section {s:?} does not have 3 entries"))
}

/// Each layer's token mixer: the config's list (as long as `layers`), or every `interval`-th full
/// attention.
fn layer_types(f: Fields, layers: i64) -> Result<Vec<LayerType>, String> {
    let Some(listed) = f.0.get("layer_types").filter(|v| !v.is_null()) else {
        let interval = f.int("full_attention_interval", 4)?;
        if interval < 1 {
            return Err(format!(
                "full_attention_interval is {interval}; it must be at least 1"
            ));
        }
        let kind = |i: i64| match (i + 1) % interval {
            0 => LayerType::FullAttention,
            _ => LayerType::LinearAttention,
        };
        return Ok((0..layers).map(kind).collect());
    };
    let names = listed.as_array().ok_or("`layer_types` is not a list")?;
    let kinds = names
        .iter()
        .map(|v| match v.as_str() {
            Some("linear_attention" | "mamba") => Ok(LayerType::LinearAttention),
            Some("full_attention" | "attention") => Ok(LayerType::FullAttention),
            _ => Err(format!(
                "`layer_types` has {v}; a layer is \"linear_attention\" or \"full_attention\""
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if kinds.len() as i64 != layers {
        return Err(format!(
            "`layer_types` lists {} layers, num_hidden_layers is {layers}",
            kinds.len()
        ));
    }
    Ok(kinds)
}

/// The relations the layers rely on, so a bad config fails here and not inside a matmul.
fn validate(c: &TextConfig) -> Result<(), String> {
    let (a, l) = (&c.attention, &c.linear);
    let positive = [
        ("vocab_size", c.vocab_size),
        ("hidden_size", c.hidden_size),
        ("intermediate_size", c.intermediate_size),
        ("num_attention_heads", a.heads),
        ("num_key_value_heads", a.kv_heads),
        ("head_dim", a.head_dim),
        ("linear_num_key_heads", l.key_heads),
        ("linear_num_value_heads", l.value_heads),
        ("linear_key_head_dim", l.key_head_dim),
        ("linear_value_head_dim", l.value_head_dim),
        ("linear_conv_kernel_dim", l.conv_kernel),
    ];
    if let Some((key, value)) = positive.iter().find(|(_, v)| *v < 1) {
        return Err(format!("{key} is {value}; it must be at least 1"));
    }
    if a.heads % a.kv_heads != 0 {
        return Err(format!(
            "num_attention_heads {} is not a multiple of num_key_value_heads {}",
            a.heads, a.kv_heads
        ));
    }
    if l.value_heads % l.key_heads != 0 {
        return Err(format!(
            "linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
            l.value_heads, l.key_heads
        ));
    }
    let turned = a.head_dim as f64 * c.partial_rotary_factor;
    if !(c.partial_rotary_factor > 0.0 && c.partial_rotary_factor <= 1.0) || turned as i64 % 2 != 0 {
        return Err(format!(
            "partial_rotary_factor {} turns {turned} of head_dim {}; it must turn an even number of dims",
            c.partial_rotary_factor, a.head_dim
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn absent_fields_take_transformers_defaults() {
        let c = text_config(&json!({})).unwrap();
        assert_eq!(
            (c.vocab_size, c.hidden_size, c.intermediate_size),
            (248_320, 4096, 12_288)
        );
        assert_eq!(c.layer_types.len(), 32);
        let full: Vec<usize> = (c.layer_types.iter().enumerate())
            .filter(|(_, t)| **t == LayerType::FullAttention)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(full, [3, 7, 11, 15, 19, 23, 27, 31]);
        assert_eq!(
            (c.attention.heads, c.attention.kv_heads, c.attention.head_dim),
            (16, 4, 256)
        );
        assert_eq!(
            (c.linear.key_heads, c.linear.value_heads, c.linear.key_head_dim),
            (16, 32, 128)
        );
        assert_eq!((c.partial_rotary_factor, c.rope_theta), (0.25, 10_000.0));
    }

    #[test]
    fn listed_interval_and_legacy_layer_types_are_read() {
        let listed = text_config(&json!({"num_hidden_layers": 3,
            "layer_types": ["mamba", "attention", "linear_attention"]}))
        .unwrap();
        use LayerType::*;
        assert_eq!(
            listed.layer_types,
            [LinearAttention, FullAttention, LinearAttention]
        );
        let every_other =
            text_config(&json!({"num_hidden_layers": 4, "full_attention_interval": 2})).unwrap();
        assert_eq!(
            every_other.layer_types,
            [LinearAttention, FullAttention, LinearAttention, FullAttention]
        );
        let rope = text_config(
            &json!({"rope_parameters": {"rope_type": "default", "rope_theta": 1e7,
            "partial_rotary_factor": 0.5}}),
        )
        .unwrap();
        assert_eq!((rope.rope_theta, rope.partial_rotary_factor), (1e7, 0.5));
    }

    /// The tiny fixture's config as transformers wrote it reads back from what `to_json` writes, and
    /// another family's config is refused by its `model_type`.
    #[test]
    fn the_whole_config_round_trips_and_other_families_are_refused() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen3_5/tiny/config.json");
        let config = Qwen35Config::load(&path).unwrap();
        assert_eq!(
            (config.text.partial_rotary_factor, config.text.mrope_section),
            (0.5, [2, 1, 1])
        );
        assert_eq!(
            (config.image_token_id, config.text.eos_token_ids.as_slice()),
            (652, &[661][..])
        );
        assert!(config.vision.deepstack_visual_indexes.is_empty());
        assert_eq!(
            Qwen35Config::from_json(&config.to_json(Kind::BFloat16)).unwrap(),
            config
        );
        let err = Qwen35Config::from_json(&json!({"model_type": "qwen3_vl"})).unwrap_err();
        assert!(err.contains("`qwen3_vl`") && err.contains("Qwen3.5"), "{err}");
        let err = Qwen35Config::from_json(&json!({"model_type": "qwen3_5", "image_token_id": 300000,
            "vision_config": {"out_hidden_size": 4096}}))
        .unwrap_err();
        assert!(err.contains("special token id 300000"), "{err}");
    }

    #[test]
    fn configs_that_cannot_run_are_refused_by_name() {
        let refused = |v: Value, needle: &str| {
            let err = text_config(&v).unwrap_err();
            assert!(err.contains(needle), "{err}");
        };
        refused(
            json!({"num_hidden_layers": 2, "layer_types": ["full_attention"]}),
            "lists 1 layers",
        );
        refused(
            json!({"num_hidden_layers": 1, "layer_types": ["sliding"]}),
            "\"sliding\"",
        );
        refused(
            json!({"num_attention_heads": 6, "num_key_value_heads": 4}),
            "not a multiple",
        );
        refused(json!({"linear_num_key_heads": 3}), "linear_num_value_heads 32");
        refused(json!({"hidden_act": "gelu"}), "hidden_act");
        refused(json!({"partial_rotary_factor": 0.0}), "partial_rotary_factor");
        refused(json!({"full_attention_interval": 0}), "full_attention_interval");
        refused(json!({"head_dim": 0}), "head_dim is 0");
    }
}
