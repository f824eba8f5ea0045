//! Log-probabilities and entropies of the tokens a training step scores, from a decoder's final
//! hidden states and its output head: every model family's decoder ends in the same vocabulary
//! projection, so the scoring reads only the head's weight (vocab, hidden) and is shared.
//!
//! Only the scored positions are projected to the vocabulary, `chunk` rows at a time, in f32, so
//! full-vocabulary logits never exist for the whole batch.

use tch::{Kind, Tensor};

use crate::model_error::ModelError;

/// Log-probabilities (B, L) f32 of the tokens where `scored` (B, L) is true, each predicted from the
/// final normed hidden state (B, L, hidden) before it through the output head `head` (vocab, hidden);
/// 0 elsewhere. A scored first column is an input error.
pub fn logprobs_at(
    head: &Tensor,
    hidden: &Tensor,
    ids: &Tensor,
    scored: &Tensor,
    chunk: i64,
) -> Result<Tensor, ModelError> {
    let [logprobs] = scores_at(head, hidden, ids, scored, chunk, |logprobs, targets| {
        [chosen(logprobs, targets)]
    })?;
    Ok(logprobs)
}

/// Log-probabilities and entropies of the scored tokens, as [`logprobs_and_entropy_at`] computes them.
#[derive(Debug)]
pub struct TokenScores {
    /// (B, L) f32: the log-probability of each scored token, 0 elsewhere (as [`logprobs_at`]).
    pub logprobs: Tensor,
    /// (B, L) f32: the entropy in nats of the full next-token distribution each scored token was
    /// drawn from, 0 elsewhere.
    pub entropy: Tensor,
}

/// [`logprobs_at`] plus the entropy of the whole vocabulary distribution at each scored token, for
/// the loss's entropy bonus and its telemetry. Both are differentiable; the entropy's graph keeps one
/// more (chunk, vocab) f32 buffer per chunk, so take [`logprobs_at`] when the entropy is not needed.
pub fn logprobs_and_entropy_at(
    head: &Tensor,
    hidden: &Tensor,
    ids: &Tensor,
    scored: &Tensor,
    chunk: i64,
) -> Result<TokenScores, ModelError> {
    let [logprobs, entropy] = scores_at(head, hidden, ids, scored, chunk, |logprobs, targets| {
        [chosen(logprobs, targets), entropy_of(logprobs)]
    })?;
    Ok(TokenScores { logprobs, entropy })
}

/// The log-probability of each row's target: `logprobs` (n, vocab), `targets` (n,) → (n,).
fn chosen(logprobs: &Tensor, targets: &Tensor) -> Tensor {
    logprobs.gather(1, &targets.unsqueeze(1), false).squeeze_dim(1)
}

/// The entropy `-sum_v p_v log p_v` of each row of `logprobs` (n, vocab) → (n,).
fn entropy_of(logprobs: &Tensor) -> Tensor {
    -(logprobs.exp() * logprobs).sum_dim_intlist(-1, false, Kind::Float)
}

/// The chunk loop shared by [`logprobs_at`] and [`logprobs_and_entropy_at`]: scores the tokens
/// where `scored` (B, L) is true, each predicted by the position before it ([`scores_of_pairs`]), and
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
            "scored mask has shape {:?}, ids {:?}",
            scored.size(),
            ids.size()
        )));
    }
    let (rows, len) = (size[0], size[1]);
    let scored = scored.to_device(ids.device()).to_kind(Kind::Bool);
    if scored.narrow(1, 0, 1).any().int64_value(&[]) != 0 {
        return Err(ModelError::Input(
            "the first token of a row has no prediction to score".into(),
        ));
    }
    // Token (b, i) is predicted by hidden (b, i - 1).
    let targets_at = scored.view([-1]).nonzero().squeeze_dim(1);
    let predictors_at = &targets_at - 1;
    let values = scores_of_pairs(head, hidden, ids, &targets_at, &predictors_at, chunk, per_chunk)?;
    Ok(values.map(|values| {
        Tensor::zeros([rows * len], (Kind::Float, ids.device()))
            .index_put(&[Some(&targets_at)], &values, false)
            .view([rows, len])
    }))
}

/// Projects the hidden states at `predictors_at` (flat, row-major indices into `hidden`'s (B, L))
/// through the output head `head` to f32 vocabulary log-probabilities, `chunk` rows at a time, and hands each chunk with the ids at
/// `targets_at` to `per_chunk`; returns its `N` per-token results in the pairs' order. Branched rows
/// (`branches.rs` of a family) score this way: a branch's first token is predicted by the prompt's last.
fn scores_of_pairs<const N: usize>(
    head: &Tensor,
    hidden: &Tensor,
    ids: &Tensor,
    targets_at: &Tensor,
    predictors_at: &Tensor,
    chunk: i64,
    per_chunk: impl Fn(&Tensor, &Tensor) -> [Tensor; N],
) -> Result<[Tensor; N], ModelError> {
    let (rows, len) = (ids.size()[0], ids.size()[1]);
    let h = hidden.view([rows * len, -1]).index_select(0, predictors_at);
    let targets = ids.view([-1]).index_select(0, targets_at);
    let chunk = chunk.max(1);
    let mut parts: [Vec<Tensor>; N] = std::array::from_fn(|_| Vec::new());
    let n = targets.size()[0];
    let mut start = 0;
    while start < n {
        let size = chunk.min(n - start);
        let logits = h
            .narrow(0, start, size)
            .linear(head, None::<Tensor>)
            .to_kind(Kind::Float);
        let logprobs = logits.log_softmax(-1, Kind::Float);
        let results = per_chunk(&logprobs, &targets.narrow(0, start, size));
        for (part, result) in parts.iter_mut().zip(results) {
            part.push(result);
        }
        start += size;
    }
    Ok(parts.map(|part| match part.is_empty() {
        true => Tensor::zeros([0], (Kind::Float, ids.device())),
        false => Tensor::cat(&part, 0),
    }))
}

/// The log-probability and the entropy at each of the pairs' tokens, flat: [`scores_of_pairs`]
/// with what [`logprobs_and_entropy_at`] computes.
pub fn logprobs_and_entropy_of_pairs(
    head: &Tensor,
    hidden: &Tensor,
    ids: &Tensor,
    targets_at: &Tensor,
    predictors_at: &Tensor,
    chunk: i64,
) -> Result<TokenScores, ModelError> {
    let [logprobs, entropy] = scores_of_pairs(
        head,
        hidden,
        ids,
        targets_at,
        predictors_at,
        chunk,
        |logprobs, targets| [chosen(logprobs, targets), entropy_of(logprobs)],
    )?;
    Ok(TokenScores { logprobs, entropy })
}
