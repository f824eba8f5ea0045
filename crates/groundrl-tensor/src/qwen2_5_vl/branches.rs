//! Rows that hold one prompt followed by several continuations of it ("branches"), each branch
//! attending to the prompt and to itself only. GRPO's n completions of a prompt then share one
//! forward of the prompt: the vision tower and the prompt's decoder tokens run once per group instead
//! of n times. A branch's tokens see exactly the keys and the positions they see in a row of their
//! own (the prompt's M-RoPE positions, then the text positions that follow them, as transformers'
//! `get_rope_index` numbers text after the prompt), so each completion's log-probs and gradient are
//! those of the row-per-completion layout up to the order of floating-point sums. The same layout as
//! NVIDIA NeMo-RL's shared-prefix GRPO training and unsloth's PrefixGrouper, here with multimodal
//! prompts (`groundrl_train::update (update/shared_prefix.rs)` builds the rows).

use tch::{Device, Kind, TchError, Tensor};

use super::rope_index::{Grid, RopeIndex, RopeSpec};
use crate::decoder::AttentionMask;
use crate::model_error::ModelError;
use crate::packed_attention::{self, Packed, PackedSequence, dense_mask};
use crate::upload::upload;

/// The layout of one branched row: `prefix` prompt tokens, then each branch's tokens in order, then
/// right padding up to the batch's length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchRow {
    pub prefix: usize,
    /// Each branch's token count, in order.
    pub branches: Vec<usize>,
}

impl BranchRow {
    /// Tokens that are not padding.
    pub fn len(&self) -> usize {
        self.prefix + self.branches.iter().sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where each branch starts in the row.
    pub fn starts(&self) -> Vec<usize> {
        self.branches
            .iter()
            .scan(self.prefix, |next, &n| {
                let start = *next;
                *next += n;
                Some(start)
            })
            .collect()
    }

    /// The token that predicts token `t` of branch `b`: the prompt's last token for a branch's
    /// first token (as in a row of its own), else the branch's token before it.
    pub fn predictor(&self, b: usize, t: usize) -> usize {
        match t {
            0 => self.prefix - 1,
            _ => self.starts()[b] + t - 1,
        }
    }
}

/// Checks the layout against a batch of `rows` rows of `len` tokens.
pub(crate) fn check(layout: &[BranchRow], rows: usize, len: usize) -> Result<(), ModelError> {
    if layout.len() != rows {
        return Err(ModelError::Input(format!(
            "{} branch layouts for {rows} rows",
            layout.len()
        )));
    }
    for (b, row) in layout.iter().enumerate() {
        if row.prefix == 0 || row.len() > len {
            return Err(ModelError::Input(format!(
                "row {b}: a prompt of {} tokens and branches of {} in a row of {len}",
                row.prefix,
                row.len() - row.prefix
            )));
        }
    }
    Ok(())
}

/// The causal sequences of branched rows, in flat positions of the (B, `len`) batch: each prompt,
/// and each branch with its prompt's positions as shared keys (`crate::packed_attention`).
pub(crate) fn sequences(layout: &[BranchRow], len: usize) -> Vec<PackedSequence> {
    let mut out = Vec::new();
    for (b, row) in layout.iter().enumerate() {
        let first = b * len;
        let prompt = first..first + row.prefix;
        out.push(PackedSequence {
            shared: first..first,
            own: prompt.clone(),
        });
        for (&start, &n) in row.starts().iter().zip(&row.branches) {
            out.push(PackedSequence {
                shared: prompt.clone(),
                own: first + start..first + start + n,
            });
        }
    }
    out
}

/// Which keys each query may attend to, as [`AttentionMask`] of `kind` activations on `device`:
/// the prompt causally; a branch's token the whole prompt and its own branch up to itself; a padding
/// token itself alone (an empty softmax row would be NaN). Packed sequences on the flash kernels
/// where they run ([`packed_attention::applies`]), else a dense (B, 1, L, L) mask.
pub(crate) fn attention(
    layout: &[BranchRow],
    len: usize,
    device: Device,
    kind: Kind,
) -> Result<AttentionMask, ModelError> {
    let sequences = sequences(layout, len);
    if packed_attention::applies(device, kind) {
        return Ok(AttentionMask::Packed(Packed::new(
            &sequences,
            layout.len() * len,
            device,
        )?));
    }
    Ok(AttentionMask::Allowed(dense_mask(
        &sequences,
        layout.len(),
        len,
        device,
    )))
}

/// Positions of branched rows: the prompt's as [`RopeIndex`] numbers a row of the prompt alone, and
/// each branch's tokens `p + 1, p + 2, ...` on all three components after the prompt's largest
/// position `p`. Padding is at 0. The prompts hold every image of the batch (`images`, in order).
pub(crate) fn positions(
    spec: &RopeSpec,
    input_ids: &[Vec<i64>],
    layout: &[BranchRow],
    images: &[Grid],
) -> Result<RopeIndex, ModelError> {
    let prompts: Vec<Vec<i64>> = input_ids
        .iter()
        .zip(layout)
        .map(|(ids, row)| (0..ids.len()).map(|i| i64::from(i < row.prefix)).collect())
        .collect();
    let mut rope = RopeIndex::new(spec, input_ids, Some(&prompts), images, &[], &[])?;
    for (b, row) in layout.iter().enumerate() {
        // The next text position after the prompt: its largest position + 1.
        let next = row.prefix as i64 + rope.deltas[b];
        for (&start, &n) in row.starts().iter().zip(&row.branches) {
            for t in 0..n {
                for component in rope.positions.iter_mut() {
                    component[b][start + t] = next + t as i64;
                }
            }
        }
    }
    Ok(rope)
}

/// For scoring: the flat (row-major) index of every branch token to score and of the token that
/// predicts it, for `scored(b, branch, t)`; int64 tensors on `device`, uploaded without waiting for
/// the device ([`upload`]).
pub fn scored_pairs(
    layout: &[BranchRow],
    len: usize,
    device: Device,
    mut scored: impl FnMut(usize, usize, usize) -> bool,
) -> Result<(Tensor, Tensor), TchError> {
    let (mut targets, mut predictors) = (Vec::new(), Vec::new());
    for (b, row) in layout.iter().enumerate() {
        for (branch, (&start, &n)) in row.starts().iter().zip(&row.branches).enumerate() {
            for t in (0..n).filter(|&t| scored(b, branch, t)) {
                targets.push((b * len + start + t) as i64);
                predictors.push((b * len + row.predictor(branch, t)) as i64);
            }
        }
    }
    Ok((upload(&targets, device)?, upload(&predictors, device)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_branch_sees_the_prompt_and_itself() {
        // Prompt of 2, branches of 2 and 1, one padding token: length 6.
        let row = BranchRow {
            prefix: 2,
            branches: vec![2, 1],
        };
        assert_eq!((row.len(), row.starts()), (5, vec![2, 4]));
        assert_eq!(
            (row.predictor(0, 0), row.predictor(0, 1), row.predictor(1, 0)),
            (1, 2, 1)
        );
        let AttentionMask::Allowed(m) = attention(&[row], 6, Device::Cpu, Kind::Float).unwrap() else {
            panic!("the CPU takes the dense mask");
        };
        let m = m.view([6, 6]);
        let rows: Vec<Vec<bool>> = (0..6).map(|q| Vec::<bool>::try_from(m.get(q)).unwrap()).collect();
        let t = true;
        let f = false;
        assert_eq!(rows[0], [t, f, f, f, f, f]);
        assert_eq!(rows[1], [t, t, f, f, f, f]);
        assert_eq!(rows[2], [t, t, t, f, f, f]);
        assert_eq!(rows[3], [t, t, t, t, f, f]);
        // The second branch does not see the first.
        assert_eq!(rows[4], [t, t, f, f, t, f]);
        // Padding sees itself.
        assert_eq!(rows[5], [f, f, f, f, f, t]);
    }

    #[test]
    fn branches_continue_the_prompts_positions() {
        let spec = RopeSpec {
            image_token_id: 9,
            video_token_id: 8,
            spatial_merge_size: 2,
            tokens_per_second: 2,
        };
        // Text, a 1x4x4 image (4 merged tokens), text: the image's positions run 1..=2 on h and w,
        // the text after it starts at 3.
        let ids = vec![vec![1, 9, 9, 9, 9, 2, 5, 6, 7, 0]];
        let layout = [BranchRow {
            prefix: 6,
            branches: vec![2, 1],
        }];
        let rope = positions(&spec, &ids, &layout, &[[1, 4, 4]]).unwrap();
        let alone = RopeIndex::new(&spec, &[ids[0][..8].to_vec()], None, &[[1, 4, 4]], &[], &[]).unwrap();
        // The prompt and the first branch as in a row of their own.
        for c in 0..3 {
            assert_eq!(rope.positions[c][0][..8], alone.positions[c][0][..]);
        }
        // The second branch restarts where the first did; padding at 0.
        assert_eq!(rope.positions[0][0][8], alone.positions[0][0][6]);
        assert_eq!(rope.positions[2][0][9], 0);
        let (targets, predictors) = scored_pairs(&layout, 10, Device::Cpu, |_, _, _| true).unwrap();
        assert_eq!(Vec::<i64>::try_from(targets).unwrap(), [6, 7, 8]);
        assert_eq!(Vec::<i64>::try_from(predictors).unwrap(), [5, 6, 5]);
        assert!(check(&layout, 1, 8).is_err() && check(&layout, 1, 10).is_ok());
    }
}
