//! Supervised warm-up: one optimizer step of token-mean cross-entropy on reference answers.
//!
//! The rows are the same prompt + completion rows the policy update trains on ([`Row`]), with the
//! reference answer as the completion; the loss is minus the mean log-probability of every answer
//! token of the batch (each token weighs the same, as in ordinary language-model fine-tuning).

use groundrl_tensor::processor::Processor;
use groundrl_tensor::qwen2_5_vl::model::logprobs_at;
use groundrl_tensor::qwen2_5_vl::{ModelError, Qwen25Vl};
use tch::Kind;

use crate::optim::{AdamW, StepOutcome};
use crate::update::{Row, micro_batch};

/// How a warm-up step runs.
pub struct SftSettings {
    pub micro_batch_size: usize,
    pub checkpoint: bool,
    pub logprob_chunk: i64,
    pub lr: f64,
}

/// What one warm-up step did.
#[derive(Debug, PartialEq)]
pub struct SftReport {
    /// Mean negative log-likelihood per answer token, before the update.
    pub loss: f64,
    pub grad_norm: f64,
    /// False when the optimizer skipped the step (non-finite gradients).
    pub applied: bool,
    /// Tokens run through the model (prompts and answers, padding excluded).
    pub tokens: u64,
    pub answer_tokens: u64,
}

/// One optimizer step on `rows` (micro-batches with exact gradient accumulation).
pub fn sft_step(
    model: &Qwen25Vl,
    processor: &Processor,
    optimizer: &mut AdamW,
    rows: &[Row],
    s: &SftSettings,
) -> Result<SftReport, ModelError> {
    let device = model.device();
    let batches: Vec<_> = rows
        .chunks(s.micro_batch_size.max(1))
        .map(|chunk| micro_batch(processor, chunk, device))
        .collect();
    let answer_tokens: u64 = batches.iter().map(|mb| mb.counted).sum();
    if answer_tokens == 0 {
        return Err(ModelError::Input("warm-up batch without answer tokens".into()));
    }
    let mut loss = 0.0;
    let mut tokens = 0;
    for mb in &batches {
        let forward = model.training_forward(&mb.batch, s.checkpoint)?;
        let logprobs = logprobs_at(
            &model.text,
            &forward.hidden,
            &forward.prepared.ids,
            &mb.mask.gt(0.0),
            s.logprob_chunk,
        )?;
        let part = -(logprobs.to_kind(Kind::Float) * &mb.mask).sum(Kind::Float) / answer_tokens as f64;
        loss += part.double_value(&[]);
        forward.backward(&part)?;
        tokens += mb.tokens;
    }
    let outcome = optimizer
        .step(s.lr)
        .map_err(|e| ModelError::Input(e.to_string()))?;
    optimizer.zero_grad();
    let (grad_norm, applied) = match outcome {
        StepOutcome::Applied { grad_norm, .. } => (grad_norm, true),
        StepOutcome::Skipped { grad_norm } => (grad_norm, false),
    };
    Ok(SftReport {
        loss,
        grad_norm,
        applied,
        tokens,
        answer_tokens,
    })
}
