//! Log-probabilities and entropies of the tokens a training step scores, from Qwen3-VL's final hidden
//! states: the functions the trainer calls on Qwen2.5-VL's decoder (`qwen2_5_vl::model::logprobs_at`
//! and its kin), with the same names, arguments and results, through Qwen3-VL's output head and the
//! family-neutral scoring of [`crate::scores`].

use tch::Tensor;

use super::ModelError;
use super::text::TextModel;
pub use crate::scores::TokenScores;

/// Log-probabilities (B, L) f32 of the tokens where `scored` (B, L) is true, each predicted from the
/// hidden state (B, L, hidden) before it; 0 elsewhere. A scored first column is an input error.
pub fn logprobs_at(
    text: &TextModel,
    hidden: &Tensor,
    ids: &Tensor,
    scored: &Tensor,
    chunk: i64,
) -> Result<Tensor, ModelError> {
    crate::scores::logprobs_at(text.output_weight(), hidden, ids, scored, chunk)
}

/// [`logprobs_at`] and the entropy in nats of each scored token's whole next-token distribution.
pub fn logprobs_and_entropy_at(
    text: &TextModel,
    hidden: &Tensor,
    ids: &Tensor,
    scored: &Tensor,
    chunk: i64,
) -> Result<TokenScores, ModelError> {
    crate::scores::logprobs_and_entropy_at(text.output_weight(), hidden, ids, scored, chunk)
}

/// The log-probability and entropy at each (target, predictor) pair of flat (row-major) indices into
/// (B, L), in the pairs' order: how branched rows score, a branch's first token being predicted by its
/// prompt's last (`qwen2_5_vl::branches::scored_pairs` makes the pairs).
pub fn logprobs_and_entropy_of_pairs(
    text: &TextModel,
    hidden: &Tensor,
    ids: &Tensor,
    targets_at: &Tensor,
    predictors_at: &Tensor,
    chunk: i64,
) -> Result<TokenScores, ModelError> {
    crate::scores::logprobs_and_entropy_of_pairs(
        text.output_weight(),
        hidden,
        ids,
        targets_at,
        predictors_at,
        chunk,
    )
}
