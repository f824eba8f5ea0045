//! Qwen3.5's arithmetic in FLOPs, counted as the other families' (model FLOPs utilisation, PaLM's
//! definition: 2 per multiply-add of every matmul and attention product of a forward; norms,
//! activations, gates, rotations, the convolution and the decays left out, and so are padding and
//! recomputation; a backward counts twice its forward).
//!
//! A full-attention layer counts as Qwen3-VL's, its query projection twice as wide (each head's
//! query and its output gate). A linear-attention layer counts its projections and, per token and
//! value head, the three (key head dim x value head dim) products of the recurrent form of the delta
//! rule (the state read by the key and by the query, and its update); the chunked form computes the
//! same function in another arrangement, which is not counted apart. The vision tower is Qwen3-VL's
//! without DeepStack.

use super::config::Qwen35Config;
use super::text::LayerType;
use crate::model_error::ModelError;
use crate::qwen2_5_vl::flops::Sequence;
use crate::qwen2_5_vl::rope_index::Grid;
use crate::qwen3_vl::flops::tower_forward_flops;

/// The decoder's forward FLOPs on `sequence` (its branches counted as tokens after the prefix).
pub fn text_forward_flops(config: &Qwen35Config, sequence: &Sequence) -> f64 {
    let t = &config.text;
    let (a, l) = (&t.attention, &t.linear);
    let hidden = t.hidden_size as f64;
    let tokens = sequence.tokens() as f64;
    let attention_width = (a.heads * a.head_dim) as f64;
    let kv_width = (a.kv_heads * a.head_dim) as f64;
    let full_weights = hidden * (2.0 * attention_width + 2.0 * kv_width) + attention_width * hidden;
    let (key_dim, value_dim) = (
        (l.key_heads * l.key_head_dim) as f64,
        (l.value_heads * l.value_head_dim) as f64,
    );
    let linear_weights =
        hidden * (2.0 * key_dim + 2.0 * value_dim + 2.0 * l.value_heads as f64) + value_dim * hidden;
    let rule = 3.0 * (l.value_heads * l.key_head_dim * l.value_head_dim) as f64;
    let mlp = 3.0 * hidden * t.intermediate_size as f64;
    let full = t.layers_of(LayerType::FullAttention) as f64;
    let linear = t.layers_of(LayerType::LinearAttention) as f64;
    let causal = 2.0 * attention_width * tokens * tokens;
    let weights = full * full_weights + linear * (linear_weights + rule) + t.layer_types.len() as f64 * mlp;
    let head = 2.0 * (t.vocab_size as f64) * hidden * sequence.scored as f64;
    2.0 * weights * tokens + full * causal + head
}

/// The vision tower's forward FLOPs on images of `grids`.
pub fn images_forward_flops(config: &Qwen35Config, grids: &[Grid]) -> Result<f64, ModelError> {
    grids
        .iter()
        .map(|&g| tower_forward_flops(&config.vision, g))
        .sum()
}
