//! Branched rows (a prompt followed by its completions, `qwen2_5_vl::branches`) through Qwen3.5's
//! decoder, for the shared-prefix update.
//!
//! The other families run such a row in one pass under a mask that lets each branch see the prompt
//! and itself. A linear-attention layer has no mask to take: it carries a state from token to token.
//! So each decoder layer runs a row's prompt once from the start, keeping its state after the prompt
//! (convolution inputs and delta-rule state, or keys and values), and then the row's branches side by
//! side as sequences of their own, each continuing from that state, as each completion would continue
//! its prompt in a row of its own. A branch's tokens thus see the prompt and themselves at the
//! positions they have in the branched layout's M-RoPE numbering; its outputs are those of the
//! row-per-completion layout up to the order of floating-point sums (tested, gradients too).
//!
//! A layer is a function of the whole (B, L, hidden) batch, as gradient checkpointing wants a block:
//! it gathers each row's prompt and branches from it and puts their outputs back where they were
//! (padding stays zero).

use tch::{Device, Tensor};

use super::full_attention::PartialRotary;
use crate::model::BranchRow;
use crate::model_error::ModelError;

/// One branched row's tokens, as indices into the batch's (B x L) flattened tokens.
#[derive(Debug)]
pub(super) struct RowPlan {
    /// The prompt's tokens, in order.
    pub prefix: Tensor,
    /// (branches, width): each branch's tokens, padded at its end by its last token again (padded
    /// places' outputs are not kept).
    pub branches: Tensor,
    /// The real places of `branches` as indices into its flattened (branches x width) outputs, and
    /// the batch's tokens they belong to.
    pub kept: Tensor,
    pub destinations: Tensor,
}

/// A branched batch as the decoder layers run it: each row's plan and the rotation tables of every
/// token, flattened (B x L, turned dims).
#[derive(Debug)]
pub struct BranchPlan {
    pub(super) rows: Vec<RowPlan>,
    pub(super) rotary: PartialRotary,
    /// B x L.
    pub(super) tokens: i64,
}

impl BranchPlan {
    /// The plan of the rows `layout` in a batch of `len` columns, with the batch's rotation tables
    /// `rotary` (B, L, turned dims).
    pub fn new(
        layout: &[BranchRow],
        len: i64,
        rotary: &PartialRotary,
        device: Device,
    ) -> Result<Self, ModelError> {
        let rows = layout
            .iter()
            .enumerate()
            .map(|(r, row)| row_plan(row, r as i64 * len, device))
            .collect::<Result<Vec<_>, ModelError>>()?;
        let flat = |t: &Tensor| -> Result<Tensor, tch::TchError> {
            let dims = t.size()[2];
            t.f_reshape([-1, dims])
        };
        Ok(Self {
            rows,
            rotary: PartialRotary {
                cos: flat(&rotary.cos)?,
                sin: flat(&rotary.sin)?,
            },
            tokens: layout.len() as i64 * len,
        })
    }

    /// The rotation tables of the tokens `places` (any shape) of the flattened batch, shaped (places
    /// ..., turned dims).
    pub(super) fn rotary_at(&self, places: &Tensor) -> Result<PartialRotary, tch::TchError> {
        let take = |t: &Tensor| -> Result<Tensor, tch::TchError> {
            let mut shape = places.size();
            shape.push(t.size()[1]);
            t.f_index_select(0, &places.f_reshape([-1])?)?
                .f_reshape(shape.as_slice())
        };
        Ok(PartialRotary {
            cos: take(&self.rotary.cos)?,
            sin: take(&self.rotary.sin)?,
        })
    }
}

/// The plan of one row whose first token is the flattened batch's token `base`.
fn row_plan(row: &BranchRow, base: i64, device: Device) -> Result<RowPlan, ModelError> {
    if row.prefix == 0 || row.branches.is_empty() || row.branches.contains(&0) {
        return Err(ModelError::Input(format!(
            "a branched row needs a prompt and branches of at least one token each, not {row:?}"
        )));
    }
    let width = *row.branches.iter().max().unwrap_or(&1);
    let mut branches = Vec::with_capacity(row.branches.len() * width);
    let (mut kept, mut destinations) = (Vec::new(), Vec::new());
    for (b, start) in row.starts().into_iter().enumerate() {
        let count = row.branches[b];
        for t in 0..width {
            let place = base + (start + t.min(count - 1)) as i64;
            branches.push(place);
            if t < count {
                kept.push((b * width + t) as i64);
                destinations.push(place);
            }
        }
    }
    let tensor = |v: &[i64]| Tensor::f_from_slice(v).and_then(|t| t.f_to_device(device));
    let prefix: Vec<i64> = (0..row.prefix as i64).map(|t| base + t).collect();
    Ok(RowPlan {
        prefix: tensor(&prefix)?,
        branches: tensor(&branches)?.f_view([row.branches.len() as i64, width as i64])?,
        kept: tensor(&kept)?,
        destinations: tensor(&destinations)?,
    })
}

/// The (B x L, hidden) outputs of a layer from each row's pieces: `pieces` of (values (n, hidden),
/// destinations (n,)), zeros elsewhere; differentiable in the values.
pub(super) fn assemble(
    pieces: Vec<(Tensor, Tensor)>,
    tokens: i64,
    like: &Tensor,
) -> Result<Tensor, ModelError> {
    let (values, places): (Vec<Tensor>, Vec<Tensor>) = pieces.into_iter().unzip();
    let values = Tensor::f_cat(&values, 0)?;
    let places = Tensor::f_cat(&places, 0)?;
    let hidden = values.size()[1];
    let zeros = Tensor::f_zeros([tokens, hidden], (like.kind(), like.device()))?;
    Ok(zeros.f_index_copy(0, &places, &values.f_to_kind(like.kind())?)?)
}

/// A row's prompt and branches taken from the flattened batch `flat` (B x L, hidden): (1, prefix,
/// hidden) and (branches, width, hidden).
pub(super) fn gather(flat: &Tensor, row: &RowPlan) -> Result<(Tensor, Tensor), ModelError> {
    let hidden = flat.size()[1];
    let prefix = flat.f_index_select(0, &row.prefix)?.f_unsqueeze(0)?;
    let shape = row.branches.size();
    let branches = flat
        .f_index_select(0, &row.branches.f_reshape([-1])?)?
        .f_reshape([shape[0], shape[1], hidden])?;
    Ok((prefix, branches))
}

/// The kept places' outputs of a row's branches `out` (branches, width, hidden), flattened.
pub(super) fn kept(out: &Tensor, row: &RowPlan) -> Result<Tensor, ModelError> {
    let hidden = out.size()[2];
    Ok(out.f_reshape([-1, hidden])?.f_index_select(0, &row.kept)?)
}
