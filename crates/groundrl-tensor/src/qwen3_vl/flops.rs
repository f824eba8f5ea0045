//! Qwen3-VL's arithmetic in FLOPs, counted as `qwen2_5_vl::flops` counts Qwen2.5-VL's (model FLOPs
//! utilisation, PaLM's definition): 2 per multiply-add of every matmul and attention product of a
//! forward, each tower on the tokens it runs on; norms, activations, rotary embeddings, softmaxes,
//! the position grid's blend and DeepStack's additions (a few FLOPs per element) are left out, and so
//! are padding and recomputation. A backward counts twice its forward (see `qwen2_5_vl::flops`).
//!
//! Two differences from Qwen2.5-VL: the decoder's attention is `heads x head_dim` wide, which Qwen3
//! sets apart from the hidden size; and every vision block attends over a whole frame (no windows),
//! the last block's output and each DeepStack block's going through a merger of the same shape.

use super::{Qwen3VlConfig, VisionConfig};
use crate::model_error::ModelError;
use crate::qwen2_5_vl::flops::Sequence;
use crate::qwen2_5_vl::rope_index::Grid;
use crate::qwen2_5_vl::vision::patch_count;

/// The decoder's forward FLOPs on `sequence`: the layers' weights on every token, causal attention
/// (2 d P^2 per layer for a prefix of P tokens, d = heads x head_dim; 4 d c P + 2 d c^2 for a branch
/// of c tokens, which sees the whole prefix and itself causally), the output head on the scored tokens.
pub fn text_forward_flops(config: &Qwen3VlConfig, sequence: &Sequence) -> f64 {
    let t = &config.text;
    let attention_width = (t.num_attention_heads * t.head_dim) as f64;
    let kv_width = (t.num_key_value_heads * t.head_dim) as f64;
    let (hidden, inner) = (t.hidden_size as f64, t.intermediate_size as f64);
    // q, k, v and o projections, then the SwiGLU MLP's gate, up and down.
    let layer_weights =
        hidden * (attention_width + 2.0 * kv_width) + attention_width * hidden + 3.0 * hidden * inner;
    let prefix = sequence.layout.prefix as f64;
    let branches: f64 = sequence
        .layout
        .branches
        .iter()
        .map(|&c| attention_width * c as f64 * (4.0 * prefix + 2.0 * c as f64))
        .sum();
    let layers = t.num_hidden_layers as f64;
    let attention = (2.0 * attention_width * prefix * prefix + branches) * layers;
    let weights = 2.0 * layer_weights * sequence.tokens() as f64 * layers;
    let head = 2.0 * (t.vocab_size as f64) * hidden * sequence.scored as f64;
    weights + attention + head
}

/// The vision tower's forward FLOPs on one image of `grid`: patch embedding, blocks (attention over
/// each whole frame), the merger and the DeepStack mergers on every merged token.
pub fn vision_forward_flops(config: &Qwen3VlConfig, grid: Grid) -> Result<f64, ModelError> {
    tower_forward_flops(&config.vision, grid)
}

/// [`vision_forward_flops`] of a tower of this kind, from its config alone (Qwen3.5's is one).
pub fn tower_forward_flops(v: &VisionConfig, grid: Grid) -> Result<f64, ModelError> {
    let patches = patch_count(&[grid], v.spatial_merge_size)? as f64;
    let [frames, h, w] = grid;
    let frame = (h * w) as f64;
    let (width, inner) = (v.hidden_size as f64, v.intermediate_size as f64);
    let blocks = v.depth as f64;
    // Non-causal attention: every score, a head-dim product for QK^T and again for PV.
    let attention = 4.0 * width * blocks * frames as f64 * frame * frame;
    let block_weights = width * 3.0 * width + width * width + 2.0 * width * inner;
    let embed = v.patch_dim() as f64 * width;
    let unit = (v.spatial_merge_size * v.spatial_merge_size) as f64;
    let merged_width = width * unit;
    let mergers = (1 + v.deepstack_visual_indexes.len()) as f64;
    let merger = merged_width * merged_width + merged_width * v.out_hidden_size as f64;
    let merges = patches / unit * mergers * merger;
    Ok(2.0 * (patches * (embed + blocks * block_weights) + merges) + attention)
}

/// [`vision_forward_flops`] summed over `grids` (each image attends within its own frames).
pub fn images_forward_flops(config: &Qwen3VlConfig, grids: &[Grid]) -> Result<f64, ModelError> {
    grids.iter().map(|&g| vision_forward_flops(config, g)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hf_folder::tiny_ids;
    use crate::qwen2_5_vl::BranchRow;
    use crate::qwen3_vl::presets;

    fn tiny() -> Qwen3VlConfig {
        presets::tiny(1000, &tiny_ids())
    }

    /// The tiny preset (hidden 128, 4 heads of 32 over 2 key-value heads, MLP 384, 4 layers, a
    /// vocabulary of 1,000) on a row of 10 tokens, 3 of them scored; then the same decoder with heads
    /// of 64, which Qwen3 allows: q and o double, k and v double, attention doubles.
    #[test]
    fn text_forward_flops_of_a_tiny_row_add_up_by_hand() {
        let mut config = tiny();
        // q 128x128, k and v 128x64 each, o 128x128, gate/up/down 128x384.
        let layer = 128.0 * 128.0 + 2.0 * 128.0 * 64.0 + 128.0 * 128.0 + 3.0 * 128.0 * 384.0;
        let want = 2.0 * layer * 10.0 * 4.0 + 2.0 * 128.0 * 100.0 * 4.0 + 2.0 * 1000.0 * 128.0 * 3.0;
        assert_eq!(want, 16_599_040.0);
        assert_eq!(text_forward_flops(&config, &Sequence::row(10, 3)), want);
        config.text.head_dim = 64;
        let layer = 128.0 * 256.0 + 2.0 * 128.0 * 128.0 + 256.0 * 128.0 + 3.0 * 128.0 * 384.0;
        let want = 2.0 * layer * 10.0 * 4.0 + 2.0 * 256.0 * 100.0 * 4.0 + 2.0 * 1000.0 * 128.0 * 3.0;
        assert_eq!(text_forward_flops(&config, &Sequence::row(10, 3)), want);
    }

    /// A branch sees what the same tokens see in a row of their own: a prefix of 7 with one branch of
    /// 5 is the row of 12; with a second branch of 3 it adds that branch's row less the shared prefix.
    #[test]
    fn a_branch_counts_as_its_own_row_and_shares_the_prefix() {
        let config = tiny();
        let text = |s: &Sequence| text_forward_flops(&config, s);
        let branched = |branches: &[usize], scored| Sequence {
            layout: BranchRow {
                prefix: 7,
                branches: branches.to_vec(),
            },
            scored,
        };
        assert_eq!(text(&branched(&[5], 4)), text(&Sequence::row(12, 4)));
        let rows = text(&Sequence::row(12, 4)) + text(&Sequence::row(10, 2)) - text(&Sequence::row(7, 0));
        assert_eq!(text(&branched(&[5, 3], 6)), rows);
    }

    /// The tiny tower (width 64, MLP 128, 4 blocks, 2 DeepStack levels) on a 4 x 6 patch image of
    /// 2 frames: 48 patches, 12 merged tokens, each frame of 24 patches attending over itself.
    #[test]
    fn vision_forward_flops_of_a_tiny_image_add_up_by_hand() {
        let config = tiny();
        let block = 64.0 * 192.0 + 64.0 * 64.0 + 2.0 * 64.0 * 128.0;
        let merger = 256.0 * 256.0 + 256.0 * 128.0;
        let attention = 4.0 * 64.0 * 4.0 * 2.0 * 24.0 * 24.0;
        let want = 2.0 * (48.0 * (1536.0 * 64.0 + 4.0 * block) + 12.0 * 3.0 * merger) + attention;
        assert_eq!(want, 30_277_632.0);
        assert_eq!(vision_forward_flops(&config, [2, 4, 6]).unwrap(), want);
        let both = images_forward_flops(&config, &[[2, 4, 6], [1, 2, 2]]).unwrap();
        assert_eq!(both, want + vision_forward_flops(&config, [1, 2, 2]).unwrap());
        assert!(vision_forward_flops(&config, [1, 3, 4]).is_err());
    }
}
