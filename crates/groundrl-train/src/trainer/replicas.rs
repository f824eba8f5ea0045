//! The step's numbers of a data-parallel run brought together: each rank's sums added up, its
//! rollout records gathered, and the ranks' weights compared (`crate::data_parallel`).

use groundrl_core::telemetry::CompletionRecord;
use groundrl_dist::GradientSum;
use tch::Tensor;

use super::{TrainError, Trainer};
use crate::data_parallel::{DataParallel, counts_over_ranks};

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
        }
    }
}

impl Trainer {
    /// The step's sums over the ranks, and its rollout records (each draw's, [`super::Rollouts`])
    /// from every rank in one process's order: this rank's alone without ranks. The samples the
    /// ranks skipped travel with the records, so that every rank counts them all.
    pub(super) fn gather_step(
        &mut self,
        local: StepSums,
        scored: Vec<Vec<CompletionRecord>>,
    ) -> Result<(StepSums, Vec<CompletionRecord>), TrainError> {
        let skipped = self.take_unshared_skips();
        let Some(dp) = &mut self.dp else {
            return Ok((local, in_draw_order(vec![scored])));
        };
        let sums = StepSums::of(&dp.sum_f64(&local.to_vec())?);
        let by_rank = dp.gather("rollout records", &(scored, skipped))?;
        let (scored, skipped): (Vec<_>, Vec<_>) = by_rank.into_iter().unzip();
        self.merge_skips(skipped);
        Ok((sums, in_draw_order(scored)))
    }

    /// Rows of this rank's share of a mini-batch (`trainer.mini_batch_size`), `rows` being its own
    /// rows of the step. A step whose rows, summed over the ranks, fit one mini-batch trains in one
    /// optimizer step, as one process does, whichever rank holds them: dynamic sampling leaves the
    /// groups it keeps on the ranks that drew them, so the ranks may hold unequal shares. Otherwise
    /// each rank's share is an equal part of a mini-batch.
    pub(super) fn mini_batch_share(&mut self, rows: usize) -> Result<usize, TrainError> {
        let mini = self.cfg.trainer.mini_batch_size as usize;
        let Some(dp) = self.dp.as_mut() else {
            return Ok(mini);
        };
        let world = dp.world_size();
        let [all] = counts_over_ranks(Some(dp), [rows as u64])?;
        Ok(if all as usize <= mini {
            rows.max(1)
        } else {
            mini / world
        })
    }

    /// This rank's overlapped gradient sums so far, in a data-parallel run with
    /// `distributed.overlap_backward` on; `None` otherwise.
    pub(super) fn overlapped_so_far(&self) -> Option<GradientSum> {
        let on = self.cfg.distributed.overlap_backward;
        self.dp.as_ref().filter(|_| on).map(DataParallel::overlapped)
    }

    /// The step's record of what its overlapped gradient sums did on this rank (the one that writes
    /// the record), from the totals `before` it ([`Self::overlapped_so_far`]): buckets summed, of
    /// them those whose all-reduce started during the backward pass, and those that gradients
    /// reached after they had started. Empty where there is no overlap. They show whether the
    /// overlap happens at all, which the step's timings alone do not.
    pub(super) fn overlapped_since(&self, before: Option<GradientSum>) -> Vec<(&'static str, f64)> {
        let (Some(before), Some(now)) = (before, self.overlapped_so_far()) else {
            return Vec::new();
        };
        let step = |now: usize, before: usize| now.saturating_sub(before) as f64;
        vec![
            ("dist/buckets", step(now.buckets, before.buckets)),
            ("dist/buckets_overlapped", step(now.overlapped, before.overlapped)),
            ("dist/buckets_late", step(now.late, before.late)),
        ]
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

/// The records of every rank (`by_rank[rank][draw]`, each draw's groups numbered from 0) draw by
/// draw, and within a draw in rank order: since each rank samples a contiguous share of a draw, that
/// is the order one process scores them in. The groups are numbered on from 0 across them, as one
/// process numbers the groups it scores in a step.
fn in_draw_order(by_rank: Vec<Vec<Vec<CompletionRecord>>>) -> Vec<CompletionRecord> {
    let draws = by_rank.iter().map(Vec::len).max().unwrap_or(0);
    let mut ranks: Vec<_> = by_rank.into_iter().map(Vec::into_iter).collect();
    let mut all = Vec::new();
    for _ in 0..draws {
        for records in ranks.iter_mut().filter_map(Iterator::next) {
            let base = all.last().map_or(0, |r: &CompletionRecord| r.group + 1);
            all.extend(records.into_iter().map(|r| CompletionRecord {
                group: base + r.group,
                ..r
            }));
        }
    }
    all
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
        };
        assert_eq!(StepSums::of(&sums.to_vec()), sums);
    }

    /// Two ranks, two draws: rank 0 scored groups a, b of draw 1 and e of draw 2, rank 1 group c of
    /// draw 1 and none of draw 2 (its share was empty). One process scores a, b, c, e as groups
    /// 0 to 3; each group's records stay together.
    #[test]
    fn records_come_in_draw_order_and_groups_are_numbered_across_ranks() {
        let record = |group: usize, source: &str| CompletionRecord {
            group,
            source: source.to_string(),
            ..CompletionRecord::default()
        };
        let rank_0 = vec![
            vec![record(0, "a"), record(0, "a"), record(1, "b")],
            vec![record(0, "e")],
        ];
        let rank_1 = vec![vec![record(0, "c"), record(0, "c")], vec![]];
        let all = in_draw_order(vec![rank_0, rank_1]);
        let got: Vec<(usize, &str)> = all.iter().map(|r| (r.group, r.source.as_str())).collect();
        assert_eq!(got, [(0, "a"), (0, "a"), (1, "b"), (2, "c"), (2, "c"), (3, "e")]);
        // One process: its draws in order, numbered on.
        let alone = in_draw_order(vec![vec![
            vec![record(0, "a"), record(1, "b")],
            vec![record(0, "c")],
        ]]);
        let groups: Vec<usize> = alone.iter().map(|r| r.group).collect();
        assert_eq!(groups, [0, 1, 2]);
    }
}
