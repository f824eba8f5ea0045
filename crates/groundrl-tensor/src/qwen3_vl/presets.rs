//! Built-in Qwen3-VL shapes: the released Qwen3-VL-2B, 4B and 8B (for benchmarks on random weights),
//! and `tiny` and `small`, with the real architecture
//! (DeepStack, interleaved M-RoPE, q/k norms, a learned position grid) at sizes a CPU test and a GPU
//! demo train from random weights.
//!
//! The released shapes are the numbers of `Qwen/Qwen3-VL-{2B,4B,8B}-Instruct/config.json` (the 4B's
//! fields are quoted in `config.rs`'s tests, which read them into this preset). Each language model is its Qwen3 namesake's (Qwen3-1.7B,
//! Qwen3-4B, Qwen3-8B); transformers 5.17's `Qwen3VLTextConfig` defaults (4096 wide, MLP 22016, 32
//! layers, 32 key-value heads) are none of them. The 2B and 4B share one 24-block vision tower; the 8B
//! has the 27-block one whose depth, widths, heads and DeepStack blocks are transformers'
//! `Qwen3VLVisionConfig` defaults (its default `out_hidden_size`, 3584, is replaced by the decoder's
//! width, as in every released config). What all three share: vocabulary 151,936, head_dim 128, 8
//! key-value heads, no attention bias, rope_theta 5,000,000 with mrope_section [24, 20, 20], 262,144
//! positions, RMSNorm epsilon 1e-6; 16-pixel patches merged 2 x 2, 2 frames per temporal patch, 16
//! vision heads and a 48 x 48 position grid (2,304 entries, transformers' default).

use super::config::{Qwen3VlConfig, TextConfig, VisionConfig};
pub use crate::qwen2_5_vl::presets::{QWEN_IDS, QWEN_VOCAB_SIZE};
use crate::special_ids::SpecialIds;

/// The shape of a released decoder: `[hidden_size, intermediate_size, num_hidden_layers,
/// num_attention_heads]`.
type Decoder = [i64; 4];

/// A vision tower's shape; the rest is Qwen3-VL's ([`vision`]).
pub(crate) struct Tower {
    pub depth: i64,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_heads: i64,
    /// The learned position grid's entries (a square).
    pub num_position_embeddings: i64,
    /// The blocks DeepStack reads, one decoder layer each.
    pub deepstack_visual_indexes: &'static [i64],
}

/// Qwen3-VL-2B and 4B's tower (their `vision_config`).
pub(crate) const TOWER_24: Tower = Tower {
    depth: 24,
    hidden_size: 1024,
    intermediate_size: 4096,
    num_heads: 16,
    num_position_embeddings: 2304,
    deepstack_visual_indexes: &[5, 11, 17],
};

/// Qwen3-VL-8B's tower (its `vision_config`; transformers' `Qwen3VLVisionConfig` defaults too).
const TOWER_27: Tower = Tower {
    depth: 27,
    hidden_size: 1152,
    intermediate_size: 4304,
    num_heads: 16,
    num_position_embeddings: 2304,
    deepstack_visual_indexes: &[8, 16, 24],
};

/// Qwen3-VL-2B-Instruct's shape: Qwen3-1.7B's decoder (2048 wide, MLP 6144, 28 layers, 16 heads) and
/// the 24-block tower, tied embeddings.
pub fn qwen3_vl_2b() -> Qwen3VlConfig {
    qwen3_vl_2b_with_ids(&QWEN_IDS)
}

/// The 2B shape with another tokenizer's special token ids (all below Qwen's vocabulary size), so a
/// random-init model can run with the tiny tokenizer where Qwen's cannot be shipped.
pub fn qwen3_vl_2b_with_ids(ids: &SpecialIds) -> Qwen3VlConfig {
    released(ids, [2048, 6144, 28, 16], &TOWER_24, true)
}

/// Qwen3-VL-4B-Instruct's shape: Qwen3-4B's decoder (2560 wide, MLP 9728, 36 layers, 32 heads) and
/// the 24-block tower, tied embeddings.
pub fn qwen3_vl_4b() -> Qwen3VlConfig {
    qwen3_vl_4b_with_ids(&QWEN_IDS)
}

/// The 4B shape with another tokenizer's special token ids, as [`qwen3_vl_2b_with_ids`].
pub fn qwen3_vl_4b_with_ids(ids: &SpecialIds) -> Qwen3VlConfig {
    released(ids, [2560, 9728, 36, 32], &TOWER_24, true)
}

/// Qwen3-VL-8B-Instruct's shape: Qwen3-8B's decoder (4096 wide, MLP 12288, 36 layers, 32 heads) and
/// the 27-block tower, a separate output head.
pub fn qwen3_vl_8b() -> Qwen3VlConfig {
    qwen3_vl_8b_with_ids(&QWEN_IDS)
}

/// The 8B shape with another tokenizer's special token ids, as [`qwen3_vl_2b_with_ids`].
pub fn qwen3_vl_8b_with_ids(ids: &SpecialIds) -> Qwen3VlConfig {
    released(ids, [4096, 12288, 36, 32], &TOWER_27, false)
}

/// A released shape: `decoder` and `tower` with what all three share (see the module docs).
fn released(ids: &SpecialIds, decoder: Decoder, tower: &Tower, tied: bool) -> Qwen3VlConfig {
    let text = TextConfig {
        vocab_size: QWEN_VOCAB_SIZE,
        num_key_value_heads: 8,
        rope_theta: 5_000_000.0,
        max_position_embeddings: 262_144,
        ..decoder_config(decoder, 128, [24, 20, 20])
    };
    with_ids(ids, text, vision(tower, decoder[0]), tied)
}

/// `tower` with Qwen3-VL's 16-pixel patches merged 2 x 2, two frames per temporal patch and 2D rotary
/// theta 10,000, projecting to the decoder's width `out`.
pub(crate) fn vision(tower: &Tower, out: i64) -> VisionConfig {
    VisionConfig {
        depth: tower.depth,
        hidden_size: tower.hidden_size,
        intermediate_size: tower.intermediate_size,
        num_heads: tower.num_heads,
        in_channels: 3,
        patch_size: 16,
        temporal_patch_size: 2,
        spatial_merge_size: 2,
        out_hidden_size: out,
        num_position_embeddings: tower.num_position_embeddings,
        deepstack_visual_indexes: tower.deepstack_visual_indexes.to_vec(),
        rope_theta: 10_000.0,
    }
}

/// A decoder `[hidden, intermediate, layers, heads]` with 2 key-value heads of `head_dim`, no vocabulary
/// yet, rotary theta 10,000 over 4,096 positions; `released` overrides what differs.
fn decoder_config(decoder: Decoder, head_dim: i64, mrope_section: [i64; 3]) -> TextConfig {
    let [hidden, intermediate, layers, heads] = decoder;
    TextConfig {
        vocab_size: 0,
        hidden_size: hidden,
        intermediate_size: intermediate,
        num_hidden_layers: layers,
        num_attention_heads: heads,
        num_key_value_heads: 2,
        head_dim,
        attention_bias: false,
        rms_norm_eps: 1e-6,
        rope_theta: 10_000.0,
        mrope_section,
        max_position_embeddings: 4096,
        bos_token_id: None,
        eos_token_ids: vec![],
        pad_token_id: None,
    }
}

/// A few-million-parameter model with the real architecture (DeepStack from vision blocks 0 and 2
/// into decoder layers 0 and 1, GQA 4:2, q/k norms), sized for CPU tests: Qwen2.5-VL's `tiny`'s size.
pub fn tiny(vocab_size: i64, ids: &SpecialIds) -> Qwen3VlConfig {
    let text = decoder_config([128, 384, 4, 4], 32, [6, 5, 5]);
    trained_from_scratch(vocab_size, ids, text, &TINY_TOWER)
}

/// About 30M parameters with the real architecture: a GPU demo's model, Qwen2.5-VL's `small`'s size,
/// with DeepStack from vision blocks 1, 3 and 5.
pub fn small(vocab_size: i64, ids: &SpecialIds) -> Qwen3VlConfig {
    let text = decoder_config([512, 1536, 8, 8], 64, [12, 10, 10]);
    trained_from_scratch(vocab_size, ids, text, &SMALL_TOWER)
}

/// [`tiny`]'s tower: 4 blocks 64 wide.
pub(crate) const TINY_TOWER: Tower = Tower {
    depth: 4,
    hidden_size: 64,
    intermediate_size: 128,
    num_heads: 2,
    num_position_embeddings: 256,
    deepstack_visual_indexes: &[0, 2],
};

/// [`small`]'s tower: 8 blocks 256 wide.
pub(crate) const SMALL_TOWER: Tower = Tower {
    depth: 8,
    hidden_size: 256,
    intermediate_size: 768,
    num_heads: 4,
    num_position_embeddings: 576,
    deepstack_visual_indexes: &[1, 3, 5],
};

/// A model of our own sizes over the tiny tokenizer's `vocab_size` tokens, its embeddings tied.
fn trained_from_scratch(vocab_size: i64, ids: &SpecialIds, text: TextConfig, tower: &Tower) -> Qwen3VlConfig {
    let text = TextConfig { vocab_size, ..text };
    let vision = vision(tower, text.hidden_size);
    with_ids(ids, text, vision, true)
}

/// `text` and `vision` with the tokenizer's special ids in the places the config keeps them.
fn with_ids(ids: &SpecialIds, mut text: TextConfig, vision: VisionConfig, tied: bool) -> Qwen3VlConfig {
    text.bos_token_id = Some(ids.endoftext.into());
    text.eos_token_ids = vec![ids.eos.into()];
    text.pad_token_id = Some(ids.pad.into());
    Qwen3VlConfig {
        text,
        vision,
        image_token_id: ids.image_pad.into(),
        video_token_id: ids.video_pad.into(),
        vision_start_token_id: ids.vision_start.into(),
        vision_end_token_id: ids.vision_end.into(),
        tie_word_embeddings: tied,
    }
}

/// Parameters of the language model alone (embedding, decoder layers, final norm, untied head).
pub fn text_parameter_count(c: &Qwen3VlConfig) -> i64 {
    let t = &c.text;
    let (h, q, kv) = (
        t.hidden_size,
        t.num_attention_heads * t.head_dim,
        t.num_key_value_heads * t.head_dim,
    );
    let biases = if t.attention_bias { q + 2 * kv + h } else { 0 };
    // q, k, v and o, their biases, the q/k norms; the MLP; the two norms.
    let layer = h * (q + 2 * kv) + q * h + biases + 2 * t.head_dim + 3 * h * t.intermediate_size + 2 * h;
    let heads = if c.tie_word_embeddings { 1 } else { 2 };
    t.num_hidden_layers * layer + heads * t.vocab_size * h + h
}

/// Parameter count of a config, computed from the shapes (no model built).
pub fn parameter_count(c: &Qwen3VlConfig) -> i64 {
    text_parameter_count(c) + vision_parameter_count(&c.vision)
}

/// Parameters of a vision tower of this kind (blocks, patch and position embeddings, mergers).
pub fn vision_parameter_count(v: &VisionConfig) -> i64 {
    let (w, inner) = (v.hidden_size, v.intermediate_size);
    // qkv and proj with biases; fc1 and fc2 with biases; two LayerNorms with biases.
    let block = 3 * w * w + 3 * w + w * w + w + 2 * w * inner + inner + w + 4 * w;
    let merged = w * v.spatial_merge_size * v.spatial_merge_size;
    let mlp = merged * merged + merged + merged * v.out_hidden_size + v.out_hidden_size;
    // The main merger norms each patch (w); DeepStack's norm the concatenated block (merged).
    let mergers = (2 * w + mlp) + v.deepstack_visual_indexes.len() as i64 * (2 * merged + mlp);
    let embed = v.patch_dim() * w + w + v.num_position_embeddings * w;
    v.depth * block + embed + mergers
}

#[cfg(test)]
mod tests {
    use tch::{Device, Kind};

    use super::*;
    use crate::hf_folder::tiny_ids;
    use crate::processor::tiny_tokenizer::VOCAB_SIZE;
    use crate::qwen3_vl::Qwen3Vl;

    /// The released sizes: Qwen3-VL-2B's safetensors hold about 2.13B parameters, 4B's 4.44B, 8B's
    /// 8.77B; the 8B's decoder alone is Qwen3-8B with its own head (8.19B).
    #[test]
    fn the_released_shapes_are_valid_and_count_their_published_sizes() {
        for (config, low, high) in [
            (qwen3_vl_2b(), 2.10e9, 2.15e9),
            (qwen3_vl_4b(), 4.40e9, 4.45e9),
            (qwen3_vl_8b(), 8.75e9, 8.80e9),
        ] {
            config.validate().unwrap();
            let n = parameter_count(&config) as f64;
            assert!((low..high).contains(&n), "{n}");
        }
        assert_eq!(text_parameter_count(&qwen3_vl_8b()), 8_190_735_360);
    }

    /// The count from the shapes is the number of values a built model holds, with and without
    /// attention biases and a separate head.
    #[test]
    fn counts_equal_a_built_model_s_parameters() {
        let mut configs = vec![tiny(i64::from(VOCAB_SIZE), &tiny_ids())];
        let mut other = configs[0].clone();
        other.text.attention_bias = true;
        other.tie_word_embeddings = false;
        configs.push(other);
        for config in configs {
            let model = Qwen3Vl::new(&config, Device::Cpu, Kind::Float, 0).unwrap();
            let built: i64 = model
                .var_store()
                .variables()
                .values()
                .map(|t| t.numel() as i64)
                .sum();
            assert_eq!(parameter_count(&config), built);
        }
    }

    #[test]
    fn tiny_and_small_are_valid_with_the_tiny_tokenizer_s_ids() {
        let vocab = i64::from(VOCAB_SIZE);
        let tiny = tiny(vocab, &tiny_ids());
        tiny.validate().unwrap();
        assert_eq!(tiny.vision.deepstack_visual_indexes, [0, 2]);
        assert_eq!(tiny.text.eos_token_ids, [i64::from(tiny_ids().eos)]);
        assert!(parameter_count(&tiny) < 5_000_000, "{}", parameter_count(&tiny));
        let small = small(vocab, &tiny_ids());
        small.validate().unwrap();
        assert_eq!(small.vision.deepstack_visual_indexes, [1, 3, 5]);
        let n = parameter_count(&small);
        assert!((25_000_000..40_000_000).contains(&n), "{n}");
    }
}
