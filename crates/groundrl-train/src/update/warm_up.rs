//! The supervised warm-up's step: one optimizer step of token-mean cross-entropy on reference answers.
//!
//! The rows are the same prompt + response rows the policy update trains on ([`Row`]), with the
//! reference answer as the response; the loss is minus the mean log-probability of every answer
//! token of the batch (each token weighs the same, as in ordinary language-model fine-tuning). A
//! reference trajectory of a tool-using model (a zoom call, the tool's reply, then the answer) is a
//! row whose `generated` flags mark the tool turn: the model is taught to write the call and the
//! answer, and reads the reply as context without being trained to produce it.

use groundrl_tensor::model::{ImageFeatures, Model, Recompute};
use groundrl_tensor::model_error::ModelError;
use groundrl_tensor::processor::Processor;
use groundrl_tensor::scores;
use tch::Kind;

use super::UpdateError;
use super::batch::{Row, micro_batch};
use super::step::{accumulate, apply_step, summed};
use crate::data_parallel::{DataParallel, counts_over_ranks};
use crate::optim::{AdamW, StepOutcome};

/// How a warm-up step runs.
pub struct SftSettings {
    pub micro_batch_size: usize,
    /// The blocks the backward recomputes (`model.gradient_checkpointing`).
    pub recompute: Recompute,
    pub logprob_chunk: i64,
    pub lr: f64,
}

/// What one warm-up step did; in a data-parallel run, over every rank's rows.
#[derive(Debug, PartialEq)]
pub struct SftReport {
    /// Mean negative log-likelihood per answer token, before the update.
    pub loss: f64,
    pub grad_norm: f64,
    /// False when the optimizer skipped the step (non-finite gradients).
    pub applied: bool,
    /// Tokens run through the model (prompts, answers and tool turns, padding excluded).
    pub tokens: u64,
    /// Tokens learned from: the reference's own tokens, tool turns excluded.
    pub answer_tokens: u64,
}

/// One optimizer step on `rows` (micro-batches with exact gradient accumulation), alone (`dp`
/// `None`) or as one rank of a data-parallel run, `rows` being its share of the batch.
///
/// Each rank divides its loss by the answer tokens of the whole batch (summed over the ranks), so
/// that its loss is its exact share of the one-process loss and the summed gradient is the
/// one-process gradient ([`apply_step`] sums it). A rank without rows, or without answer tokens,
/// still joins every collective; only a batch without answer tokens on every rank is an error.
pub fn sft_step(
    model: &dyn Model,
    processor: &Processor,
    optimizer: &mut AdamW,
    rows: &[Row],
    s: &SftSettings,
    mut dp: Option<&mut DataParallel>,
) -> Result<SftReport, UpdateError> {
    let device = model.device();
    let batches: Vec<_> = rows
        .chunks(s.micro_batch_size.max(1))
        .map(|chunk| micro_batch(processor, chunk, device, true))
        .collect::<Result<_, _>>()?;
    let local: u64 = batches.iter().map(|mb| mb.counted()).sum();
    let [answer_tokens] = counts_over_ranks(dp.as_deref_mut(), [local])?;
    if answer_tokens == 0 {
        return Err(ModelError::Input("warm-up batch without answer tokens".into()).into());
    }
    let parameters = optimizer.parameters();
    let mut parts = Vec::with_capacity(batches.len());
    let mut tokens = 0;
    for (b, mb) in batches.iter().enumerate() {
        let forward = model.training_forward(&mb.batch, ImageFeatures::Tower, s.recompute)?;
        let scored = mb.mask.gt(0.0);
        let logprobs = scores::logprobs_at(
            forward.head(),
            forward.hidden(),
            forward.ids(),
            &scored,
            s.logprob_chunk,
        )?;
        let part = -(logprobs.to_kind(Kind::Float) * &mb.mask).sum(Kind::Float) / answer_tokens as f64;
        parts.push(part.detach());
        accumulate(
            forward,
            &part,
            dp.as_deref_mut(),
            &parameters,
            b + 1 == batches.len(),
        )?;
        tokens += mb.tokens();
    }
    let mut loss = summed(&parts).map_err(ModelError::from)?;
    let outcome = apply_step(optimizer, dp.as_deref_mut(), &parameters, s.lr)?;
    let (grad_norm, applied) = match outcome {
        StepOutcome::Applied { grad_norm, .. } => (grad_norm, true),
        StepOutcome::Skipped { grad_norm } => (grad_norm, false),
    };
    if let Some(dp) = dp.as_deref_mut()
        && let [total] = dp.sum_f64(&[loss])?[..]
    {
        loss = total;
    }
    let [tokens] = counts_over_ranks(dp, [tokens])?;
    Ok(SftReport {
        loss,
        grad_norm,
        applied,
        tokens,
        answer_tokens,
    })
}

#[cfg(test)]
mod tests {
    use tch::{Device, Tensor};

    use super::*;
    use crate::optim::OptimConfig;
    use crate::update::fixtures::{tiny, zoom_trajectory};

    #[test]
    fn a_tool_turn_is_left_out_of_the_cross_entropy() {
        let (model, p) = tiny();
        let t = zoom_trajectory(&p);
        // Reference: minus the mean log-probability, from the full logits, of the tokens the model
        // wrote (the call and the answer), each predicted from the position before it.
        let sequence: Vec<i64> = t
            .prompt
            .input_ids
            .iter()
            .chain(&t.response.input_ids)
            .copied()
            .collect();
        let batch = micro_batch(&p, &[t.row(0.0)], Device::Cpu, true).unwrap().batch;
        assert_eq!(batch.input_ids[..], [&sequence[..]]);
        let logprobs = tch::no_grad(|| model.logits(&batch))
            .unwrap()
            .log_softmax(-1, Kind::Float);
        let start = t.prompt.input_ids.len();
        let learned: Vec<usize> = (0..t.generated.len())
            .filter(|&i| t.generated[i])
            .map(|i| start + i)
            .collect();
        let sum: f64 = learned
            .iter()
            .map(|&i| logprobs.double_value(&[0, i as i64 - 1, sequence[i]]))
            .sum();
        let want = -sum / learned.len() as f64;

        let params: Vec<(String, Tensor)> = model.var_store().variables().into_iter().collect();
        let mut optimizer = AdamW::new(params, &OptimConfig::default()).unwrap();
        let settings = SftSettings {
            micro_batch_size: 1,
            recompute: Recompute::Off,
            logprob_chunk: 16,
            lr: 1e-6,
        };
        let report = sft_step(&model, &p, &mut optimizer, &[t.row(0.0)], &settings, None).unwrap();
        assert_eq!(report.answer_tokens, learned.len() as u64);
        assert_eq!(report.tokens, sequence.len() as u64);
        assert!(
            (report.loss - want).abs() < 1e-5,
            "loss {} vs {want} over the model's tokens",
            report.loss
        );
        // Had the tool turn counted, the loss would be the mean over every response token.
        let all: f64 = (start..sequence.len())
            .map(|i| logprobs.double_value(&[0, i as i64 - 1, sequence[i]]))
            .sum();
        let leaked = -all / (sequence.len() - start) as f64;
        assert!((report.loss - leaked).abs() > 1e-3, "{} vs {leaked}", report.loss);
    }
}
