//! The model's arithmetic in FLOPs, as model FLOPs utilisation counts it (PaLM's definition): 2 per
//! multiply-add of every matmul and attention product of a forward, each tower on the tokens it
//! runs on. A backward does twice its forward's work (gradients of the activations and of the
//! weights), so a trained part counts 3 forwards and a frozen one 1 (a LoRA-adapted decoder is
//! counted as trained, though its frozen weights get no weight gradients: about 2 forwards' work,
//! so its count runs up to 1.5x high). Recomputation (gradient
//! checkpointing) is not counted: it is a cost of the implementation, not of the model. Padding is
//! not counted either, and neither are norms, activations, rotary embeddings and softmaxes (a few
//! FLOPs per element, not per weight).
//!
//! The simpler 6ND formula, 6 x trainable parameters x tokens, leaves attention out and credits the
//! vision tower's parameters once per decoder token: a quarter of the patches it runs on.

use super::Qwen25VlConfig;
use super::branches::BranchRow;
use super::rope_index::Grid;
use super::vision::window_layout;
use crate::model_error::ModelError;

/// One sequence the text decoder runs: `layout.prefix` tokens attended causally, then each of
/// `layout.branches`, which attends to the whole prefix and causally to itself only (the shared-
/// prefix layout of [`BranchRow`]); a plain row is a prefix without branches. `scored` tokens go
/// through the output head (the training step projects only the tokens it scores).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sequence {
    pub layout: BranchRow,
    pub scored: usize,
}

impl Sequence {
    /// A plain row of `tokens` tokens (padding excluded), `scored` of them scored.
    pub fn row(tokens: usize, scored: usize) -> Self {
        Self {
            layout: BranchRow {
                prefix: tokens,
                branches: Vec::new(),
            },
            scored,
        }
    }

    /// Tokens the decoder runs.
    pub fn tokens(&self) -> usize {
        self.layout.len()
    }
}

/// The text decoder's forward FLOPs on `sequence`: the layers' weights on every token, causal
/// attention, the output head on the scored tokens.
///
/// Attention counts half of the P x P scores of a causal prefix of P tokens, each a product of
/// the attention width d (heads x head dim) for QK^T and again for PV: 2 d P^2 per layer. A branch
/// of c tokens sees the whole prefix and half of its own c x c block: (4 d c P + 2 d c^2) per layer,
/// so a plain row of P + c tokens counts the same as a prefix of P with one branch of c.
pub fn text_forward_flops(config: &Qwen25VlConfig, sequence: &Sequence) -> f64 {
    let t = &config.text;
    let attention_width = (t.num_attention_heads * t.head_dim()) as f64;
    let kv_width = (t.num_key_value_heads * t.head_dim()) as f64;
    let (hidden, inner) = (t.hidden_size as f64, t.intermediate_size as f64);
    // q, k, v and o projections, then the SwiGLU MLP's gate, up and down.
    let layer_weights =
        hidden * (attention_width + 2.0 * kv_width) + attention_width * hidden + 3.0 * hidden * inner;
    let layers = t.num_hidden_layers as f64;
    let prefix = sequence.layout.prefix as f64;
    let branches: f64 = sequence
        .layout
        .branches
        .iter()
        .map(|&c| {
            let c = c as f64;
            4.0 * attention_width * c * prefix + 2.0 * attention_width * c * c
        })
        .sum();
    let attention = (2.0 * attention_width * prefix * prefix + branches) * layers;
    let weights = 2.0 * layer_weights * sequence.tokens() as f64 * layers;
    let head = 2.0 * (t.vocab_size as f64) * hidden * sequence.scored as f64;
    weights + attention + head
}

/// The vision tower's forward FLOPs on one image of `grid`: patch embedding, blocks (window attention
/// within each window, full attention over the frame in the full-attention blocks), merger.
pub fn vision_forward_flops(config: &Qwen25VlConfig, grid: Grid) -> Result<f64, ModelError> {
    let v = &config.vision;
    let (width, inner) = (v.hidden_size as f64, v.intermediate_size as f64);
    let merged_width = width * (v.spatial_merge_size * v.spatial_merge_size) as f64;
    let window = v.window_size / (v.patch_size * v.spatial_merge_size);
    let layout = window_layout(&[grid], v.spatial_merge_size, window)?;
    let patches = layout.window_lengths.iter().sum::<i64>() as f64;
    let squares = |lengths: &[i64]| lengths.iter().map(|&l| (l * l) as f64).sum::<f64>();
    let full_blocks = v.fullatt_block_indexes.len() as f64;
    let windowed_blocks = v.depth as f64 - full_blocks;
    // Non-causal attention: every score, a head-dim product for QK^T and again for PV.
    let attention = 4.0
        * width
        * (windowed_blocks * squares(&layout.window_lengths) + full_blocks * squares(&layout.frame_lengths));
    let block_weights = width * 3.0 * width + width * width + 3.0 * width * inner;
    let embed = v.patch_dim() as f64 * width;
    let merger = merged_width * merged_width + merged_width * v.out_hidden_size as f64;
    let merged = patches / (v.spatial_merge_size * v.spatial_merge_size) as f64;
    Ok(2.0 * (patches * (embed + v.depth as f64 * block_weights) + merged * merger) + attention)
}

/// [`vision_forward_flops`] summed over `grids` (each image runs in its own windows and frame).
pub fn images_forward_flops(config: &Qwen25VlConfig, grids: &[Grid]) -> Result<f64, ModelError> {
    grids.iter().map(|&g| vision_forward_flops(config, g)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hf_folder::tiny_ids;
    use crate::qwen2_5_vl::presets;

    fn tiny() -> Qwen25VlConfig {
        presets::tiny(1000, &tiny_ids())
    }

    fn branched(prefix: usize, branches: &[usize], scored: usize) -> Sequence {
        Sequence {
            layout: BranchRow {
                prefix,
                branches: branches.to_vec(),
            },
            scored,
        }
    }

    /// The tiny preset (hidden 128, 4 heads of 32 over 2 key-value heads, MLP 384, 4 layers, a
    /// vocabulary of 1,000) on a row of 10 tokens, 3 of them scored.
    #[test]
    fn text_forward_flops_of_a_tiny_row_add_up_by_hand() {
        // q 128x128, k and v 128x64 each, o 128x128, gate/up/down 128x384.
        let layer = 128.0 * 128.0 + 2.0 * 128.0 * 64.0 + 128.0 * 128.0 + 3.0 * 128.0 * 384.0;
        assert_eq!(layer, 196_608.0);
        let weights = 2.0 * layer * 10.0 * 4.0;
        let attention = 2.0 * 128.0 * 10.0 * 10.0 * 4.0;
        let head = 2.0 * 1000.0 * 128.0 * 3.0;
        assert_eq!(weights + attention + head, 16_599_040.0);
        assert_eq!(text_forward_flops(&tiny(), &Sequence::row(10, 3)), 16_599_040.0);
    }

    /// A branch sees what the same tokens see in a row of their own, so prefix P + one branch c is
    /// the row of P + c; two branches are two rows that share the prefix's weights and attention.
    #[test]
    fn a_branch_counts_as_its_own_row_and_shares_the_prefix() {
        let config = tiny();
        let text = |s: &Sequence| text_forward_flops(&config, s);
        assert_eq!(text(&branched(7, &[5], 4)), text(&Sequence::row(12, 4)));
        let prefix = text(&Sequence::row(7, 0));
        let two = text(&branched(7, &[5, 3], 6));
        let rows = text(&Sequence::row(12, 4)) + text(&Sequence::row(10, 2));
        assert_eq!(two, rows - prefix);
        // By hand: 15 tokens through the weights, 2 d P^2 + (4 d c P + 2 d c^2) for c = 5 and 3.
        let d = 128.0;
        let attention =
            2.0 * d * 49.0 + (4.0 * d * 5.0 * 7.0 + 2.0 * d * 25.0) + (4.0 * d * 3.0 * 7.0 + 2.0 * d * 9.0);
        let want = 2.0 * 196_608.0 * 15.0 * 4.0 + attention * 4.0 + 2.0 * 1000.0 * 128.0 * 6.0;
        assert_eq!(two, want);
    }

    /// The tiny tower (width 64, MLP 128, 4 blocks of which 2 full-attention, windows of 112 pixels
    /// = 4 x 4 merged tokens) on a 4 x 12 patch image: 2 x 6 merged tokens, cut into windows of
    /// 2 x 4 and 2 x 2 merged tokens (32 and 16 patches).
    #[test]
    fn vision_forward_flops_of_a_tiny_image_add_up_by_hand() {
        let config = tiny();
        let block = 64.0 * 192.0 + 64.0 * 64.0 + 3.0 * 64.0 * 128.0;
        let merger = 256.0 * 256.0 + 256.0 * 128.0;
        let attention = 4.0 * 64.0 * (2.0 * (32.0 * 32.0 + 16.0 * 16.0) + 2.0 * 48.0 * 48.0);
        let want = 2.0 * (48.0 * (1176.0 * 64.0 + 4.0 * block) + 12.0 * merger) + attention;
        assert_eq!(want, 27_148_288.0);
        assert_eq!(vision_forward_flops(&config, [1, 4, 12]).unwrap(), want);
        let both = images_forward_flops(&config, &[[1, 4, 12], [1, 4, 4]]).unwrap();
        let small = vision_forward_flops(&config, [1, 4, 4]).unwrap();
        assert_eq!(both, want + small);
    }
}
