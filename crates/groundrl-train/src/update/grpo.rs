//! The GRPO update of one step: PPO epochs over mini-batches, micro-batches with gradient
//! accumulation, the clipped policy loss of `crate::loss` on each, one optimizer step per mini-batch
//! (`step.rs`); and the rows' KL penalties when `loss.kl_in_reward` puts the KL in the reward. A
//! tool-using completion's tool turns stay in its row as context but are masked out of the loss (see
//! [`Row::generated`]).

use groundrl_tensor::model::{ImageFeatures, Model, Recompute, TokenScores};
use groundrl_tensor::model_error::ModelError;
use groundrl_tensor::processor::Processor;
use groundrl_tensor::scores;
use tch::{Kind, Tensor};

use super::UpdateError;
use super::batch::{FrozenFeatures, MicroBatch, Row, training_batch};
use super::step::{accumulate, apply_step, summed};
use crate::data_parallel::{DataParallel, DataParallelError, counts_over_ranks};
use crate::loss::{LossConfig, LossInputs, LossScale, LossStats, kl_reward_penalty, policy_loss};
use crate::optim::{AdamW, StepOutcome};

/// How the update runs.
pub struct UpdateSettings<'a> {
    pub loss: &'a LossConfig,
    pub ppo_epochs: u32,
    pub mini_batch_size: usize,
    pub micro_batch_size: usize,
    /// The blocks the backward recomputes (`model.gradient_checkpointing`).
    pub recompute: Recompute,
    pub logprob_chunk: i64,
    /// The sampling temperature: log-probs are those of `softmax(logits / T)`, the distribution
    /// the completions were drawn from.
    pub temperature: f64,
    /// The response length budget (`rollout.max_new_tokens`), for Dr.GRPO's normaliser.
    pub response_budget: i64,
    pub lr: f64,
    /// Run a prompt's completions as branches of one forward of the prompt where they allow it
    /// (`shared_prefix.rs`).
    pub shared_prefix: bool,
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
    /// Whether a micro-batch ran its completions as branches of their shared prompt.
    pub shared_prefix: bool,
    /// The model FLOPs of every pass of the update ([`ModelFlops`]).
    pub model_flops: f64,
}

/// The model FLOPs of an update's passes, as model FLOPs utilisation counts them
/// ([`Model::text_forward_flops`], [`Model::images_forward_flops`]): the decoder's forward on each micro-batch's sequences,
/// 3 times for a pass with a backward and once for one without; the vision tower's forward where it
/// runs: once per image for the whole update when its features are computed up front
/// ([`FrozenFeatures`]), else in every pass, 3 times when the tower is trained and the pass has a
/// backward. A backward counts twice its forward even where only adapters (LoRA) take gradients;
/// recomputation (gradient checkpointing) is not counted.
#[derive(Debug, Default)]
struct ModelFlops(f64);

impl ModelFlops {
    /// The tower's forward on the images whose features `frozen` computed.
    fn features(&mut self, model: &dyn Model, frozen: &FrozenFeatures) -> Result<(), ModelError> {
        self.0 += model.images_forward_flops(&frozen.grids)?;
        Ok(())
    }

    /// A forward of `mb` under `model` with its image features from `source`, and its backward
    /// when `backward`.
    fn pass(
        &mut self,
        model: &dyn Model,
        mb: &MicroBatch,
        source: ImageFeatures,
        backward: bool,
    ) -> Result<(), ModelError> {
        let text: f64 = mb.sequences.iter().map(|s| model.text_forward_flops(s)).sum();
        let tower = match source {
            ImageFeatures::Tower => model.images_forward_flops(&mb.batch.image_grids)?,
            ImageFeatures::Given(_) => 0.0,
        };
        let times = |trained: bool| if backward && trained { 3.0 } else { 1.0 };
        self.0 += times(true) * text + times(model.vision_trainable()) * tower;
        Ok(())
    }
}

/// Runs the update over `rows` (old log-probs from the policy as it is now: a first pass without
/// gradients when there is more than one optimizer step, else the same forward, detached), alone
/// (`dp` `None`) or as one rank of a data-parallel run.
///
/// As a rank, `rows` are this rank's and `s.mini_batch_size` is its share of a mini-batch: the
/// global mini-batch `m` is every rank's `m`-th. Each mini-batch's [`LossScale`] totals are summed
/// over the ranks, so that each rank's loss is its exact share of the global one, and the gradients
/// are summed over the ranks, in buckets, before the optimizer step (whose clipping then sees the
/// global gradient): after the mini-batch's last backward pass, or, with
/// `distributed.overlap_backward`, each bucket as soon as that pass has finished its gradients (the
/// earlier passes only accumulate). Under ZeRO stage 1 (a sharded optimizer) each rank updates the
/// parameters whose state it keeps and broadcasts them. Every rank runs the same number of optimizer
/// steps, the most any rank's rows make; a rank with fewer rows joins the rest with no rows of its own.
#[allow(clippy::too_many_arguments)]
pub fn update(
    model: &dyn Model,
    reference: Option<&dyn Model>,
    processor: &Processor,
    optimizer: &mut AdamW,
    rows: &[Row],
    s: &UpdateSettings,
    mut dp: Option<&mut DataParallel>,
) -> Result<UpdateReport, UpdateError> {
    let device = model.device();
    let mut flops = ModelFlops::default();
    let frozen = FrozenFeatures::new(model, rows)?;
    flops.features(model, &frozen)?;
    let frozen_reference = reference
        .map(|r| FrozenFeatures::for_reference(&frozen, r, rows))
        .transpose()?;
    if let (Some(r), Some(f)) = (reference, &frozen_reference) {
        flops.features(r, f)?;
    }
    let minis: Vec<&[Row]> = rows.chunks(s.mini_batch_size.max(1)).collect();
    let micro = |mini: &[Row]| -> Result<Vec<MicroBatch>, ModelError> {
        mini.chunks(s.micro_batch_size.max(1))
            .map(|rows| {
                let mut mb = training_batch(processor, rows, device, s.shared_prefix, frozen.is_empty())?;
                mb.features = frozen.of(&mb.sources);
                mb.reference_features = frozen_reference.as_ref().and_then(|f| f.of(&mb.sources));
                Ok(mb)
            })
            .collect()
    };
    let mut batches: Vec<Vec<MicroBatch>> = minis.iter().map(|m| micro(m)).collect::<Result<_, _>>()?;
    let mini_batches = match dp.as_deref_mut() {
        Some(dp) => most_over_ranks(dp, batches.len())?,
        None => batches.len(),
    };
    batches.resize_with(mini_batches, Vec::new);
    let parameters = optimizer.parameters();
    let separate_old = s.ppo_epochs > 1 || batches.len() > 1;
    let old: Vec<Vec<Option<Tensor>>> = batches
        .iter()
        .map(|mbs| {
            mbs.iter()
                .map(|mb| {
                    separate_old
                        .then(|| scores_without_grad(model, mb, mb.policy_features(), s, &mut flops))
                        .transpose()
                })
                .collect::<Result<_, _>>()
        })
        .collect::<Result<_, _>>()?;
    let reference: Vec<Vec<Option<Tensor>>> = batches
        .iter()
        .map(|mbs| {
            mbs.iter()
                .map(|mb| {
                    reference
                        .map(|r| scores_without_grad(r, mb, mb.reference_features(), s, &mut flops))
                        .transpose()
                })
                .collect::<Result<_, _>>()
        })
        .collect::<Result<_, _>>()?;
    let mut report = UpdateReport::default();
    let mut minis_done = 0u32;
    for _ in 0..s.ppo_epochs {
        for (m, mbs) in batches.iter().enumerate() {
            let loss_error = |e: crate::loss::LossError| ModelError::Input(e.to_string());
            let (tokens, sequences) = mbs
                .iter()
                .fold((0, 0), |(t, q), mb| (t + mb.totals.0, q + mb.totals.1));
            // Counts of mask entries, never negative.
            let [tokens, sequences] =
                counts_over_ranks(dp.as_deref_mut(), [tokens as u64, sequences as u64])?.map(|c| c as i64);
            if tokens == 0 {
                // Every completion masked out (overlong filtering): nothing to learn from here.
                continue;
            }
            let scale =
                LossScale::of_totals(tokens, sequences, s.loss, s.response_budget).map_err(loss_error)?;
            // The micro-batches' losses and statistics stay on the device until every pass of the
            // mini-batch is queued: reading one would idle the device between a forward and its
            // backward.
            let (mut losses, mut pending) = (Vec::new(), Vec::new());
            for (b, mb) in mbs.iter().enumerate() {
                let forward = model.training_forward(&mb.batch, mb.policy_features(), s.recompute)?;
                flops.pass(model, mb, mb.policy_features(), true)?;
                let scores = token_scores(forward.head(), forward.hidden(), forward.ids(), mb, s)?;
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
                losses.push(out.loss.detach());
                accumulate(
                    forward,
                    &out.loss,
                    dp.as_deref_mut(),
                    &parameters,
                    b + 1 == mbs.len(),
                )?;
                pending.push(out.stats);
                report.tokens += mb.tokens();
                report.shared_prefix |= mb.branched.is_some();
            }
            report.loss += summed(&losses).map_err(ModelError::from)?;
            report
                .stats
                .merge(&LossStats::read(&pending).map_err(ModelError::from)?);
            match apply_step(optimizer, dp.as_deref_mut(), &parameters, s.lr)? {
                StepOutcome::Applied { grad_norm, .. } => {
                    report.grad_norm += grad_norm;
                    report.optimizer_steps += 1;
                }
                StepOutcome::Skipped { grad_norm } => {
                    report.grad_norm += grad_norm;
                    report.skipped_steps += 1;
                }
            }
            minis_done += 1;
        }
    }
    report.model_flops = flops.0;
    if minis_done > 0 {
        let n = f64::from(minis_done);
        report.loss /= n;
        report.grad_norm /= n;
        report.stats = report.stats.scaled(1.0 / n);
    }
    Ok(report)
}

/// The largest `count` of any rank.
fn most_over_ranks(dp: &mut DataParallel, count: usize) -> Result<usize, DataParallelError> {
    let all = dp.gather("mini-batch count", &count)?;
    Ok(all.into_iter().max().unwrap_or(count))
}

/// The rows' KL penalties for `loss.kl_in_reward`.
#[derive(Debug)]
pub struct KlPenalties {
    /// Each row's penalty.
    pub per_row: Vec<f64>,
    /// The model FLOPs of the passes that computed them ([`ModelFlops`]).
    pub model_flops: f64,
}

/// Each row's KL penalty for `loss.kl_in_reward` (see [`crate::loss::kl_reward_penalty`]): the
/// policy's and the reference's log-probs of its completion, without gradients, before any update.
pub fn kl_penalties(
    model: &dyn Model,
    reference: &dyn Model,
    processor: &Processor,
    rows: &[Row],
    s: &UpdateSettings,
) -> Result<KlPenalties, ModelError> {
    let mut flops = ModelFlops::default();
    let frozen = FrozenFeatures::new(model, rows)?;
    let frozen_reference = FrozenFeatures::for_reference(&frozen, reference, rows)?;
    flops.features(model, &frozen)?;
    flops.features(reference, &frozen_reference)?;
    let mut penalties = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(s.micro_batch_size.max(1)) {
        let mut mb = training_batch(
            processor,
            chunk,
            model.device(),
            s.shared_prefix,
            frozen.is_empty(),
        )?;
        mb.features = frozen.of(&mb.sources);
        mb.reference_features = frozen_reference.of(&mb.sources);
        let policy = scores_without_grad(model, &mb, mb.policy_features(), s, &mut flops)?;
        let reference = scores_without_grad(reference, &mb, mb.reference_features(), s, &mut flops)?;
        let penalty = kl_reward_penalty(s.loss, &policy, &reference, &mb.mask)
            .map_err(|e| ModelError::Input(e.to_string()))?;
        penalties.extend(penalty);
    }
    Ok(KlPenalties {
        per_row: penalties,
        model_flops: flops.0,
    })
}

/// Log-probs and entropies of the micro-batch's masked tokens (the model's) at the sampling
/// temperature, projected by the output head `head`; 0 elsewhere, with no graph to them.
pub(super) fn token_scores(
    head: &Tensor,
    hidden: &Tensor,
    ids: &Tensor,
    mb: &MicroBatch,
    s: &UpdateSettings,
) -> Result<TokenScores, ModelError> {
    // logits / T = (hidden / T) · W: the output projection has no bias.
    let hidden = if s.temperature > 0.0 && s.temperature != 1.0 {
        hidden / s.temperature
    } else {
        hidden.shallow_clone()
    };
    let Some(b) = &mb.branched else {
        let scored = mb.mask.gt(0.0);
        return scores::logprobs_and_entropy_at(head, &hidden, ids, &scored, s.logprob_chunk);
    };
    let (targets, predictors) = (&b.targets_at, &b.predictors_at);
    let flat =
        scores::logprobs_and_entropy_of_pairs(head, &hidden, ids, targets, predictors, s.logprob_chunk)?;
    let shape = mb.mask.size();
    let place = |values: &Tensor| {
        Tensor::zeros([shape[0] * shape[1]], (Kind::Float, values.device()))
            .index_put(&[Some(&b.slots)], values, false)
            .view([shape[0], shape[1]])
    };
    Ok(TokenScores {
        logprobs: place(&flat.logprobs),
        entropy: place(&flat.entropy),
    })
}

/// The completion tokens' log-probs under `model` without a graph, its image features from `source`;
/// the pass's FLOPs go to `flops`.
fn scores_without_grad(
    model: &dyn Model,
    mb: &MicroBatch,
    source: ImageFeatures,
    s: &UpdateSettings,
    flops: &mut ModelFlops,
) -> Result<Tensor, ModelError> {
    flops.pass(model, mb, source, false)?;
    tch::no_grad(|| {
        let hidden = model.hidden_states_from(&mb.batch, source)?;
        let ids = Tensor::from_slice2(&mb.batch.input_ids).to_device(model.device());
        Ok(token_scores(model.output_weight(), &hidden, &ids, mb, s)?
            .logprobs
            .to_kind(Kind::Float))
    })
}

#[cfg(test)]
mod tests {
    use groundrl_tensor::model::{BranchRow, ForwardFlops, Sequence};
    use groundrl_tensor::processor::Encoded;
    use tch::Device;

    use super::*;
    use crate::loss::Aggregation;
    use crate::optim::OptimConfig;
    use crate::update::batch::{micro_batch, text_response};
    use crate::update::fixtures::{PROMPT, floats, ids, tiny, with_image, zoom_trajectory};

    #[test]
    fn tool_turn_tokens_get_no_gradient_from_the_policy_loss() {
        let (model, p) = tiny();
        let t = zoom_trajectory(&p);
        let rows = [t.row(1.0)];
        let mb = micro_batch(&p, &rows, Device::Cpu, true).unwrap();
        let hidden = tch::no_grad(|| model.hidden_states(&mb.batch))
            .unwrap()
            .set_requires_grad(true);
        let ids = Tensor::from_slice2(&mb.batch.input_ids);
        let generated = t.generated.iter().filter(|&&g| g).count();
        for aggregation in [Aggregation::TokenMean, Aggregation::SeqMeanTokenSum] {
            let cfg = LossConfig {
                aggregation,
                ..LossConfig::default()
            };
            let s = UpdateSettings {
                loss: &cfg,
                ppo_epochs: 1,
                mini_batch_size: 1,
                micro_batch_size: 1,
                recompute: Recompute::Off,
                logprob_chunk: 16,
                temperature: 1.0,
                response_budget: 256,
                lr: 1e-6,
                shared_prefix: false,
            };
            let scores = token_scores(model.output_weight(), &hidden, &ids, &mb, &s).unwrap();
            let scale = LossScale::of_mini_batch([&mb.mask], &cfg, s.response_budget).unwrap();
            // The token-mean divisor counts the model's tokens only.
            assert_eq!(scale.tokens, generated as i64);
            let inputs = LossInputs {
                old_logprobs: scores.logprobs.detach(),
                logprobs: scores.logprobs,
                ref_logprobs: None,
                advantages: mb.advantages.shallow_clone(),
                mask: mb.mask.shallow_clone(),
                entropy: None,
            };
            let loss = policy_loss(&inputs, &cfg, &scale).unwrap().loss;
            // On-policy with A = 1 each counted token adds -1: the token sum is -(the model's tokens).
            if aggregation == Aggregation::SeqMeanTokenSum {
                assert!((loss.double_value(&[]) + generated as f64).abs() < 1e-4);
            }
            let grad = &Tensor::run_backward(&[&loss], &[&hidden], false, false)[0];
            // The hidden state at position i predicts token i + 1: it gets a gradient exactly when
            // the model generated that token, so no tool token's log-prob contributes.
            let start = t.prompt.input_ids.len();
            let per_position = floats(&grad.get(0).abs().sum_dim_intlist(1, false, Kind::Float));
            assert_eq!(per_position.len(), start + t.generated.len());
            for (i, &g) in per_position.iter().enumerate() {
                let learned = (i + 1 >= start) && t.generated.get(i + 1 - start).copied().unwrap_or(false);
                assert_eq!(g > 0.0, learned, "{aggregation:?}: position {i}, gradient {g}");
            }
        }
    }

    /// An update of three rows, two sharing a prompt (images of 4 x 4 and 4 x 8 patches), in one
    /// mini-batch and micro-batch over two PPO epochs, counts the FLOPs of each of its passes: two
    /// forwards with a backward (3 forwards each) and the old log-probs' forward, plus the reference
    /// model's forward when there is one. A trained tower runs in each pass on the micro-batch's
    /// images (one per row, or one per prompt with branches); a frozen one once per image set for
    /// the update, for each model.
    #[test]
    fn the_updates_model_flops_add_up_by_hand() {
        let (model, p) = tiny();
        let (reference, _) = tiny();
        let a = with_image(&p, PROMPT, [1, 4, 4], 0.0);
        let b = with_image(&p, PROMPT, [1, 4, 8], 1.0);
        let responses: Vec<Encoded> = ["(1, 2)<|im_end|>", "(10, 20)<|im_end|>", "(3<|im_end|>"]
            .iter()
            .map(|t| text_response(ids(&p, t)))
            .collect();
        let rows: Vec<Row> = [&a, &b, &b]
            .into_iter()
            .zip(&responses)
            .map(|(prompt, response)| Row {
                prompt,
                response,
                generated: &[],
                advantage: 1.0,
                counts: true,
                prompt_features: None,
            })
            .collect();
        let cfg = LossConfig::default();
        let settings = |shared_prefix| UpdateSettings {
            loss: &cfg,
            ppo_epochs: 2,
            mini_batch_size: 3,
            micro_batch_size: 3,
            recompute: Recompute::Off,
            logprob_chunk: 16,
            temperature: 1.0,
            response_budget: 32,
            lr: 1e-6,
            shared_prefix,
        };
        let run = |shared_prefix, reference| {
            let trained = model
                .var_store()
                .variables()
                .into_iter()
                .filter(|(_, t)| t.requires_grad())
                .collect();
            let mut optimizer = AdamW::new(trained, &OptimConfig::default()).unwrap();
            let s = settings(shared_prefix);
            let report = update(&model, reference, &p, &mut optimizer, &rows, &s, None).unwrap();
            report.model_flops
        };
        let text = |prefix, branches: &[usize]| {
            let scored = branches.iter().sum();
            let layout = BranchRow {
                prefix,
                branches: branches.to_vec(),
            };
            model.text_forward_flops(&Sequence { layout, scored })
        };
        let c: Vec<usize> = responses.iter().map(|r| r.input_ids.len()).collect();
        let (pa, pb) = (a.input_ids.len(), b.input_ids.len());
        let plain = text(pa, &[c[0]]) + text(pb, &[c[1]]) + text(pb, &[c[2]]);
        let branched = text(pa, &[c[0]]) + text(pb, &[c[1], c[2]]);
        let tower = |grid| model.images_forward_flops(&[grid]).unwrap();
        let (va, vb) = (tower([1, 4, 4]), tower([1, 4, 8]));
        assert!(branched < plain && vb > va && va > 0.0);
        // Trained tower: 2 x 3 + 1 forwards of the decoder and of the tower on each image it runs on.
        assert_eq!(run(false, None), 7.0 * plain + 7.0 * (va + 2.0 * vb));
        assert_eq!(run(true, None), 7.0 * branched + 7.0 * (va + vb));
        // Frozen tower, with a reference: the decoder once more; each model's tower once per image.
        model.set_vision_trainable(false);
        let reference: &dyn Model = &reference;
        assert_eq!(run(false, Some(reference)), 8.0 * plain + 2.0 * (va + vb));
        assert_eq!(run(true, Some(reference)), 8.0 * branched + 2.0 * (va + vb));
        // The KL-in-reward penalties: one forward of each model.
        let kl = kl_penalties(&model, reference, &p, &rows, &settings(true)).unwrap();
        assert_eq!(kl.model_flops, 2.0 * branched + 2.0 * (va + vb));
    }
}
