//! The policy update of one step: completions as training rows, PPO epochs over mini-batches, micro-
//! batches with gradient accumulation, one optimizer step per mini-batch. A tool-using completion's
//! tool turns stay in its row as context but are masked out of the loss (see [`Row::generated`]).

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use groundrl_tensor::model_error::ModelError;
use groundrl_tensor::processor::{Encoded, Processor};
use groundrl_tensor::qwen2_5_vl::flops::{Sequence, images_forward_flops, text_forward_flops};
use groundrl_tensor::qwen2_5_vl::model::{
    ImageFeatures, TokenScores, logprobs_and_entropy_at, logprobs_and_entropy_of_pairs,
};
use groundrl_tensor::qwen2_5_vl::rope_index::Grid;
use groundrl_tensor::qwen2_5_vl::training::TrainingForward;
use groundrl_tensor::qwen2_5_vl::{Batch, Qwen25Vl};
use tch::{Device, Kind, Tensor};

use crate::data_parallel::{DataParallel, DataParallelError, counts_over_ranks};
use crate::loss::{LossConfig, LossInputs, LossScale, LossStats, kl_reward_penalty, policy_loss};
use crate::optim::{AdamW, OptimError, StepOutcome};

/// One trajectory to learn from: a prompt and everything after it.
pub struct Row<'a> {
    /// The prompt it was sampled for (its ids and pixels).
    pub prompt: &'a Encoded,
    /// Every token after the prompt. For a tool-using trajectory that is the model's turns and the
    /// tool turns between them, and its pixels and grids are the tool turns' images, in order
    /// (they follow the prompt's in the sequence). A plain completion is [`text_response`].
    pub response: &'a Encoded,
    /// Per response token: true where the model produced it (learned from), false where a tool did
    /// (the tool turn's text and image tokens: context the policy conditions on but did not choose,
    /// so they are left out of the loss and of its token counts). Empty: every token is the model's.
    pub generated: &'a [bool],
    pub advantage: f64,
    /// False for a completion masked out of the loss (overlong filtering).
    pub counts: bool,
}

impl Row<'_> {
    /// Whether response token `i` is the model's.
    pub(crate) fn learns_from(&self, i: usize) -> bool {
        self.generated.get(i).copied().unwrap_or(true)
    }

    /// The prompt and the response as one sequence: ids, then pixels and grids of the prompt's images
    /// followed by the response's.
    fn sequence(&self) -> Encoded {
        let mut sequence = self.prompt.share();
        sequence.append(self.response);
        sequence
    }
}

/// The response of a completion without tool turns: its generated tokens, no image.
pub fn text_response(tokens: Vec<i64>) -> Encoded {
    Encoded {
        input_ids: tokens,
        pixel_values: None,
        image_grids: Vec::new(),
    }
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
    /// Run a prompt's completions as branches of one forward of the prompt where they allow it
    /// ([`crate::shared_prefix`]).
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

/// The training inputs of some rows on the model's device.
pub(crate) struct MicroBatch {
    pub batch: Batch,
    /// (B, L) f32: 1 at the model's response tokens of rows that count, 0 at prompts, tool turns and
    /// padding. The loss and its normalisers ([`LossScale`]) count only these tokens.
    pub mask: Tensor,
    /// (B,) f32.
    pub advantages: Tensor,
    /// The sequences the decoder runs, padding excluded: one per row (prompt, response and tool
    /// turns), or one per branched row (a prompt and its responses as branches), each with its
    /// tokens that count in the loss (the model's response tokens, of rows that count).
    pub sequences: Vec<Sequence>,
    /// The policy's image features of the batch's images, when its vision tower is frozen and they
    /// were computed once for the update ([`FrozenFeatures`]); `None`: the tower runs on the pixels.
    pub features: Option<Tensor>,
    /// The same from the reference model's tower, when there is one: computed the same way as the
    /// policy's, so that equal weights give equal log-probs to the last bit.
    pub reference_features: Option<Tensor>,
    /// Where the batch's images come from, in order: each row's prompt and response, or each
    /// branched row's prompt (keys of [`FrozenFeatures`]).
    pub sources: Vec<*const Encoded>,
    /// For branched rows ([`crate::shared_prefix`]): which tokens are scored and where their
    /// scores go in `mask`'s layout; `None` for plain rows, scored where `mask` is 1.
    pub branched: Option<Branched>,
}

/// The scored tokens of a branched micro-batch: flat (row-major) indices into the batch's (B, L) of
/// each scored token and of the token that predicts it, and the flat index into `mask`'s (R, W)
/// where its score goes.
pub(crate) struct Branched {
    pub targets_at: Tensor,
    pub predictors_at: Tensor,
    pub slots: Tensor,
}

impl MicroBatch {
    /// Tokens run through the model: prompts, responses and tool turns.
    pub fn tokens(&self) -> u64 {
        self.sequences.iter().map(|s| s.tokens() as u64).sum()
    }

    /// Response tokens that count in the loss (the model's, of rows that count).
    pub fn counted(&self) -> u64 {
        self.sequences.iter().map(|s| s.scored as u64).sum()
    }

    /// Where the policy's forwards of this batch take their image features from.
    pub(crate) fn policy_features(&self) -> ImageFeatures<'_> {
        given_or_tower(&self.features)
    }

    /// Where the reference model's forwards of this batch take their image features from.
    fn reference_features(&self) -> ImageFeatures<'_> {
        given_or_tower(&self.reference_features)
    }
}

fn given_or_tower(features: &Option<Tensor>) -> ImageFeatures<'_> {
    match features {
        Some(features) => ImageFeatures::Given(features),
        None => ImageFeatures::Tower,
    }
}

/// A frozen vision tower's features of each distinct image set among an update's rows (a prompt's
/// screenshot, which its n samples share; a tool-using response's zoomed views), computed once per
/// update instead of once per row and pass: with 8 samples per prompt the tower otherwise runs 8
/// times on each screenshot. Empty when the tower is trained (its features need their graph).
struct FrozenFeatures {
    by_source: HashMap<*const Encoded, Tensor>,
    /// The grids of the images the tower ran on.
    grids: Vec<Grid>,
}

impl FrozenFeatures {
    fn new(model: &Qwen25Vl, rows: &[Row]) -> Result<Self, ModelError> {
        Self::computed_if(!model.vision_trainable(), model, rows)
    }

    /// The reference model's features, computed when the policy's were (`policy`), so that both
    /// models take their features the same way (equal weights then give equal log-probs).
    fn for_reference(policy: &Self, reference: &Qwen25Vl, rows: &[Row]) -> Result<Self, ModelError> {
        Self::computed_if(!policy.by_source.is_empty(), reference, rows)
    }

    fn computed_if(compute: bool, model: &Qwen25Vl, rows: &[Row]) -> Result<Self, ModelError> {
        let mut by_source = HashMap::new();
        let mut grids = Vec::new();
        if compute {
            for encoded in rows.iter().flat_map(|r| [r.prompt, r.response]) {
                if let (Some(pixels), Entry::Vacant(slot)) =
                    (&encoded.pixel_values, by_source.entry(encoded as *const Encoded))
                {
                    slot.insert(model.image_features(pixels, &encoded.image_grids)?);
                    grids.extend(&encoded.image_grids);
                }
            }
        }
        Ok(Self { by_source, grids })
    }

    /// The features of a micro-batch's images in batch order ([`MicroBatch::sources`]); `None`
    /// when the tower is trained or the batch has no image.
    fn of(&self, sources: &[*const Encoded]) -> Option<Tensor> {
        let parts: Vec<&Tensor> = sources.iter().filter_map(|e| self.by_source.get(e)).collect();
        (!parts.is_empty()).then(|| Tensor::cat(&parts, 0))
    }
}

/// The model FLOPs of an update's passes, as model FLOPs utilisation counts them
/// ([`groundrl_tensor::qwen2_5_vl::flops`]): the decoder's forward on each micro-batch's sequences,
/// 3 times for a pass with a backward and once for one without; the vision tower's forward where it
/// runs: once per image for the whole update when its features are computed up front
/// ([`FrozenFeatures`]), else in every pass, 3 times when the tower is trained and the pass has a
/// backward. A backward counts twice its forward even where only adapters (LoRA) take gradients;
/// recomputation (gradient checkpointing) is not counted.
#[derive(Debug, Default)]
struct ModelFlops(f64);

impl ModelFlops {
    /// The tower's forward on the images whose features `frozen` computed.
    fn features(&mut self, model: &Qwen25Vl, frozen: &FrozenFeatures) -> Result<(), ModelError> {
        self.0 += images_forward_flops(&model.config, &frozen.grids)?;
        Ok(())
    }

    /// A forward of `mb` under `model` with its image features from `source`, and its backward
    /// when `backward`.
    fn pass(
        &mut self,
        model: &Qwen25Vl,
        mb: &MicroBatch,
        source: ImageFeatures,
        backward: bool,
    ) -> Result<(), ModelError> {
        let text: f64 = mb
            .sequences
            .iter()
            .map(|s| text_forward_flops(&model.config, s))
            .sum();
        let tower = match source {
            ImageFeatures::Tower => images_forward_flops(&model.config, &mb.batch.image_grids)?,
            ImageFeatures::Given(_) => 0.0,
        };
        let times = |trained: bool| if backward && trained { 3.0 } else { 1.0 };
        self.0 += times(true) * text + times(model.vision_trainable()) * tower;
        Ok(())
    }
}

/// Why [`update`] or a warm-up step ([`crate::sft::sft_step`]) failed: the model's computation, the
/// optimizer, or a collective of a data-parallel run (another rank died or timed out), each named as
/// what it is.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("optimizer step: {0}")]
    Optimizer(#[from] OptimError),
    #[error("data-parallel update: {0}")]
    Collective(#[from] DataParallelError),
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
    model: &Qwen25Vl,
    reference: Option<&Qwen25Vl>,
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
                let mut mb = training_batch(processor, rows, device, s.shared_prefix)?;
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
            let (tokens, sequences) = LossScale::totals(mbs.iter().map(|mb| &mb.mask)).map_err(loss_error)?;
            // Counts of mask entries, never negative.
            let [tokens, sequences] =
                counts_over_ranks(dp.as_deref_mut(), [tokens as u64, sequences as u64])?.map(|c| c as i64);
            if tokens == 0 {
                // Every completion masked out (overlong filtering): nothing to learn from here.
                continue;
            }
            let scale =
                LossScale::of_totals(tokens, sequences, s.loss, s.response_budget).map_err(loss_error)?;
            let mut mini_loss = 0.0;
            for (b, mb) in mbs.iter().enumerate() {
                let forward = model.training_forward_from(&mb.batch, mb.policy_features(), s.checkpoint)?;
                flops.pass(model, mb, mb.policy_features(), true)?;
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
                accumulate(
                    forward,
                    &out.loss,
                    dp.as_deref_mut(),
                    &parameters,
                    b + 1 == mbs.len(),
                )?;
                report.stats.merge(&out.stats);
                report.tokens += mb.tokens();
                report.shared_prefix |= mb.branched.is_some();
            }
            report.loss += mini_loss;
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

/// The backward pass of one micro-batch of an accumulation, adding its gradients to the earlier
/// ones'. Before the `last` one, a rank arms the overlap of its gradient sum with the pass
/// ([`DataParallel::before_last_backward`]); [`apply_step`] then finishes the sum. One function for
/// the policy update and the warm-up, so that both arm it the same way.
pub fn accumulate(
    forward: TrainingForward,
    loss: &Tensor,
    dp: Option<&mut DataParallel>,
    params: &[Tensor],
    last: bool,
) -> Result<(), UpdateError> {
    if let (Some(dp), true) = (dp, last) {
        dp.before_last_backward(params)?;
    }
    Ok(forward.backward(loss)?)
}

/// The optimizer step after an accumulation of gradients, alone (`dp` `None`) or as one rank: the
/// gradients of `params` (the optimizer's parameters, in its order) are first summed over the ranks,
/// so that every rank steps with the global gradient (and clips by its norm); under ZeRO stage 1 each
/// rank then broadcasts the parameters it updated, so that all hold the same weights again. The
/// gradients are zeroed for the next accumulation. One function for the policy update and the
/// warm-up, so that both keep the ranks in step the same way.
pub fn apply_step(
    optimizer: &mut AdamW,
    mut dp: Option<&mut DataParallel>,
    params: &[Tensor],
    lr: f64,
) -> Result<StepOutcome, UpdateError> {
    if let Some(dp) = dp.as_deref_mut() {
        dp.sum_gradients(params)?;
    }
    let outcome = optimizer.step(lr)?;
    if let (StepOutcome::Applied { .. }, Some(dp), Some(shard)) = (outcome, dp, optimizer.shard()) {
        dp.share_updates(params, &shard.partition)?;
    }
    optimizer.zero_grad();
    Ok(outcome)
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
    model: &Qwen25Vl,
    reference: &Qwen25Vl,
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
        let mut mb = training_batch(processor, chunk, model.device(), s.shared_prefix)?;
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

/// The micro-batch of `rows`: their completions as branches of their shared prompts where
/// `shared_prefix` is on and the rows allow it ([`crate::shared_prefix::applies`]), else one row
/// each ([`micro_batch`]).
fn training_batch(
    processor: &Processor,
    rows: &[Row],
    device: Device,
    shared_prefix: bool,
) -> Result<MicroBatch, ModelError> {
    if shared_prefix && crate::shared_prefix::applies(rows) {
        crate::shared_prefix::micro_batch(processor, rows, device)
    } else {
        micro_batch(processor, rows, device)
    }
}

/// The rows as one left-padded batch of prompt + response, with the mask of the tokens learned
/// from: the model's response tokens of the rows that count. A row whose `generated` flags do not
/// match its response is refused, naming it.
pub(crate) fn micro_batch(
    processor: &Processor,
    rows: &[Row],
    device: Device,
) -> Result<MicroBatch, ModelError> {
    let width = rows
        .iter()
        .map(|r| r.prompt.input_ids.len() + r.response.input_ids.len())
        .max()
        .unwrap_or(0);
    let mut mask = vec![0f32; rows.len() * width];
    let mut sequences = Vec::with_capacity(rows.len());
    let mut encoded = Vec::with_capacity(rows.len());
    check_generated_flags(rows)?;
    for (i, r) in rows.iter().enumerate() {
        let response = r.response.input_ids.len();
        let mut counted = 0;
        if r.counts {
            // Left padding puts the response at the end of the row.
            let start = (i + 1) * width - response;
            for (t, slot) in mask[start..(i + 1) * width].iter_mut().enumerate() {
                if r.learns_from(t) {
                    *slot = 1.0;
                    counted += 1;
                }
            }
        }
        sequences.push(Sequence::row(r.prompt.input_ids.len() + response, counted));
        encoded.push(r.sequence());
    }
    let advantages: Vec<f32> = rows.iter().map(|r| r.advantage as f32).collect();
    Ok(MicroBatch {
        batch: processor.batch(encoded),
        mask: Tensor::from_slice(&mask)
            .view([rows.len() as i64, width as i64])
            .to_device(device),
        advantages: Tensor::from_slice(&advantages).to_device(device),
        sequences,
        features: None,
        reference_features: None,
        sources: rows
            .iter()
            .flat_map(|r| [r.prompt as *const Encoded, r.response as *const Encoded])
            .collect(),
        branched: None,
    })
}

/// Refuses a row whose `generated` flags do not match its response, naming it.
pub(crate) fn check_generated_flags(rows: &[Row]) -> Result<(), ModelError> {
    for (i, r) in rows.iter().enumerate() {
        let response = r.response.input_ids.len();
        if !r.generated.is_empty() && r.generated.len() != response {
            return Err(ModelError::Input(format!(
                "row {i}: {} generated flags for {response} response tokens",
                r.generated.len()
            )));
        }
    }
    Ok(())
}

/// Log-probs and entropies of the micro-batch's masked tokens (the model's) at the sampling
/// temperature; 0 elsewhere, with no graph to them.
pub(crate) fn token_scores(
    model: &Qwen25Vl,
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
        return logprobs_and_entropy_at(&model.text, &hidden, ids, &scored, s.logprob_chunk);
    };
    let flat = logprobs_and_entropy_of_pairs(
        &model.text,
        &hidden,
        ids,
        &b.targets_at,
        &b.predictors_at,
        s.logprob_chunk,
    )?;
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
    model: &Qwen25Vl,
    mb: &MicroBatch,
    source: ImageFeatures,
    s: &UpdateSettings,
    flops: &mut ModelFlops,
) -> Result<Tensor, ModelError> {
    flops.pass(model, mb, source, false)?;
    tch::no_grad(|| {
        let hidden = model.hidden_states_from(&mb.batch, source)?;
        let ids = Tensor::from_slice2(&mb.batch.input_ids).to_device(model.device());
        Ok(token_scores(model, &hidden, &ids, mb, s)?
            .logprobs
            .to_kind(Kind::Float))
    })
}

/// Fixtures shared with the warm-up's tests: the tiny model and a tool-using trajectory.
#[cfg(test)]
pub(crate) mod tests {
    use groundrl_core::data::image_file::ImageLimits;
    use groundrl_tensor::hf_folder::tiny_ids;
    use groundrl_tensor::processor::chat_template::ChatTemplate;
    use groundrl_tensor::processor::image::ImageProcessor;
    use groundrl_tensor::processor::tiny_tokenizer::{VOCAB_SIZE, tiny_tokenizer};
    use groundrl_tensor::processor::tokenizer::expand_image_pads;
    use groundrl_tensor::qwen2_5_vl::BranchRow;
    use groundrl_tensor::qwen2_5_vl::flops::vision_forward_flops;
    use groundrl_tensor::qwen2_5_vl::presets;
    use groundrl_tensor::qwen2_5_vl::rope_index::Grid;

    use super::*;
    use crate::loss::{Aggregation, LossConfig, LossScale, policy_loss};
    use crate::optim::OptimConfig;

    /// The tiny preset, random-init, with a processor of the tiny tokenizer.
    pub(crate) fn tiny() -> (Qwen25Vl, Processor) {
        let config = presets::tiny(i64::from(VOCAB_SIZE), &tiny_ids());
        let processor = Processor {
            tokenizer: tiny_tokenizer().unwrap(),
            template: ChatTemplate::qwen2_5_vl(),
            image: ImageProcessor::default(),
            files: ImageLimits::default(),
        };
        (Qwen25Vl::new(&config, Device::Cpu, Kind::Float, 3), processor)
    }

    pub(crate) fn ids(p: &Processor, text: &str) -> Vec<i64> {
        let ids = p.tokenizer.encode(text).unwrap();
        ids.into_iter().map(i64::from).collect()
    }

    /// `text` with its one `<|image_pad|>` expanded for an image of `grid`, and made-up pixel rows
    /// `offset + 1e-4 * k` for k = 0, 1, ... (every value different, so their order can be checked).
    pub(crate) fn with_image(p: &Processor, text: &str, grid: Grid, offset: f64) -> Encoded {
        let patches = grid.iter().product::<i64>();
        let merged = (patches / 4) as usize;
        let pixels = Tensor::arange(patches * 1176, (Kind::Float, Device::Cpu)).view([patches, 1176]) * 1e-4;
        Encoded {
            input_ids: ids(p, &expand_image_pads(text, &[merged]).unwrap()),
            pixel_values: Some(pixels + offset),
            image_grids: vec![grid],
        }
    }

    pub(crate) const PROMPT: &str = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Click OK.<|im_end|>\n\
                          <|im_start|>assistant\n";
    const CALL: &str =
        "<tool_call>\n{\"name\": \"zoom\", \"arguments\": {\"bbox_2d\": [0, 0, 28, 28]}}\n</tool_call>";
    const TOOL_TURN: &str = "<|im_end|>\n<|im_start|>user\n<tool_response>\n<|vision_start|><|image_pad|>\
                             <|vision_end|>zoom 2x\n</tool_response><|im_end|>\n<|im_start|>assistant\n";

    /// A prompt with its trajectory after it.
    pub(crate) struct Trajectory {
        pub prompt: Encoded,
        /// The tool turn alone (its ids are inside `response`).
        pub tool: Encoded,
        pub response: Encoded,
        pub generated: Vec<bool>,
    }

    impl Trajectory {
        pub(crate) fn row(&self, advantage: f64) -> Row<'_> {
            Row {
                prompt: &self.prompt,
                response: &self.response,
                generated: &self.generated,
                advantage,
                counts: true,
            }
        }
    }

    /// A screenshot prompt (a 4 x 4 patch image), then the model's zoom call, the tool turn with the
    /// zoomed image (4 x 8 patches) and the model's answer.
    pub(crate) fn zoom_trajectory(p: &Processor) -> Trajectory {
        let prompt = with_image(p, PROMPT, [1, 4, 4], 0.0);
        let tool = with_image(p, TOOL_TURN, [1, 4, 8], 5.0);
        let call = ids(p, CALL);
        let answer = ids(p, "(20, 30)<|im_end|>");
        let mut input_ids = call.clone();
        input_ids.extend(&tool.input_ids);
        input_ids.extend(&answer);
        let mut generated = vec![true; call.len()];
        generated.extend(vec![false; tool.input_ids.len()]);
        generated.extend(vec![true; answer.len()]);
        let response = Encoded {
            input_ids,
            pixel_values: tool.pixel_values.as_ref().map(Tensor::shallow_clone),
            image_grids: tool.image_grids.clone(),
        };
        Trajectory {
            prompt,
            tool,
            response,
            generated,
        }
    }

    fn floats(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()
    }

    #[test]
    fn a_tool_turn_is_masked_out_and_its_image_follows_the_prompts() {
        let (_, p) = tiny();
        let t = zoom_trajectory(&p);
        let plain_prompt = with_image(&p, PROMPT, [1, 4, 4], 9.0);
        let plain = text_response(ids(&p, "(5, 6)<|im_end|>"));
        let rows = [
            t.row(1.0),
            Row {
                prompt: &plain_prompt,
                response: &plain,
                generated: &[],
                advantage: -1.0,
                counts: true,
            },
        ];
        let mb = micro_batch(&p, &rows, Device::Cpu).unwrap();
        let lengths = [
            t.prompt.input_ids.len() + t.response.input_ids.len(),
            plain_prompt.input_ids.len() + plain.input_ids.len(),
        ];
        let width = lengths[0].max(lengths[1]);
        // Row 0: 0 over its padding, prompt and tool turn; 1 over the call and the answer.
        let mut want = vec![0f32; width - t.generated.len()];
        want.extend(t.generated.iter().map(|&g| f32::from(u8::from(g))));
        assert_eq!(floats(&mb.mask.get(0)), want);
        let tool_start = width - t.generated.len() + t.generated.iter().position(|&g| !g).unwrap();
        let tool_len = t.tool.input_ids.len();
        assert_eq!(
            mb.batch.input_ids[0][tool_start..tool_start + tool_len],
            t.tool.input_ids[..]
        );
        assert!(want[tool_start..tool_start + tool_len].iter().all(|&m| m == 0.0));
        assert!(want[tool_start - 1] == 1.0 && want[tool_start + tool_len] == 1.0);
        // Row 1, without a tool turn: its whole response.
        let mut want = vec![0f32; width - plain.input_ids.len()];
        want.extend(vec![1f32; plain.input_ids.len()]);
        assert_eq!(floats(&mb.mask.get(1)), want);
        let learned = t.generated.iter().filter(|&&g| g).count() + plain.input_ids.len();
        assert_eq!(mb.counted(), learned as u64);
        assert_eq!(mb.tokens(), (lengths[0] + lengths[1]) as u64);
        // Images in sequence order: row 0's screenshot and zoom, then row 1's screenshot.
        let pixels = mb.batch.pixel_values.as_ref().unwrap();
        assert_eq!(pixels.size(), [16 + 32 + 16, 1176]);
        let want = Tensor::cat(
            &[
                t.prompt.pixel_values.as_ref().unwrap(),
                t.tool.pixel_values.as_ref().unwrap(),
                plain_prompt.pixel_values.as_ref().unwrap(),
            ],
            0,
        );
        assert!(pixels.equal(&want));
        assert_eq!(mb.batch.image_grids, [[1, 4, 4], [1, 4, 8], [1, 4, 4]]);
    }

    #[test]
    fn rows_that_do_not_count_or_do_not_fit_their_flags() {
        let (_, p) = tiny();
        let t = zoom_trajectory(&p);
        let skipped = Row {
            counts: false,
            ..t.row(1.0)
        };
        let mb = micro_batch(&p, &[skipped], Device::Cpu).unwrap();
        assert_eq!(mb.counted(), 0);
        assert_eq!(mb.mask.sum(Kind::Float).double_value(&[]), 0.0);
        let short = Row {
            generated: &t.generated[1..],
            ..t.row(1.0)
        };
        let err = micro_batch(&p, &[t.row(1.0), short], Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        let n = t.response.input_ids.len();
        assert!(
            err.ends_with(&format!(
                "row 1: {} generated flags for {n} response tokens",
                n - 1
            )),
            "{err}"
        );
    }

    #[test]
    fn tool_turn_tokens_get_no_gradient_from_the_policy_loss() {
        let (model, p) = tiny();
        let t = zoom_trajectory(&p);
        let rows = [t.row(1.0)];
        let mb = micro_batch(&p, &rows, Device::Cpu).unwrap();
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
                checkpoint: false,
                logprob_chunk: 16,
                temperature: 1.0,
                response_budget: 256,
                lr: 1e-6,
                shared_prefix: false,
            };
            let scores = token_scores(&model, &hidden, &ids, &mb, &s).unwrap();
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
        let config = model.config.clone();
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
            })
            .collect();
        let cfg = LossConfig::default();
        let settings = |shared_prefix| UpdateSettings {
            loss: &cfg,
            ppo_epochs: 2,
            mini_batch_size: 3,
            micro_batch_size: 3,
            checkpoint: false,
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
            text_forward_flops(&config, &Sequence { layout, scored })
        };
        let c: Vec<usize> = responses.iter().map(|r| r.input_ids.len()).collect();
        let (pa, pb) = (a.input_ids.len(), b.input_ids.len());
        let plain = text(pa, &[c[0]]) + text(pb, &[c[1]]) + text(pb, &[c[2]]);
        let branched = text(pa, &[c[0]]) + text(pb, &[c[1], c[2]]);
        let tower = |grid| vision_forward_flops(&config, grid).unwrap();
        let (va, vb) = (tower([1, 4, 4]), tower([1, 4, 8]));
        assert!(branched < plain && vb > va && va > 0.0);
        // Trained tower: 2 x 3 + 1 forwards of the decoder and of the tower on each image it runs on.
        assert_eq!(run(false, None), 7.0 * plain + 7.0 * (va + 2.0 * vb));
        assert_eq!(run(true, None), 7.0 * branched + 7.0 * (va + vb));
        // Frozen tower, with a reference: the decoder once more; each model's tower once per image.
        model.set_vision_trainable(false);
        assert_eq!(run(false, Some(&reference)), 8.0 * plain + 2.0 * (va + vb));
        assert_eq!(run(true, Some(&reference)), 8.0 * branched + 2.0 * (va + vb));
        // The KL-in-reward penalties: one forward of each model.
        let kl = kl_penalties(&model, &reference, &p, &rows, &settings(true)).unwrap();
        assert_eq!(kl.model_flops, 2.0 * branched + 2.0 * (va + vb));
    }

    /// Two rows of one zooming trajectory and one of a plain prompt: a frozen tower runs once per
    /// distinct prompt and response, and the features it gives place exactly what the tower gives
    /// when run on the batch's pixels. A trained tower gets no cache.
    #[test]
    fn frozen_features_are_computed_once_per_image_set_and_equal_the_towers() {
        let (model, p) = tiny();
        model.set_vision_trainable(false);
        let t = zoom_trajectory(&p);
        let plain = with_image(&p, PROMPT, [1, 4, 8], 2.0);
        let answer = text_response(ids(&p, "(1, 2)<|im_end|>"));
        let other = Row {
            prompt: &plain,
            response: &answer,
            generated: &[],
            advantage: 1.0,
            counts: true,
        };
        let rows = [t.row(1.0), t.row(-1.0), other];
        let frozen = FrozenFeatures::new(&model, &rows).unwrap();
        // The trajectory's prompt and response, the plain prompt; the text answer has no image.
        assert_eq!(frozen.by_source.len(), 3);
        let mut mb = micro_batch(&p, &rows, Device::Cpu).unwrap();
        mb.features = frozen.of(&mb.sources);
        let tower = tch::no_grad(|| model.hidden_states(&mb.batch)).unwrap();
        let given = tch::no_grad(|| model.hidden_states_from(&mb.batch, mb.policy_features())).unwrap();
        // Up to f32 rounding: the tower batches the images' windows differently when run per image.
        let diff = (tower - given).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "hidden states differ by {diff}");
        model.set_vision_trainable(true);
        assert!(FrozenFeatures::new(&model, &rows).unwrap().by_source.is_empty());
    }
}
