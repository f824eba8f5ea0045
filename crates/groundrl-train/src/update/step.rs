//! The end of an accumulation of gradients: each micro-batch's backward pass, then the optimizer
//! step. One pair of functions for the GRPO update and the warm-up, so that both keep the ranks of a
//! data-parallel run in step the same way.

use groundrl_tensor::model::TrainingPass;
use tch::{Device, Kind, Tensor};

use super::UpdateError;
use crate::data_parallel::DataParallel;
use crate::optim::{AdamW, OptimError, StepOutcome};

/// The backward pass of one micro-batch of an accumulation, adding its gradients to the earlier
/// ones'. Before the `last` one, a rank arms the overlap of its gradient sum with the pass
/// ([`DataParallel::before_last_backward`]); [`apply_step`] then finishes the sum. One function for
/// the policy update and the warm-up, so that both arm it the same way.
pub(super) fn accumulate(
    forward: Box<dyn TrainingPass + '_>,
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
/// gradients are dropped (alone, [`AdamW::release_grads`]) or zeroed (as a rank) for the next
/// accumulation. An applied step whose weights hold NaN or infinity ends the run with an error
/// (every rank holds the same weights then, so all end alike) before anything saves them. One function for the policy update and the warm-up, so that both
/// keep the ranks in step the same way.
pub(super) fn apply_step(
    optimizer: &mut AdamW,
    mut dp: Option<&mut DataParallel>,
    params: &[Tensor],
    lr: f64,
) -> Result<StepOutcome, UpdateError> {
    let alone = dp.is_none();
    if let Some(dp) = dp.as_deref_mut() {
        dp.sum_gradients(params)?;
    }
    let outcome = optimizer.step(lr)?;
    if let (StepOutcome::Applied { .. }, Some(dp), Some(shard)) = (outcome, dp, optimizer.shard()) {
        dp.share_updates(params, &shard.partition)?;
    }
    // Alone, the gradients are dropped rather than zeroed; a rank's are views of its buckets.
    match alone {
        true => optimizer.release_grads(),
        false => optimizer.zero_grad(),
    }
    .map_err(OptimError::from)?;
    if let StepOutcome::Applied { .. } = outcome
        && let Some(name) = optimizer.first_non_finite().map_err(OptimError::from)?
    {
        return Err(UpdateError::NonFiniteWeights {
            name: name.to_owned(),
        });
    }
    Ok(outcome)
}

/// The sum of a mini-batch's scalar `losses` in f64, in their order, read from the device once
/// after every pass is queued (a read per micro-batch would idle the device before each backward).
pub(super) fn summed(losses: &[Tensor]) -> Result<f64, tch::TchError> {
    if losses.is_empty() {
        return Ok(0.0);
    }
    let values = Tensor::f_stack(losses, 0)?
        .f_to_kind(Kind::Double)?
        .f_to_device(Device::Cpu)?;
    Ok(Vec::<f64>::try_from(values)?.iter().sum())
}
