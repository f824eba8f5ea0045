//! The update phase of a GRPO step: each completion's advantage within its group (after the KL
//! penalty of `loss.kl_in_reward`), then the policy update on this rank's rows
//! (`crate::update::update`), under the profiler when `trainer.profile_step` names the step.

use std::time::Instant;

use groundrl_core::telemetry::CompletionRecord;
use groundrl_tensor::hf_folder::HfModel;
use groundrl_tensor::model::Model;
use groundrl_tensor::rollout::FinishReason;

use super::rollouts::Group;
use super::{TrainError, Trainer, profiled, setup};
use crate::advantage::group_advantages;
use crate::optim::lr_at;
use crate::update::{Row, UpdateReport, UpdateSettings, kl_penalties, update};

/// What the update phase of a step did, on this rank.
pub(super) struct Updated {
    pub(super) report: UpdateReport,
    pub(super) lr: f64,
    /// Rows (completions) trained on.
    pub(super) rows: usize,
    /// The rows' summed KL penalty (`loss.kl_in_reward`; 0 without), and the model FLOPs of the
    /// passes that computed it.
    pub(super) kl_penalty_sum: f64,
    pub(super) kl_model_flops: f64,
    pub(super) seconds: f64,
}

/// The rewards with each row's KL penalty taken off (`loss.kl_in_reward`).
struct Penalized {
    rewards: Vec<f64>,
    penalty_sum: f64,
    model_flops: f64,
}

impl Trainer {
    /// Trains the policy on `groups`, whose completions `records` scored (in the same order).
    pub(super) fn update_phase(
        &mut self,
        groups: &[Group],
        records: &[CompletionRecord],
    ) -> Result<Updated, TrainError> {
        let start = Instant::now();
        let rows_here = groups.iter().map(|g| g.completions.len()).sum();
        let mini_batch_size = self.mini_batch_share(rows_here)?;
        let t = &self.cfg.trainer;
        let lr = lr_at(self.state.step, self.total_steps(), &self.cfg.optim);
        let settings = UpdateSettings {
            loss: &self.cfg.loss,
            ppo_epochs: t.ppo_epochs,
            mini_batch_size,
            micro_batch_size: t.micro_batch_size as usize,
            recompute: self.cfg.model.gradient_checkpointing.recompute(),
            logprob_chunk: i64::from(t.logprob_chunk),
            temperature: self.temperature(),
            response_budget: self.generation_budget() as i64,
            lr,
            shared_prefix: t.shared_prefix,
        };
        let mut rows = self.rows_of(groups);
        let trace = self.trace_path("update");
        let device = self.policy.model.device();
        let (report, penalized) = profiled(trace.as_deref(), device, || {
            let kl_reference = self.reference.as_deref().filter(|_| self.cfg.loss.kl_in_reward);
            let penalized = penalized_rewards(records, &rows, &settings, &self.policy, kl_reference)?;
            let group_of: Vec<usize> = records.iter().map(|r| r.group).collect();
            let advantages =
                group_advantages(&penalized.rewards, &group_of, &self.cfg.advantage).map_err(setup)?;
            for (row, advantage) in rows.iter_mut().zip(advantages) {
                row.advantage = advantage;
            }
            let report = update(
                self.policy.model.as_ref(),
                self.reference.as_deref(),
                &self.policy.processor,
                &mut self.optimizer,
                &rows,
                &settings,
                self.dp.as_mut(),
            )?;
            Ok::<_, TrainError>((report, penalized))
        })??;
        Ok(Updated {
            report,
            lr,
            rows: rows.len(),
            kl_penalty_sum: penalized.penalty_sum,
            kl_model_flops: penalized.model_flops,
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// One row per completion, group by group; a completion cut at the token budget counts in the
    /// loss as `advantage.overlong` says. Advantages are filled in later.
    fn rows_of<'a>(&self, groups: &'a [Group]) -> Vec<Row<'a>> {
        let overlong = &self.cfg.advantage.overlong;
        groups
            .iter()
            .flat_map(|g| g.completions.iter().map(move |c| (g, c)))
            .map(|(g, c)| Row {
                prompt: &g.prompt.encoded,
                response: &c.response,
                generated: &c.generated,
                advantage: 0.0,
                counts: overlong.counts_in_loss(c.finish == FinishReason::Length),
                prompt_features: g.prompt.features.as_ref(),
            })
            .collect()
    }
}

/// The records' rewards, less each row's KL penalty to `kl_reference`, the reference model when
/// `loss.kl_in_reward` puts the KL term in the reward instead of the loss.
fn penalized_rewards(
    records: &[CompletionRecord],
    rows: &[Row],
    settings: &UpdateSettings,
    policy: &HfModel,
    kl_reference: Option<&dyn Model>,
) -> Result<Penalized, TrainError> {
    let mut rewards: Vec<f64> = records.iter().map(|r| r.reward).collect();
    let Some(reference) = kl_reference else {
        return Ok(Penalized {
            rewards,
            penalty_sum: 0.0,
            model_flops: 0.0,
        });
    };
    let penalties = kl_penalties(
        policy.model.as_ref(),
        reference,
        &policy.processor,
        rows,
        settings,
    )?;
    for (reward, penalty) in rewards.iter_mut().zip(&penalties.per_row) {
        *reward -= penalty;
    }
    Ok(Penalized {
        rewards,
        penalty_sum: penalties.per_row.iter().sum(),
        model_flops: penalties.model_flops,
    })
}
