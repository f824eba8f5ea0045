//! Log-probabilities and entropies of the tokens a training step scores, from Qwen3-VL's final hidden
//! states: the functions the trainer calls on Qwen2.5-VL's decoder (`qwen2_5_vl::model::logprobs_at`
//! and its kin), with the same names, arguments and results, for Qwen3-VL's.
//!
//! Only the scored positions are projected to the vocabulary, `chunk` rows at a time, in f32, so
//! full-vocabulary logits never exist for the whole batch. The arithmetic reads nothing of the decoder
//! but its output head, so the core here takes the head's weight alone.

use tch::{Kind, Tensor};

use super::ModelError;
use super::text::TextModel;
pub use crate::qwen2_5_vl::model::TokenScores;

/// Log-probabilities (B, L) f32 of the tokens where `scored` (B, L) is true, each predicted from the
/// hidden state (B, L, hidden) before it; 0 elsewhere. A scored first column is an input error.
pub fn logprobs_at(
    text: &TextModel,
    hidden: &Tensor,
    ids: &Tensor,
    scored: &Tensor,
    chunk: i64,
) -> Result<Tensor, ModelError> {
    let [logprobs] = scores_at(
        text.output_weight(),
        hidden,
        ids,
        scored,
        chunk,
        |logprobs, targets| [chosen(logprobs, targets)],
    )?;
    Ok(logprobs)
}

/// [`logprobs_at`] and the entropy in nats of each scored token's whole next-token distribution.
pub fn logprobs_and_entropy_at(
    text: &TextModel,
    hidden: &Tensor,
    ids: &Tensor,
    scored: &Tensor,
    chunk: i64,
) -> Result<TokenScores, ModelError> {
    let [logprobs, entropy] = scores_at(text.output_weight(), hidden, ids, scored, chunk, both)?;
    Ok(TokenScores { logprobs, entropy })
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
    let pairs = Pairs {
        targets_at,
        predictors_at,
    };
    let [logprobs, entropy] = scores_of_pairs(text.output_weight(), hidden, ids, &pairs, chunk, both)?;
    Ok(TokenScores { logprobs, entropy })
}

/// Flat (row-major) indices into (B, L) of the tokens scored and of the positions predicting them.
struct Pairs<'a> {
    targets_at: &'a Tensor,
    predictors_at: &'a Tensor,
}

/// The log-probability of each row's target: `logprobs` (n, vocab), `targets` (n,) → (n,).
fn chosen(logprobs: &Tensor, targets: &Tensor) -> Tensor {
    logprobs.gather(1, &targets.unsqueeze(1), false).squeeze_dim(1)
}

/// The chosen token's log-probability and the entropy `-sum_v p_v log p_v` of each row.
fn both(logprobs: &Tensor, targets: &Tensor) -> [Tensor; 2] {
    let entropy = -(logprobs.exp() * logprobs).sum_dim_intlist(-1, false, Kind::Float);
    [chosen(logprobs, targets), entropy]
}

/// Scores the tokens where `scored` (B, L) is true, each predicted by the position before it, and
/// places each of the `N` per-token results back at the scored positions of a (B, L) f32 tensor, 0
/// elsewhere.
fn scores_at<const N: usize>(
    head: &Tensor,
    hidden: &Tensor,
    ids: &Tensor,
    scored: &Tensor,
    chunk: i64,
    per_chunk: impl Fn(&Tensor, &Tensor) -> [Tensor; N],
) -> Result<[Tensor; N], ModelError> {
    let size = ids.size();
    if size.len() != 2 || scored.size() != size {
        return Err(ModelError::Input(format!(
            "scored mask has shape {:?}, ids {size:?}",
            scored.size()
        )));
    }
    let scored = scored.f_to_device(ids.device())?.f_to_kind(Kind::Bool)?;
    if scored.f_narrow(1, 0, 1)?.f_any()?.int64_value(&[]) != 0 {
        return Err(ModelError::Input(
            "the first token of a row has no prediction to score".into(),
        ));
    }
    let targets_at = scored.f_view([-1])?.f_nonzero()?.f_squeeze_dim(1)?;
    let predictors_at = targets_at.f_sub_scalar(1)?;
    let pairs = Pairs {
        targets_at: &targets_at,
        predictors_at: &predictors_at,
    };
    let values = scores_of_pairs(head, hidden, ids, &pairs, chunk, per_chunk)?;
    Ok(values.map(|values| {
        Tensor::zeros([size[0] * size[1]], (Kind::Float, ids.device()))
            .index_put(&[Some(&targets_at)], &values, false)
            .view([size[0], size[1]])
    }))
}

/// Projects the hidden states at the pairs' predictors to f32 vocabulary log-probabilities with the
/// output head `head` (vocab, hidden), `chunk` rows at a time, and hands each chunk with the ids at
/// the pairs' targets to `per_chunk`; returns its `N` per-token results in the pairs' order.
fn scores_of_pairs<const N: usize>(
    head: &Tensor,
    hidden: &Tensor,
    ids: &Tensor,
    pairs: &Pairs,
    chunk: i64,
    per_chunk: impl Fn(&Tensor, &Tensor) -> [Tensor; N],
) -> Result<[Tensor; N], ModelError> {
    let width = hidden.size().last().copied().unwrap_or(0);
    let h = hidden
        .f_reshape([-1, width])?
        .f_index_select(0, pairs.predictors_at)?;
    let targets = ids.f_reshape([-1])?.f_index_select(0, pairs.targets_at)?;
    let chunk = chunk.max(1);
    let mut parts: [Vec<Tensor>; N] = std::array::from_fn(|_| Vec::new());
    let n = targets.size()[0];
    for start in (0..n).step_by(chunk as usize) {
        let size = chunk.min(n - start);
        let logits = h.f_narrow(0, start, size)?.f_linear(head, None::<Tensor>)?;
        let logprobs = logits.f_log_softmax(-1, Kind::Float)?;
        let results = per_chunk(&logprobs, &targets.f_narrow(0, start, size)?);
        for (part, result) in parts.iter_mut().zip(results) {
            part.push(result);
        }
    }
    Ok(parts.map(|part| match part.is_empty() {
        true => Tensor::zeros([0], (Kind::Float, ids.device())),
        false => Tensor::cat(&part, 0),
    }))
}
