//! Built-in Qwen3.5 shapes: `tiny` and `small` (the real architecture, linear and full attention three
//! to one, at sizes a CPU test and a GPU demo train from random weights) and a dense shape near 4B for
//! benchmarks on random weights.
//!
//! The 4B shape's decoder is the text config of the Qwen3.5 checkpoints of that size published on the
//! Hugging Face hub (2,560 wide, MLP 9,216, 32 layers of which every fourth is full attention with 16
//! query heads over 4 key-value heads of 256 dims, a quarter of each turned; linear attention with 16
//! key heads over 32 value heads of 128; vocabulary 248,320, tied embeddings, rope_theta 10,000,000);
//! its tower is Qwen3-VL-4B's (24 blocks 1,024 wide) without DeepStack. It is a shape to measure
//! speed on, not a claim about any released file's exact numbers.

use super::config::Qwen35Config;
use super::full_attention::FullAttentionConfig;
use super::linear_attention::LinearAttentionConfig;
use super::text::{LayerType, TextConfig};
use crate::qwen3_vl::config::VisionConfig;
use crate::qwen3_vl::presets::{SMALL_TOWER, TINY_TOWER, TOWER_24, Tower, vision};
use crate::special_ids::SpecialIds;

/// Qwen3.5's vocabulary size.
pub const QWEN3_5_VOCAB_SIZE: i64 = 248_320;

/// Qwen3.5's special ids: the vision tokens as transformers' `Qwen3_5Config` defaults give them,
/// `<|endoftext|>`, `<|im_start|>` and `<|im_end|>` as the checkpoints' configs and tokenizers
/// number them (generation stops at `<|im_end|>`).
pub const QWEN3_5_IDS: SpecialIds = SpecialIds {
    endoftext: 248_044,
    im_start: 248_045,
    im_end: 248_046,
    vision_start: 248_053,
    vision_end: 248_054,
    image_pad: 248_056,
    video_pad: 248_057,
    eos: 248_046,
    pad: 248_044,
};

/// A decoder `hidden` wide with an MLP of `intermediate`, `layers` layers (every fourth full
/// attention), `heads` query heads over `kv_heads` of `head_dim` (a quarter turned, M-RoPE
/// `mrope_section`), linear attention of `key_heads` over `value_heads` of `linear_dim`.
struct Decoder {
    hidden: i64,
    intermediate: i64,
    layers: usize,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
    mrope_section: [i64; 3],
    key_heads: i64,
    value_heads: i64,
    linear_dim: i64,
}

fn text(d: &Decoder, vocab_size: i64, rope_theta: f64) -> TextConfig {
    let layer_types = (0..d.layers)
        .map(|i| match (i + 1) % 4 {
            0 => LayerType::FullAttention,
            _ => LayerType::LinearAttention,
        })
        .collect();
    TextConfig {
        vocab_size,
        hidden_size: d.hidden,
        intermediate_size: d.intermediate,
        layer_types,
        attention: FullAttentionConfig {
            hidden_size: d.hidden,
            heads: d.heads,
            kv_heads: d.kv_heads,
            head_dim: d.head_dim,
            attention_bias: false,
            rms_norm_eps: 1e-6,
        },
        linear: LinearAttentionConfig {
            hidden_size: d.hidden,
            key_heads: d.key_heads,
            value_heads: d.value_heads,
            key_head_dim: d.linear_dim,
            value_head_dim: d.linear_dim,
            conv_kernel: 4,
            rms_norm_eps: 1e-6,
        },
        partial_rotary_factor: 0.25,
        rope_theta,
        mrope_section: d.mrope_section,
        rms_norm_eps: 1e-6,
        eos_token_ids: vec![],
    }
}

/// A few-million-parameter model for CPU tests: 4 layers 128 wide (3 linear attention, 1 full).
pub fn tiny(vocab_size: i64, ids: &SpecialIds) -> Qwen35Config {
    let decoder = Decoder {
        hidden: 128,
        intermediate: 384,
        layers: 4,
        heads: 4,
        kv_heads: 2,
        head_dim: 32,
        mrope_section: [2, 1, 1],
        key_heads: 2,
        value_heads: 4,
        linear_dim: 32,
    };
    with_ids(ids, text(&decoder, vocab_size, 10_000.0), &TINY_TOWER, true)
}

/// About 30M parameters for the GPU demo: 8 layers 512 wide (6 linear attention, 2 full).
pub fn small(vocab_size: i64, ids: &SpecialIds) -> Qwen35Config {
    let decoder = Decoder {
        hidden: 512,
        intermediate: 1536,
        layers: 8,
        heads: 8,
        kv_heads: 2,
        head_dim: 64,
        mrope_section: [3, 3, 2],
        key_heads: 4,
        value_heads: 8,
        linear_dim: 64,
    };
    with_ids(ids, text(&decoder, vocab_size, 10_000.0), &SMALL_TOWER, true)
}

/// The dense shape near 4B of the module doc, with the special ids `ids`.
pub fn qwen3_5_4b_with_ids(ids: &SpecialIds) -> Qwen35Config {
    let decoder = Decoder {
        hidden: 2560,
        intermediate: 9216,
        layers: 32,
        heads: 16,
        kv_heads: 4,
        head_dim: 256,
        mrope_section: [11, 11, 10],
        key_heads: 16,
        value_heads: 32,
        linear_dim: 128,
    };
    with_ids(
        ids,
        text(&decoder, QWEN3_5_VOCAB_SIZE, 10_000_000.0),
        &TOWER_24,
        true,
    )
}

/// `text` with `tower` (without DeepStack) and the tokenizer's special ids.
fn with_ids(ids: &SpecialIds, mut text: TextConfig, tower: &Tower, tied: bool) -> Qwen35Config {
    text.eos_token_ids = vec![ids.eos.into()];
    let vision = VisionConfig {
        deepstack_visual_indexes: vec![],
        ..vision(tower, text.hidden_size)
    };
    Qwen35Config {
        text,
        vision,
        image_token_id: ids.image_pad.into(),
        video_token_id: ids.video_pad.into(),
        vision_start_token_id: ids.vision_start.into(),
        vision_end_token_id: ids.vision_end.into(),
        tie_word_embeddings: tied,
    }
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind};

    use super::*;
    use crate::hf_folder::tiny_ids;
    use crate::model::Model;
    use crate::processor::tiny_tokenizer::VOCAB_SIZE;
    use crate::qwen3_5::{Qwen35, text_parameter_count};

    /// The counts from the shapes are the values a built model holds (tiny and small); the 4B
    /// shape counts about 4.6B (4.2B of them the decoder's, 0.64B its tied embedding).
    #[test]
    fn counts_equal_a_built_model_s_parameters() {
        for config in [
            tiny(i64::from(VOCAB_SIZE), &tiny_ids()),
            small(i64::from(VOCAB_SIZE), &tiny_ids()),
        ] {
            let model = Qwen35::new(&config, Device::Cpu, Kind::Float, 0).unwrap();
            let built: i64 = model
                .var_store()
                .variables()
                .values()
                .map(|t| t.numel() as i64)
                .sum();
            assert_eq!(config.architecture().parameters, built);
            let text: i64 = (model.var_store().variables().iter())
                .filter(|(name, _)| !name.starts_with("visual."))
                .map(|(_, t)| t.numel() as i64)
                .sum();
            assert_eq!(text_parameter_count(&config), text);
        }
        let big = qwen3_5_4b_with_ids(&tiny_ids()).architecture();
        assert!(
            (4.5e9..4.7e9).contains(&(big.parameters as f64)),
            "{}",
            big.parameters
        );
        assert_eq!((big.layers, big.kv_layers), (32, 8));
    }
}
