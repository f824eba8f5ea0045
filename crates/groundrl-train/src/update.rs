//! The policy update of one step: completions as training rows, PPO epochs over mini-batches, micro-
//! batches with gradient accumulation, one optimizer step per mini-batch.

use groundrl_tensor::processor::{Encoded, Processor};
use groundrl_tensor::qwen2_5_vl::model::logprobs_and_entropy_at;
use groundrl_tensor::qwen2_5_vl::{Batch, ModelError, Qwen25Vl};
use tch::{Device, Kind, Tensor};

use crate::loss::{LossConfig, LossInputs, LossScale, LossStats, kl_reward_penalty, policy_loss};
use crate::optim::{AdamW, StepOutcome};

/// One completion to learn from.
pub struct Row<'a> {
    /// The prompt it was sampled for (its ids and pixels).
    pub prompt: &'a Encoded,
    pub tokens: &'a [i64],
    pub advantage: f64,
    /// False for a completion masked out of the loss (overlong filtering).
    pub counts: bool,
}

/// How the update runs.
pub struct UpdateSettings<'a> {
    pub loss: &'a LossConfig,
    pub ppo_epochs: u32,
    pub mini_batch_size: usize,
    pub micro_batch_size: usize,
    pub checkpoint: bool,
    pub logprob_chunk: i64,
    /// The sampling temperature: log-probs are those of `softmax(logits / T)`, the distribution
    /// the completions were drawn from.
    pub temperature: f64,
    /// The response length budget (`rollout.max_new_tokens`), for Dr.GRPO's normaliser.
    pub response_budget: i64,
    pub lr: f64,
}

/// What the update did. Statistics, loss and gradient norm are means over the optimizer steps (the
/// mini-batches of every PPO epoch).
#[derive(Debug, Default)]
pub struct UpdateReport {
    pub stats: LossStats,
    pub loss: f64,
    pub grad_norm: f64,
    pub optimizer_steps: u32,
    pub skipped_steps: u32,
    /// Tokens run through the model (prompt and completion, padding excluded), all passes.
    pub tokens: u64,
}

/// The training inputs of some rows on the model's device.
pub(crate) struct MicroBatch {
    pub batch: Batch,
    /// (B, L) f32: 1 at completion tokens that count.
    pub mask: Tensor,
    /// (B,) f32.
    pub advantages: Tensor,
    pub tokens: u64,
    /// Completion tokens that count in the loss.
    pub counted: u64,
}

/// Runs the update over `rows` (old log-probs from the policy as it is now: a first pass without
/// gradients when there is more than one optimizer step, else the same forward, detached).
pub fn update(
    model: &Qwen25Vl,
    reference: Option<&Qwen25Vl>,
    processor: &Processor,
    optimizer: &mut AdamW,
    rows: &[Row],
    s: &UpdateSettings,
) -> Result<UpdateReport, ModelError> {
    let device = model.device();
    let minis: Vec<&[Row]> = rows.chunks(s.mini_batch_size.max(1)).collect();
    let micro = |mini: &[Row]| -> Vec<MicroBatch> {
        mini.chunks(s.micro_batch_size.max(1))
            .map(|rows| micro_batch(processor, rows, device))
            .collect()
    };
    let batches: Vec<Vec<MicroBatch>> = minis.iter().map(|m| micro(m)).collect();
    let separate_old = s.ppo_epochs > 1 || batches.len() > 1;
    let old: Vec<Vec<Option<Tensor>>> = batches
        .iter()
        .map(|mbs| {
            mbs.iter()
                .map(|mb| {
                    separate_old
                        .then(|| scores_without_grad(model, mb, s))
                        .transpose()
                })
                .collect::<Result<_, _>>()
        })
        .collect::<Result<_, _>>()?;
    let reference: Vec<Vec<Option<Tensor>>> = batches
        .iter()
        .map(|mbs| {
            mbs.iter()
                .map(|mb| reference.map(|r| scores_without_grad(r, mb, s)).transpose())
                .collect::<Result<_, _>>()
        })
        .collect::<Result<_, _>>()?;
    let mut report = UpdateReport::default();
    let mut minis_done = 0u32;
    for _ in 0..s.ppo_epochs {
        for (m, mbs) in batches.iter().enumerate() {
            if mbs.iter().all(|mb| mb.counted == 0) {
                // Every completion masked out (overlong filtering): nothing to learn from here.
                continue;
            }
            let scale = LossScale::of_mini_batch(mbs.iter().map(|mb| &mb.mask), s.loss, s.response_budget)
                .map_err(|e| ModelError::Input(e.to_string()))?;
            let mut mini_loss = 0.0;
            for (b, mb) in mbs.iter().enumerate() {
                let forward = model.training_forward(&mb.batch, s.checkpoint)?;
                let scores = token_scores(model, &forward.hidden, &forward.prepared.ids, mb, s)?;
                let inputs = LossInputs {
                    old_logprobs: old[m][b]
                        .as_ref()
                        .map_or_else(|| scores.logprobs.detach(), |t| t.shallow_clone()),
                    logprobs: scores.logprobs,
                    ref_logprobs: reference[m][b].as_ref().map(Tensor::shallow_clone),
                    advantages: mb.advantages.shallow_clone(),
                    mask: mb.mask.shallow_clone(),
                    entropy: Some(scores.entropy),
                };
                let out =
                    policy_loss(&inputs, s.loss, &scale).map_err(|e| ModelError::Input(e.to_string()))?;
                mini_loss += out.loss.double_value(&[]);
                forward.backward(&out.loss)?;
                report.stats.merge(&out.stats);
                report.tokens += mb.tokens;
            }
            report.loss += mini_loss;
            match optimizer
                .step(s.lr)
                .map_err(|e| ModelError::Input(e.to_string()))?
            {
                StepOutcome::Applied { grad_norm, .. } => {
                    report.grad_norm += grad_norm;
                    report.optimizer_steps += 1;
                }
                StepOutcome::Skipped { grad_norm } => {
                    report.grad_norm += grad_norm;
                    report.skipped_steps += 1;
                }
            }
            optimizer.zero_grad();
            minis_done += 1;
        }
    }
    if minis_done > 0 {
        let n = f64::from(minis_done);
        report.loss /= n;
        report.grad_norm /= n;
        report.stats = report.stats.scaled(1.0 / n);
    }
    Ok(report)
}

/// Each row's KL penalty for `loss.kl_in_reward` (see [`crate::loss::kl_reward_penalty`]): the
/// policy's and the reference's log-probs of its completion, without gradients, before any update.
pub fn kl_penalties(
    model: &Qwen25Vl,
    reference: &Qwen25Vl,
    processor: &Processor,
    rows: &[Row],
    s: &UpdateSettings,
) -> Result<Vec<f64>, ModelError> {
    let mut penalties = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(s.micro_batch_size.max(1)) {
        let mb = micro_batch(processor, chunk, model.device());
        let policy = scores_without_grad(model, &mb, s)?;
        let reference = scores_without_grad(reference, &mb, s)?;
        let penalty = kl_reward_penalty(s.loss, &policy, &reference, &mb.mask)
            .map_err(|e| ModelError::Input(e.to_string()))?;
        penalties.extend(penalty);
    }
    Ok(penalties)
}

/// The rows as one left-padded batch of prompt + completion, with the completion mask.
pub(crate) fn micro_batch(processor: &Processor, rows: &[Row], device: Device) -> MicroBatch {
    let width = rows
        .iter()
        .map(|r| r.prompt.input_ids.len() + r.tokens.len())
        .max()
        .unwrap_or(0);
    let mut mask = vec![0f32; rows.len() * width];
    let mut tokens = 0;
    let mut counted = 0;
    let encoded = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let len = r.prompt.input_ids.len() + r.tokens.len();
            tokens += len as u64;
            if r.counts {
                // Left padding puts the completion at the end of the row.
                mask[i * width + width - r.tokens.len()..(i + 1) * width].fill(1.0);
                counted += r.tokens.len() as u64;
            }
            let mut row = r.prompt.share();
            row.input_ids.extend_from_slice(r.tokens);
            row
        })
        .collect();
    let advantages: Vec<f32> = rows.iter().map(|r| r.advantage as f32).collect();
    MicroBatch {
        batch: processor.batch(encoded),
        mask: Tensor::from_slice(&mask)
            .view([rows.len() as i64, width as i64])
            .to_device(device),
        advantages: Tensor::from_slice(&advantages).to_device(device),
        tokens,
        counted,
    }
}

/// Log-probs and entropies of the micro-batch's completion tokens at the sampling temperature.
fn token_scores(
    model: &Qwen25Vl,
    hidden: &Tensor,
    ids: &Tensor,
    mb: &MicroBatch,
    s: &UpdateSettings,
) -> Result<groundrl_tensor::qwen2_5_vl::model::TokenScores, ModelError> {
    // logits / T = (hidden / T) · W: the output projection has no bias.
    let hidden = if s.temperature > 0.0 && s.temperature != 1.0 {
        hidden / s.temperature
    } else {
        hidden.shallow_clone()
    };
    let scored = mb.mask.gt(0.0);
    logprobs_and_entropy_at(&model.text, &hidden, ids, &scored, s.logprob_chunk)
}

/// The completion tokens' log-probs under `model` without a graph.
fn scores_without_grad(model: &Qwen25Vl, mb: &MicroBatch, s: &UpdateSettings) -> Result<Tensor, ModelError> {
    tch::no_grad(|| {
        let hidden = model.hidden_states(&mb.batch)?;
        let ids = Tensor::from_slice2(&mb.batch.input_ids).to_device(model.device());
        Ok(token_scores(model, &hidden, &ids, mb, s)?
            .logprobs
            .to_kind(Kind::Float))
    })
}
