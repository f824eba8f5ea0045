//! Each group's prompt forwarded once in the update. A GRPO group's n completions share one prompt,
//! and in grounding that prompt is long (a screenshot's image tokens and the instruction) while a
//! completion is short. Instead of n rows of prompt + completion, the update runs one row per group:
//! the prompt, then every completion as a branch that attends to the prompt and to itself only
//! (`groundrl_tensor::model::scored_pairs` and the positions it pairs with). Each completion's log-probs are those of its own row up
//! to the order of floating-point sums, and so is the gradient: the prompt's part of it is the sum
//! over the branches, as it is over the n rows.
//!
//! It applies to consecutive rows of one prompt whose responses hold no image (a tool turn's zoomed
//! view would have to be placed between branches); other micro-batches take the row layout.

use std::ops::Range;

use groundrl_tensor::model::{Batch, BranchRow, Sequence, scored_pairs};
use groundrl_tensor::model_error::ModelError;
use groundrl_tensor::processor::{Encoded, Processor};
use groundrl_tensor::upload::upload;
use tch::{Device, Tensor};

use super::batch::{Branched, MicroBatch, Row, check_generated_flags};

/// The runs of consecutive rows that share one prompt (the same `Encoded`).
fn packs(rows: &[Row]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        match out.last_mut() {
            Some(last) if std::ptr::eq(rows[last.start].prompt, row.prompt) => last.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// Whether the rows gain from branches: some prompt has several consecutive rows, and no response
/// holds an image.
pub(crate) fn applies(rows: &[Row]) -> bool {
    rows.iter().all(|r| r.response.pixel_values.is_none()) && packs(rows).iter().any(|p| p.len() > 1)
}

/// The rows as one right-padded row per shared prompt, its completions as branches; `mask` (R, W)
/// has row r's response tokens at columns `0..len`, 1 where the model generated the token and the
/// row counts; the prompts' pixels when `with_pixels`. A row whose `generated` flags do not match its
/// response is refused, naming it.
pub(crate) fn micro_batch(
    processor: &Processor,
    rows: &[Row],
    device: Device,
    with_pixels: bool,
) -> Result<MicroBatch, ModelError> {
    let pad = i64::from(processor.tokenizer.special_ids().pad);
    let packs = packs(rows);
    let layout: Vec<BranchRow> = packs
        .iter()
        .map(|p| BranchRow {
            prefix: rows[p.start].prompt.input_ids.len(),
            branches: rows[p.clone()]
                .iter()
                .map(|r| r.response.input_ids.len())
                .collect(),
        })
        .collect();
    let len = layout.iter().map(BranchRow::len).max().unwrap_or(0);
    let width = rows.iter().map(|r| r.response.input_ids.len()).max().unwrap_or(0);
    check_generated_flags(rows)?;
    let learned = |pack: usize, branch: usize, t: usize| {
        let row = &rows[packs[pack].start + branch];
        row.counts && row.learns_from(t)
    };
    let mut mask = vec![0f32; rows.len() * width];
    let mut slots = Vec::new();
    let mut sequences = Vec::with_capacity(packs.len());
    for (b, pack) in packs.iter().enumerate() {
        let before = slots.len();
        for (branch, r) in pack.clone().enumerate() {
            for t in (0..rows[r].response.input_ids.len()).filter(|&t| learned(b, branch, t)) {
                mask[r * width + t] = 1.0;
                slots.push((r * width + t) as i64);
            }
        }
        sequences.push(Sequence {
            layout: layout[b].clone(),
            scored: slots.len() - before,
        });
    }
    let (targets_at, predictors_at) = scored_pairs(&layout, len, device, learned)?;
    let mut input_ids = Vec::with_capacity(packs.len());
    let mut pixels = Vec::new();
    let mut image_grids = Vec::new();
    for pack in &packs {
        let prompt = rows[pack.start].prompt;
        let mut ids = prompt.input_ids.clone();
        rows[pack.clone()]
            .iter()
            .for_each(|r| ids.extend(&r.response.input_ids));
        ids.resize(len, pad);
        input_ids.push(ids);
        if with_pixels {
            pixels.extend(prompt.pixel_values.as_ref().map(Tensor::shallow_clone));
        }
        image_grids.extend(prompt.image_grids.iter().copied());
    }
    let batch = Batch {
        input_ids,
        attention_mask: None,
        pixel_values: (!pixels.is_empty()).then(|| Tensor::cat(&pixels, 0)),
        image_grids,
        branches: Some(layout),
    };
    let sources = packs
        .iter()
        .map(|p| rows[p.start].prompt as *const Encoded)
        .collect();
    let branched = Branched {
        targets_at,
        predictors_at,
        slots: upload(&slots, device)?,
    };
    Ok(MicroBatch {
        branched: Some(branched),
        ..MicroBatch::new(batch, rows, &mask, width, sequences, sources, device)?
    })
}

#[cfg(test)]
mod tests {
    use tch::Kind;

    use super::*;
    use crate::loss::{Aggregation, LossConfig, LossInputs, LossScale, policy_loss};
    use crate::update::batch::{micro_batch, text_response};
    use crate::update::fixtures::{PROMPT, ids, tiny, with_image};
    use crate::update::grpo::{UpdateSettings, token_scores};
    use groundrl_tensor::model::Recompute;

    /// The loss of a micro-batch and the gradient of every parameter after its backward.
    fn loss_and_gradients(
        model: &dyn groundrl_tensor::model::Model,
        mb: &MicroBatch,
        cfg: &LossConfig,
    ) -> (f64, Tensor, Vec<(String, Tensor)>) {
        let s = UpdateSettings {
            loss: cfg,
            ppo_epochs: 1,
            mini_batch_size: 8,
            micro_batch_size: 8,
            recompute: Recompute::Off,
            logprob_chunk: 7,
            temperature: 1.3,
            response_budget: 16,
            lr: 1e-6,
            shared_prefix: true,
        };
        let mut vars: Vec<(String, Tensor)> = model.var_store().variables().into_iter().collect();
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, v) in &mut vars {
            v.zero_grad();
        }
        let hidden = model.hidden_states(&mb.batch).unwrap();
        let ids = Tensor::from_slice2(&mb.batch.input_ids);
        let scores = token_scores(model.output_weight(), &hidden, &ids, mb, &s).unwrap();
        let scale = LossScale::of_mini_batch([&mb.mask], cfg, s.response_budget).unwrap();
        // The host's counts that the update's loss scale takes are the device mask's.
        assert_eq!(mb.totals, (scale.tokens, scale.sequences));
        let inputs = LossInputs {
            old_logprobs: scores.logprobs.detach() - 0.01,
            logprobs: scores.logprobs.shallow_clone(),
            ref_logprobs: None,
            advantages: mb.advantages.shallow_clone(),
            mask: mb.mask.shallow_clone(),
            entropy: Some(scores.entropy),
        };
        let loss = policy_loss(&inputs, cfg, &scale).unwrap().loss;
        loss.backward();
        let grads = vars.iter().map(|(n, v)| (n.clone(), v.grad().copy())).collect();
        (loss.double_value(&[]), scores.logprobs.detach(), grads)
    }

    /// Two prompts (one with an image of 4 x 4 patches, one of 4 x 8) with 3 and 2 completions of
    /// different lengths, one of which does not count: the branched layout's log-probs, loss and
    /// gradients equal the row layout's within f32 summation order. The row layout left-pads each
    /// row (its response at the end), the branched one keeps each response from column 0.
    #[test]
    fn branches_give_the_rows_loss_and_gradients() {
        let (model, p) = tiny();
        let first = with_image(&p, PROMPT, [1, 4, 4], 0.0);
        let second = with_image(&p, PROMPT, [1, 4, 8], 3.0);
        let texts = [
            "(1, 2)<|im_end|>",
            "(10, 20)<|im_end|>",
            "(3<|im_end|>",
            "(40, 5)<|im_end|>",
            "(7, 7)",
        ];
        let responses: Vec<Encoded> = texts.iter().map(|t| text_response(ids(&p, t))).collect();
        let prompts = [&first, &first, &first, &second, &second];
        let advantages = [1.0, -0.5, 0.25, 0.8, -1.2];
        let rows: Vec<Row> = (0..5)
            .map(|i| Row {
                prompt: prompts[i],
                response: &responses[i],
                generated: &[],
                advantage: advantages[i],
                counts: i != 2,
                prompt_features: None,
            })
            .collect();
        assert!(applies(&rows));
        assert_eq!(packs(&rows), [0..3, 3..5]);
        let plain = micro_batch(&p, &rows, Device::Cpu, true).unwrap();
        let branched = super::micro_batch(&p, &rows, Device::Cpu, true).unwrap();
        assert_eq!(plain.counted(), branched.counted());
        let prompt_tokens = (first.input_ids.len() + second.input_ids.len()) as u64;
        let response_tokens: u64 = responses.iter().map(|r| r.input_ids.len() as u64).sum();
        assert_eq!(branched.tokens(), prompt_tokens + response_tokens);
        for aggregation in [Aggregation::TokenMean, Aggregation::SeqMeanTokenSum] {
            let cfg = LossConfig {
                aggregation,
                entropy_coef: 0.01,
                ..LossConfig::default()
            };
            let (loss_rows, lp_rows, grad_rows) = loss_and_gradients(&model, &plain, &cfg);
            let (loss_branches, lp_branches, grad_branches) = loss_and_gradients(&model, &branched, &cfg);
            // Each row's summed log-prob over its counted tokens (the layouts place tokens differently).
            let per_row =
                |lp: &Tensor| Vec::<f64>::try_from(lp.sum_dim_intlist(1, false, Kind::Double)).unwrap();
            for (a, b) in per_row(&lp_rows).iter().zip(per_row(&lp_branches)) {
                assert!((a - b).abs() < 1e-5, "{aggregation:?}: row log-probs {a} vs {b}");
            }
            assert!(
                (loss_rows - loss_branches).abs() < 1e-6,
                "{aggregation:?}: loss {loss_rows} vs {loss_branches}"
            );
            for ((name, a), (_, b)) in grad_rows.iter().zip(&grad_branches) {
                let scale = a.abs().max().double_value(&[]).max(1e-8);
                let diff = (a - b).abs().max().double_value(&[]);
                assert!(
                    diff <= 1e-4 * scale,
                    "{aggregation:?}: {name}: gradient differs by {diff} (max {scale})"
                );
            }
            assert!(
                grad_rows
                    .iter()
                    .any(|(_, g)| g.abs().max().double_value(&[]) > 0.0)
            );
        }
    }

    #[test]
    fn a_response_with_an_image_or_no_shared_prompt_keeps_the_rows() {
        let (_, p) = tiny();
        let first = with_image(&p, PROMPT, [1, 4, 4], 0.0);
        let second = with_image(&p, PROMPT, [1, 4, 4], 1.0);
        let answer = text_response(ids(&p, "(1, 2)<|im_end|>"));
        let row = |prompt| Row {
            prompt,
            response: &answer,
            generated: &[],
            advantage: 1.0,
            counts: true,
            prompt_features: None,
        };
        // Equal prompts that are different samples are not one group.
        assert!(!applies(&[row(&first), row(&second)]));
        assert!(applies(&[row(&first), row(&first)]));
        let zoom = with_image(&p, PROMPT, [1, 4, 4], 2.0);
        let with_zoom = Row {
            response: &zoom,
            ..row(&first)
        };
        assert!(!applies(&[row(&first), with_zoom]));
    }
}
