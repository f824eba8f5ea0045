//! The step's numbers of a data-parallel run brought together: each rank's sums added up, its
//! rollout records gathered, and the ranks' weights compared (`crate::data_parallel`).

use groundrl_core::telemetry::CompletionRecord;
use tch::Tensor;

use super::{TrainError, Trainer};

/// A step's values whose value over the whole run is the sum of the ranks' (each rank's loss and
/// loss statistics are already its share of the global mini-batch's, see `crate::data_parallel`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct StepSums {
    pub(super) loss: f64,
    pub(super) kl: f64,
    pub(super) approx_kl: f64,
    pub(super) entropy: f64,
    pub(super) clip_fraction: f64,
    /// Tokens the model generated in the rollouts.
    pub(super) generated: f64,
    /// Tokens run through the model in the update.
    pub(super) tokens: f64,
    /// The update's model FLOPs (`crate::update::UpdateReport::model_flops`).
    pub(super) model_flops: f64,
    /// The sum of the rows' KL penalties (`loss.kl_in_reward`).
    pub(super) kl_penalty: f64,
    pub(super) rows: f64,
    /// Samples skipped in the step's rollouts.
    pub(super) bad_samples: f64,
}

impl StepSums {
    fn to_vec(self) -> Vec<f64> {
        vec![
            self.loss,
            self.kl,
            self.approx_kl,
            self.entropy,
            self.clip_fraction,
            self.generated,
            self.tokens,
            self.model_flops,
            self.kl_penalty,
            self.rows,
            self.bad_samples,
        ]
    }

    fn of(v: &[f64]) -> Self {
        let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
        Self {
            loss: at(0),
            kl: at(1),
            approx_kl: at(2),
            entropy: at(3),
            clip_fraction: at(4),
            generated: at(5),
            tokens: at(6),
            model_flops: at(7),
            kl_penalty: at(8),
            rows: at(9),
            bad_samples: at(10),
        }
    }
}

impl Trainer {
    /// The step's sums over the ranks and every rank's rollout records in rank order, their groups
    /// numbered across the ranks as one process numbers them; this rank's own without ranks.
    pub(super) fn gather_step(
        &mut self,
        local: StepSums,
        scored: Vec<CompletionRecord>,
    ) -> Result<(StepSums, Vec<CompletionRecord>), TrainError> {
        let Some(dp) = &mut self.dp else {
            return Ok((local, scored));
        };
        let sums = StepSums::of(&dp.sum_f64(&local.to_vec())?);
        let mut all = Vec::new();
        for records in dp.gather("rollout records", &scored)? {
            let base = all
                .iter()
                .map(|r: &CompletionRecord| r.group + 1)
                .max()
                .unwrap_or(0);
            all.extend(records.into_iter().map(|r| CompletionRecord {
                group: base + r.group,
                ..r
            }));
        }
        Ok((sums, all))
    }

    /// Every `distributed.checksum_every` steps, compares the ranks' weights (every variable of the
    /// policy, by name); an error names the ranks whose differ from rank 0's.
    pub(super) fn check_replicas(&mut self) -> Result<(), TrainError> {
        let step = self.state.step;
        let Some(dp) = self.dp.as_mut().filter(|dp| dp.checks_at(step)) else {
            return Ok(());
        };
        let mut variables = self
            .policy
            .model
            .var_store()
            .variables()
            .into_iter()
            .collect::<Vec<_>>();
        variables.sort_by(|a, b| a.0.cmp(&b.0));
        let tensors: Vec<Tensor> = variables.into_iter().map(|(_, t)| t).collect();
        Ok(dp.check_replicas(&tensors, step)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_sums_go_through_their_vector_unchanged() {
        let sums = StepSums {
            loss: 1.0,
            kl: 2.0,
            approx_kl: 3.0,
            entropy: 4.0,
            clip_fraction: 5.0,
            generated: 6.0,
            tokens: 7.0,
            model_flops: 8.0,
            kl_penalty: 9.0,
            rows: 10.0,
            bad_samples: 11.0,
        };
        assert_eq!(StepSums::of(&sums.to_vec()), sums);
    }
}
