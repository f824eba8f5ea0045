//! Built-in model shapes: the released Qwen2.5-VL-3B and 7B (for benchmarks on random weights, since no
//! weights can be downloaded here) and `tiny`, small enough to train on a CPU in tests and the demo.

use super::config::{Qwen25VlConfig, TextConfig, VisionConfig};
use crate::special_ids::SpecialIds;

/// Qwen's real special ids (Qwen2.5-VL-3B-Instruct's tokenizer_config.json), used by the 3B shape.
pub const QWEN_IDS: SpecialIds = SpecialIds {
    endoftext: 151643,
    im_start: 151644,
    im_end: 151645,
    vision_start: 151652,
    vision_end: 151653,
    image_pad: 151655,
    video_pad: 151656,
    eos: 151645,
    pad: 151643,
};

/// Qwen2.5-VL's vocabulary size (embedding rows; a little larger than the tokenizer's token count).
pub const QWEN_VOCAB_SIZE: i64 = 151936;

/// Qwen2.5-VL-3B-Instruct's shape: about 3.75B parameters, tied embeddings.
pub fn qwen2_5_vl_3b() -> Qwen25VlConfig {
    qwen2_5_vl_3b_with_ids(&QWEN_IDS)
}

/// The 3B shape with another tokenizer's special token ids (all below Qwen's vocabulary size), so a
/// random-init 3B model can run with the tiny tokenizer where Qwen's cannot be shipped.
pub fn qwen2_5_vl_3b_with_ids(ids: &SpecialIds) -> Qwen25VlConfig {
    with_ids(
        QWEN_VOCAB_SIZE,
        ids,
        qwen_text([2048, 11008, 36, 16, 2]),
        qwen_vision(2048),
        true,
    )
}

/// Qwen2.5-VL-7B-Instruct's vocabulary size (its embedding and head rows).
pub const QWEN_7B_VOCAB_SIZE: i64 = 152064;

/// Qwen2.5-VL-7B-Instruct's shape (its config.json): about 8.29B parameters, an untied head.
pub fn qwen2_5_vl_7b() -> Qwen25VlConfig {
    qwen2_5_vl_7b_with_ids(&QWEN_IDS)
}

/// The 7B shape with another tokenizer's special token ids, as [`qwen2_5_vl_3b_with_ids`].
pub fn qwen2_5_vl_7b_with_ids(ids: &SpecialIds) -> Qwen25VlConfig {
    with_ids(
        QWEN_7B_VOCAB_SIZE,
        ids,
        qwen_text([3584, 18944, 28, 28, 4]),
        qwen_vision(3584),
        false,
    )
}

/// The language model of a released Qwen2.5-VL model of `[hidden, intermediate, layers, heads,
/// kv_heads]` (the rest is common to the 3B and 7B: M-RoPE sections, theta, norm eps, context);
/// [`with_ids`] fills in the vocabulary and the special ids.
fn qwen_text([hidden, intermediate, layers, heads, kv_heads]: [i64; 5]) -> TextConfig {
    TextConfig {
        vocab_size: 0,
        hidden_size: hidden,
        intermediate_size: intermediate,
        num_hidden_layers: layers,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        rms_norm_eps: 1e-6,
        rope_theta: 1_000_000.0,
        mrope_section: vec![16, 24, 24],
        max_position_embeddings: 128_000,
        bos_token_id: None,
        eos_token_ids: vec![],
        pad_token_id: None,
    }
}

/// The vision tower of the released Qwen2.5-VL models (the 3B and 7B share it), merging into a
/// decoder of width `out_hidden_size`.
fn qwen_vision(out_hidden_size: i64) -> VisionConfig {
    VisionConfig {
        depth: 32,
        hidden_size: 1280,
        intermediate_size: 3420,
        num_heads: 16,
        in_channels: 3,
        patch_size: 14,
        temporal_patch_size: 2,
        spatial_merge_size: 2,
        window_size: 112,
        out_hidden_size,
        fullatt_block_indexes: vec![7, 15, 23, 31],
        tokens_per_second: 2,
        rope_theta: 10000.0,
    }
}

/// A few-million-parameter model with the real architecture (window and full-attention vision blocks,
/// GQA, M-RoPE), sized to learn the synthetic grounding tasks on a CPU.
pub fn tiny(vocab_size: i64, ids: &SpecialIds) -> Qwen25VlConfig {
    with_ids(
        vocab_size,
        ids,
        TextConfig {
            vocab_size: 0,
            hidden_size: 128,
            intermediate_size: 384,
            num_hidden_layers: 4,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            rms_norm_eps: 1e-6,
            rope_theta: 10_000.0,
            mrope_section: vec![4, 6, 6],
            max_position_embeddings: 4096,
            bos_token_id: None,
            eos_token_ids: vec![],
            pad_token_id: None,
        },
        VisionConfig {
            depth: 4,
            hidden_size: 64,
            intermediate_size: 128,
            num_heads: 2,
            in_channels: 3,
            patch_size: 14,
            temporal_patch_size: 2,
            spatial_merge_size: 2,
            window_size: 112,
            out_hidden_size: 128,
            fullatt_block_indexes: vec![1, 3],
            tokens_per_second: 2,
            rope_theta: 10000.0,
        },
        true,
    )
}

/// About 30M parameters with the real architecture and the tiny tokenizer: the GPU demo's model,
/// large enough to read the synthetic screenshots' text better than [`tiny`], small enough to train
/// from random weights in minutes on one GPU.
pub fn small(vocab_size: i64, ids: &SpecialIds) -> Qwen25VlConfig {
    with_ids(
        vocab_size,
        ids,
        TextConfig {
            vocab_size: 0,
            hidden_size: 512,
            intermediate_size: 1536,
            num_hidden_layers: 8,
            num_attention_heads: 8,
            num_key_value_heads: 2,
            rms_norm_eps: 1e-6,
            rope_theta: 10_000.0,
            mrope_section: vec![8, 12, 12],
            max_position_embeddings: 4096,
            bos_token_id: None,
            eos_token_ids: vec![],
            pad_token_id: None,
        },
        VisionConfig {
            depth: 8,
            hidden_size: 256,
            intermediate_size: 768,
            num_heads: 4,
            in_channels: 3,
            patch_size: 14,
            temporal_patch_size: 2,
            spatial_merge_size: 2,
            window_size: 112,
            out_hidden_size: 512,
            fullatt_block_indexes: vec![3, 7],
            tokens_per_second: 2,
            rope_theta: 10000.0,
        },
        true,
    )
}

fn with_ids(
    vocab_size: i64,
    ids: &SpecialIds,
    mut text: TextConfig,
    vision: VisionConfig,
    tied: bool,
) -> Qwen25VlConfig {
    text.vocab_size = vocab_size;
    text.bos_token_id = Some(ids.endoftext.into());
    text.eos_token_ids = vec![ids.eos.into()];
    text.pad_token_id = Some(ids.pad.into());
    Qwen25VlConfig {
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
pub fn text_parameter_count(c: &Qwen25VlConfig) -> i64 {
    let t = &c.text;
    let kv = t.num_key_value_heads * t.head_dim();
    let attn =
        t.hidden_size * (t.hidden_size + 2 * kv) + (t.hidden_size + 2 * kv) + t.hidden_size * t.hidden_size;
    let layer = attn + 3 * t.hidden_size * t.intermediate_size + 2 * t.hidden_size;
    let heads = if c.tie_word_embeddings { 1 } else { 2 };
    t.num_hidden_layers * layer + heads * t.vocab_size * t.hidden_size + t.hidden_size
}

/// Parameter count of a config, computed from the shapes (no model built).
pub fn parameter_count(c: &Qwen25VlConfig) -> i64 {
    let v = &c.vision;
    let text = text_parameter_count(c);
    let vh = v.hidden_size;
    let block = 3 * vh * vh
        + 3 * vh
        + vh * vh
        + vh
        + 3 * vh * v.intermediate_size
        + 2 * v.intermediate_size
        + vh
        + 2 * vh;
    let merged = vh * v.spatial_merge_size * v.spatial_merge_size;
    let merger = vh + merged * merged + merged + merged * v.out_hidden_size + v.out_hidden_size;
    text + v.depth * block + v.patch_dim() * vh + merger
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_3b_shape_is_valid_and_has_about_3_75b_parameters() {
        let c = qwen2_5_vl_3b();
        c.validate().unwrap();
        let n = parameter_count(&c);
        // Qwen2.5-VL-3B-Instruct's safetensors hold about 3.75B parameters.
        assert!((3_700_000_000..3_800_000_000).contains(&n), "{n}");
    }

    /// By hand from the shapes: text 28 layers of 233,057,792 + embedding and head 2 x 152,064 x
    /// 3,584 + final norm 3,584 = 7,615,616,512; vision 676,550,144 (the 3B's tower, its merger
    /// projecting to 3,584 instead of 2,048): 8.29B in all, the size Qwen2.5-VL-7B is known by.
    #[test]
    fn the_7b_shape_is_valid_and_counts_by_hand() {
        let c = qwen2_5_vl_7b();
        c.validate().unwrap();
        assert_eq!(text_parameter_count(&c), 7_615_616_512);
        assert_eq!(parameter_count(&c), 7_615_616_512 + 676_550_144);
    }

    fn tiny_test_ids() -> SpecialIds {
        SpecialIds {
            endoftext: 585,
            im_start: 586,
            im_end: 587,
            vision_start: 588,
            vision_end: 589,
            image_pad: 590,
            video_pad: 591,
            eos: 587,
            pad: 585,
        }
    }

    #[test]
    fn small_is_valid_with_about_30m_parameters() {
        let c = small(600, &tiny_test_ids());
        c.validate().unwrap();
        let n = parameter_count(&c);
        assert!((25_000_000..40_000_000).contains(&n), "{n}");
    }

    #[test]
    fn tiny_is_valid_with_small_ids() {
        let c = tiny(600, &tiny_test_ids());
        c.validate().unwrap();
        assert_eq!(c.text.eos_token_ids, vec![587]);
        assert!(parameter_count(&c) < 5_000_000);
    }
}
