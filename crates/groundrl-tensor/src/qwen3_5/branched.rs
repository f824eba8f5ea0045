//! Branched rows (a prompt followed by its completions, `qwen2_5_vl::branches`) through Qwen3.5's
//! decoder, for the shared-prefix update.
//!
//! The other families run such a row in one pass under a mask that lets each branch see the prompt
//! and itself. A linear-attention layer has no mask to take: it carries a state from token to token.
//! So each decoder layer runs the batch's prompts from their start, side by side (left-padded to the
//! longest; padding writes nothing into a linear-attention state, and full attention hides padded
//! keys), keeping each prompt's state after it (convolution inputs and delta-rule state, or keys and
//! values), and then every branch of the batch side by side as a sequence of its own, continuing from
//! its prompt's state, as each completion would continue its prompt in a row of its own. A branch's
//! tokens thus see the prompt and themselves at the positions they have in the branched layout's
//! M-RoPE numbering; its outputs are those of the row-per-completion layout up to the order of
//! floating-point sums (tested, gradients too). A layer is two passes whatever the number of rows.
//!
//! A layer is a function of the whole (B, L, hidden) batch, as gradient checkpointing wants a block:
//! it gathers the prompts and branches from it and puts their outputs back where they were (padding
//! stays zero).

use tch::{Device, Kind, Tensor};

use super::full_attention::PartialRotary;
use crate::decoder::AttentionMask;
use crate::model::BranchRow;
use crate::model_error::ModelError;

/// Sequences gathered from the batch's (B x L) flattened tokens, side by side.
#[derive(Debug)]
pub(super) struct Gathered {
    /// (sequences, width): each sequence's tokens as indices into the flattened batch; padded places
    /// repeat a token of the sequence (their outputs are not kept).
    pub places: Tensor,
    /// The rotation tables of `places` (sequences, width, turned dims).
    pub rotary: PartialRotary,
    /// The real places as indices into the flattened (sequences x width) outputs, and the batch's
    /// tokens they belong to.
    pub kept: Tensor,
    pub destinations: Tensor,
}

impl Gathered {
    /// The sequences' inputs (sequences, width, hidden) from the flattened batch `flat` (B x L,
    /// hidden).
    pub(super) fn take(&self, flat: &Tensor) -> Result<Tensor, tch::TchError> {
        let (shape, hidden) = (self.places.size(), flat.size()[1]);
        flat.f_index_select(0, &self.places.f_reshape([-1])?)?
            .f_reshape([shape[0], shape[1], hidden])
    }

    /// The kept places' outputs of `out` (sequences, width, hidden), flattened, with their
    /// destinations in the batch.
    pub(super) fn kept(&self, out: &Tensor) -> Result<(Tensor, Tensor), tch::TchError> {
        let hidden = out.size()[2];
        let values = out.f_reshape([-1, hidden])?.f_index_select(0, &self.kept)?;
        Ok((values, self.destinations.shallow_clone()))
    }
}

/// A branched batch as the decoder layers run it.
#[derive(Debug)]
pub struct BranchPlan {
    /// Each row's prompt, left-padded to the longest.
    pub(super) prompts: Gathered,
    /// (rows, longest prompt) 1 for a prompt's token, 0 for padding, and the mask of the prompts'
    /// full attention (causal, padded keys hidden).
    pub(super) real: Tensor,
    pub(super) prompt_mask: AttentionMask,
    /// Every row's branches, each padded at its end by its last token again.
    pub(super) branches: Gathered,
    /// (branches,): the row whose prompt each branch continues.
    pub(super) owners: Tensor,
    /// (branches, longest prompt) true where a branch may attend to its prompt's keys.
    pub(super) prompt_keys: Tensor,
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
        if let Some(row) = layout
            .iter()
            .find(|row| row.prefix == 0 || row.branches.is_empty() || row.branches.contains(&0))
        {
            return Err(ModelError::Input(format!(
                "a branched row needs a prompt and branches of at least one token each, not {row:?}"
            )));
        }
        let flat = |t: &Tensor| -> Result<Tensor, tch::TchError> {
            let dims = t.size()[2];
            t.f_reshape([-1, dims])
        };
        let tables = PartialRotary {
            cos: flat(&rotary.cos)?,
            sin: flat(&rotary.sin)?,
        };
        let tensor = |v: &[i64]| Tensor::f_from_slice(v).and_then(|t| t.f_to_device(device));
        let prompts = prompt_places(layout, len);
        let branches = branch_places(layout, len);
        let real = tensor(&prompts.real)?.f_view([layout.len() as i64, prompts.width])?;
        let owners = tensor(&branches.owners)?;
        Ok(Self {
            prompts: prompts.places.gathered(&tables, &tensor)?,
            prompt_mask: AttentionMask::causal_with_padding(&real),
            prompt_keys: real.f_index_select(0, &owners)?.f_to_kind(Kind::Bool)?,
            real,
            branches: branches.places.gathered(&tables, &tensor)?,
            owners,
            tokens: layout.len() as i64 * len,
        })
    }
}

/// Places of sequences side by side before they become tensors.
struct Places {
    width: i64,
    places: Vec<i64>,
    kept: Vec<i64>,
    destinations: Vec<i64>,
}

impl Places {
    fn new(width: usize) -> Self {
        Self {
            width: width as i64,
            places: Vec::new(),
            kept: Vec::new(),
            destinations: Vec::new(),
        }
    }

    /// The next place of the current sequence: the batch's token `place`, kept when `real`.
    fn push(&mut self, place: i64, real: bool) {
        if real {
            self.kept.push(self.places.len() as i64);
            self.destinations.push(place);
        }
        self.places.push(place);
    }

    fn gathered(
        self,
        tables: &PartialRotary,
        tensor: &dyn Fn(&[i64]) -> Result<Tensor, tch::TchError>,
    ) -> Result<Gathered, tch::TchError> {
        let places = tensor(&self.places)?.f_view([-1, self.width])?;
        let take = |t: &Tensor| -> Result<Tensor, tch::TchError> {
            t.f_index_select(0, &places.f_reshape([-1])?)?.f_reshape([
                places.size()[0],
                self.width,
                t.size()[1],
            ])
        };
        Ok(Gathered {
            rotary: PartialRotary {
                cos: take(&tables.cos)?,
                sin: take(&tables.sin)?,
            },
            places,
            kept: tensor(&self.kept)?,
            destinations: tensor(&self.destinations)?,
        })
    }
}

/// Each row's prompt left-padded to the longest (padded places repeat the prompt's first token), and
/// which places are real.
struct PromptPlaces {
    places: Places,
    width: i64,
    real: Vec<i64>,
}

fn prompt_places(layout: &[BranchRow], len: i64) -> PromptPlaces {
    let width = layout.iter().map(|row| row.prefix).max().unwrap_or(1);
    let mut places = Places::new(width);
    let mut real = Vec::with_capacity(layout.len() * width);
    for (r, row) in layout.iter().enumerate() {
        let base = r as i64 * len;
        let pad = width - row.prefix;
        for t in 0..width {
            let token = t >= pad;
            places.push(base + t.saturating_sub(pad) as i64, token);
            real.push(i64::from(token));
        }
    }
    PromptPlaces {
        places,
        width: width as i64,
        real,
    }
}

/// Every row's branches, each padded at its end to the longest by its last token again, and the row
/// each continues.
struct BranchPlaces {
    places: Places,
    owners: Vec<i64>,
}

fn branch_places(layout: &[BranchRow], len: i64) -> BranchPlaces {
    let width = layout
        .iter()
        .flat_map(|row| row.branches.iter().copied())
        .max()
        .unwrap_or(1);
    let mut places = Places::new(width);
    let mut owners = Vec::new();
    for (r, row) in layout.iter().enumerate() {
        let base = r as i64 * len;
        for (start, &count) in row.starts().into_iter().zip(&row.branches) {
            owners.push(r as i64);
            for t in 0..width {
                places.push(base + (start + t.min(count - 1)) as i64, t < count);
            }
        }
    }
    BranchPlaces { places, owners }
}

/// The (B x L, hidden) outputs of a layer from its pieces: `pieces` of (values (n, hidden),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Two rows of a 9-column batch: prompts of 3 and 2 tokens (the second left-padded by one), the
    /// first row with branches of 2 and 1 tokens, the second with one of 3.
    #[test]
    fn places_pad_prompts_on_the_left_and_branches_on_the_right() {
        let layout = [
            BranchRow {
                prefix: 3,
                branches: vec![2, 1],
            },
            BranchRow {
                prefix: 2,
                branches: vec![3],
            },
        ];
        let prompts = prompt_places(&layout, 9);
        assert_eq!(prompts.places.places, [0, 1, 2, 9, 9, 10]);
        assert_eq!(prompts.real, [1, 1, 1, 0, 1, 1]);
        assert_eq!(prompts.places.kept, [0, 1, 2, 4, 5]);
        assert_eq!(prompts.places.destinations, [0, 1, 2, 9, 10]);
        let branches = branch_places(&layout, 9);
        assert_eq!(branches.places.places, [3, 4, 4, 5, 5, 5, 11, 12, 13]);
        assert_eq!(branches.places.kept, [0, 1, 3, 6, 7, 8]);
        assert_eq!(branches.places.destinations, [3, 4, 5, 11, 12, 13]);
        assert_eq!(branches.owners, [0, 0, 1]);
    }
}
