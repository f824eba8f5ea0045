//! The scoring phase of a step: a group's completions scored by the run's [`Scorer`] (a held-out
//! set's answers by the set's own, when it has one), and each group's pass rate (k of n) logged to
//! the ledger that `groundrl curate next` and the curriculum rounds read.

use groundrl_core::curriculum::ledger::{LedgerEntry, RolloutBatch, rule_text};
use groundrl_core::telemetry::CompletionRecord;
use groundrl_score::data::Sample;
use groundrl_tensor::rollout::FinishReason;

use super::rollouts::{Group, Split, draw_seed};
use super::tools::{call_failures, sample_target_size, tool_use};
use super::{TrainError, Trainer, setup};
use crate::inference::{generated_tokens, resized_size};
use crate::scorer::{ScoreError, Scorer, Scoring, ToolScoring};

impl Trainer {
    /// Appends each group's k-of-n to the ledger (dropped groups too: they were drawn and judged);
    /// in a data-parallel run rank 0 appends every rank's, in rank order.
    pub(super) fn log_pass_rates(&mut self, groups: &[Group], seed: u64) -> Result<(), TrainError> {
        let mut entries = self.ledger_entries(groups, self.ledger_round(), self.state.step + 1, seed)?;
        if let Some(dp) = &mut self.dp {
            entries = dp.gather("ledger entries", &entries)?.concat();
        }
        let Some(logs) = &mut self.logs else {
            return Ok(());
        };
        let duplicates = logs.ledger.append(&entries).map_err(setup)?;
        if duplicates > 0 {
            eprintln!(
                "step {}: {duplicates} ledger entries were logged before and not again",
                self.state.step + 1
            );
        }
        Ok(())
    }

    /// The ledger entries (k of n) of train-set groups sampled at the current temperature with
    /// `seed`, logged as ledger round `round` at training step `step`.
    pub(super) fn ledger_entries(
        &self,
        groups: &[Group],
        round: u32,
        step: u64,
        seed: u64,
    ) -> Result<Vec<LedgerEntry>, TrainError> {
        let batch = RolloutBatch {
            run: self.run_name(),
            round,
            step,
            temperature: self.temperature(),
            rule: rule_text(
                &self.cfg.reward.correct_component,
                self.cfg.reward.correct_threshold,
            ),
        };
        groups
            .iter()
            .map(|g| {
                let draw = draw_seed(seed, g.position);
                LedgerEntry::from_records(&self.train.samples[g.index], &batch, draw, &g.records)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(setup)
    }

    /// The records of a group's trajectories, each scored by `scorer` on its final answer (about the
    /// view the run reads answers in) with its tool use; an error when one cannot be scored.
    pub(super) fn score_group(
        &self,
        scorer: &Scorer,
        sample: &Sample,
        group: &Group,
        position: usize,
    ) -> Result<Vec<CompletionRecord>, ScoreError> {
        let resized = resized_size(&self.policy.processor, &group.prompt.encoded);
        let size = sample_target_size(sample, group.prompt.view.frames);
        let budget = self.generation_budget();
        group
            .completions
            .iter()
            .map(|t| {
                let tokens = generated_tokens(t);
                let scoring = Scoring {
                    sample,
                    resized,
                    group: position,
                    text: t.final_text(),
                    tokens,
                    truncated: t.finish == FinishReason::Length,
                    target_size: size,
                    tools: self.inference.tools_on().then(|| ToolScoring {
                        tool_use: tool_use(t),
                        failures: call_failures(t),
                        shown: self.inference.shown(t, &group.prompt.view),
                        full: &group.prompt.view,
                    }),
                };
                let mut record = scorer.score(&scoring)?;
                record.reward += self.cfg.advantage.overlong.reward_shaping(tokens, budget);
                Ok(record)
            })
            .collect()
    }

    /// The scorer of `split`'s answers: a held-out set's own (`data.held_out_rewards`), else the
    /// run's.
    pub(super) fn scorer_of(&self, split: Split) -> &Scorer {
        match split {
            Split::HeldOut(set) => self.held_out[set].scorer.as_ref().unwrap_or(&self.scorer),
            Split::Train | Split::Val => &self.scorer,
        }
    }

    /// Most tokens the model may generate in one sample: `rollout.max_new_tokens` per turn (the
    /// response budget of Dr.GRPO's normaliser and of overlong shaping).
    pub(super) fn generation_budget(&self) -> usize {
        self.cfg.rollout.max_new_tokens as usize * self.inference.limits.max_turns
    }

    /// The run as ledger entries name it: its folder's name.
    fn run_name(&self) -> String {
        let name = self.run_dir.file_name().unwrap_or_default();
        name.to_string_lossy().into_owned()
    }
}
