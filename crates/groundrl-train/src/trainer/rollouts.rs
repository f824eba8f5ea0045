//! Rollouts: the step's prompts drawn in the seeded epoch order, encoded, and answered by the
//! engine `rollout.n` times each (greedily once for validation and evaluation), with DAPO's dynamic
//! sampling drawing more prompts when groups carry no signal.

use std::time::Instant;

use groundrl_core::rng::keyed;
use groundrl_core::telemetry::CompletionRecord;
use groundrl_score::data::Sample;
use groundrl_tensor::rollout::Trajectory;

use super::{TrainError, Trainer, setup, skips};
use crate::advantage::informative_groups;
use crate::data_parallel::counts_over_ranks;
use crate::dataset::epoch_order;
use crate::inference::{Prompt, compute_features};

impl Trainer {
    /// Samples `rollout.n` completions of the step's prompts and scores them. With dynamic sampling,
    /// groups whose rewards are all equal are dropped and more prompts are drawn, up to
    /// `rollout.max_prompts_per_step` in all.
    ///
    /// In a data-parallel run every rank draws the same prompts and samples its contiguous share of
    /// each draw; after each draw the ranks sum the groups kept and dropped, so that all decide
    /// alike whether to draw again (and run the same collectives). The result is one process's:
    /// the same draws and completions (each prompt's seed is keyed by its position in the draw,
    /// whichever rank samples it), hence the same groups kept, spread over the ranks by where they
    /// were drawn. No draw asks for more groups than are still wanted, so the kept groups never
    /// exceed `rollout.prompts_per_step` in all, with ranks as without, and none is trimmed.
    pub(super) fn rollouts(&mut self) -> Result<Rollouts, TrainError> {
        let r = &self.cfg.rollout;
        let wanted = r.prompts_per_step as usize;
        let dynamic = r.dynamic_sampling;
        let cap = if dynamic {
            (r.max_prompts_per_step as usize).max(wanted)
        } else {
            wanted
        };
        let mut kept: Vec<Group> = Vec::new();
        let mut scored: Vec<Vec<CompletionRecord>> = Vec::new();
        let (mut kept_in_all, mut dropped) = (0, 0);
        let mut drawn = 0;
        while kept_in_all < wanted && drawn < cap {
            let count = (wanted - kept_in_all).min(cap - drawn);
            let draw = self.draw(count, drawn, dynamic)?;
            drawn += count;
            kept.extend(draw.kept);
            scored.push(draw.records);
            let [k, d] = counts_over_ranks(self.dp.as_mut(), [draw.kept_here, draw.dropped_here])?;
            kept_in_all += k as usize;
            dropped += d as usize;
        }
        for (i, group) in kept.iter_mut().enumerate() {
            group.records.iter_mut().for_each(|r| r.group = i);
        }
        if kept_in_all + dropped == 0 {
            return Err(setup(format!(
                "step {}: none of the {drawn} prompts drawn could be encoded and scored (see above)",
                self.state.step + 1
            )));
        }
        Ok(Rollouts {
            kept,
            scored,
            dropped,
        })
    }

    /// Draws the next `count` prompts (the draw after `drawn` prompts of this step) and samples and
    /// scores this rank's share of them. Every rank draws the same prompts and samples its own
    /// share, each seeded by its position in the whole draw, as one process would seed it. With
    /// dynamic sampling, groups whose rewards are all equal are not kept.
    fn draw(&mut self, count: usize, drawn: usize, dynamic: bool) -> Result<Draw, TrainError> {
        let indices = self.next_indices(count);
        let seed = keyed(
            self.cfg.trainer.seed,
            &format!("step {} draw {drawn}", self.state.step),
        );
        let mine = self
            .dp
            .as_ref()
            .map_or(0..indices.len(), |dp| dp.share(indices.len()));
        let (n, temperature) = (self.cfg.rollout.n as usize, self.temperature());
        let first = mine.start;
        let groups = self.sample_groups_with(&indices[mine], seed, Split::Train, n, temperature, first)?;
        self.log_pass_rates(&groups, seed)?;
        let mut draw = Draw::default();
        for (group_id, group) in groups.into_iter().enumerate() {
            // Numbered from 0 on this rank; `gather_step` numbers them across ranks and draws.
            draw.records
                .extend(group.records.iter().map(|r| CompletionRecord {
                    group: group_id,
                    ..r.clone()
                }));
            if !dynamic || group.informative() {
                draw.kept.push(group);
                draw.kept_here += 1;
            } else {
                draw.dropped_here += 1;
            }
        }
        Ok(draw)
    }

    /// The next `count` sample indices in the epoch order, moving to the next epoch at its end.
    fn next_indices(&mut self, count: usize) -> Vec<usize> {
        let len = self.train.len();
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let order = epoch_order(len, self.cfg.data.seed, self.state.epoch);
            let take = (count - out.len()).min(len - self.state.cursor);
            out.extend_from_slice(&order[self.state.cursor..self.state.cursor + take]);
            self.state.cursor += take;
            if self.state.cursor == len {
                self.state.cursor = 0;
                self.state.epoch += 1;
            }
        }
        out
    }

    /// Encodes, samples and scores the samples at `indices` of a split: `rollout.n` sampled
    /// completions each from the train set, one greedy completion each from the others. Samples
    /// that cannot be encoded or scored are skipped and counted in [`RunState::bad_samples`].
    pub(super) fn sample_groups(
        &mut self,
        indices: &[usize],
        seed: u64,
        split: Split,
    ) -> Result<Vec<Group>, TrainError> {
        let (n, temperature) = match split {
            Split::Train => (self.cfg.rollout.n as usize, self.temperature()),
            _ => (1, 0.0),
        };
        self.sample_groups_with(indices, seed, split, n, temperature, 0)
    }

    /// [`Self::sample_groups`] with `n` completions per sample at `temperature` (0: greedy), the
    /// first sample being at position `first` of its draw (a rank's share starts inside it).
    pub(super) fn sample_groups_with(
        &mut self,
        indices: &[usize],
        seed: u64,
        split: Split,
        n: usize,
        temperature: f64,
        first: usize,
    ) -> Result<Vec<Group>, TrainError> {
        let data = match split {
            Split::Train => &self.train,
            Split::Val => &self.val,
            Split::HeldOut(set) => &self.held_out[set].data,
        };
        let mut groups = Vec::new();
        // (position in the split, sample id, why): skipped once the loops no longer borrow `data`.
        let mut failed = Vec::new();
        let encode_start = Instant::now();
        let samples: Vec<&Sample> = indices.iter().map(|&i| &data.samples[i]).collect();
        let prompts = self
            .inference
            .encode_all(&self.policy.processor, &samples, &data.base);
        for ((&index, sample), prompt) in indices.iter().zip(samples).zip(prompts) {
            match prompt {
                Ok(prompt) => groups.push(Group::new(index, first + groups.len(), prompt)),
                Err(e) => failed.push((index, sample.id.clone(), e.to_string())),
            }
        }
        self.rollout_seconds.encode += encode_start.elapsed().as_secs_f64();
        if groups.is_empty() {
            self.skip_samples(split, failed);
            return Ok(groups);
        }
        let generate_start = Instant::now();
        if matches!(split, Split::Train) && self.reference.is_none() {
            // A frozen tower's features of the step's prompts serve the rollouts' prefill and the
            // update alike: computed once instead of in each. Not with a reference model, whose
            // features the update computes per image: the policy's are then computed the same way,
            // so that equal weights give equal log-probs to the last bit.
            let mut prompts: Vec<&mut Prompt> = groups.iter_mut().map(|g| &mut g.prompt).collect();
            compute_features(&mut prompts, self.policy.model.as_ref())?;
        }
        let prompts: Vec<(&Prompt, u64)> = groups
            .iter()
            .map(|g| (&g.prompt, draw_seed(seed, g.position)))
            .collect();
        for t in self.inference.generate(&self.policy, &prompts, n, temperature)? {
            groups[t.prompt_index].completions.push(t);
        }
        self.rollout_seconds.generate += generate_start.elapsed().as_secs_f64();
        let mut scored = Vec::with_capacity(groups.len());
        for (position, mut group) in groups.into_iter().enumerate() {
            let sample = &data.samples[group.index];
            match self.score_group(self.scorer_of(split), sample, &group, position) {
                Ok(records) => {
                    group.records = records;
                    scored.push(group);
                }
                Err(e) => failed.push((group.index, sample.id.clone(), e.to_string())),
            }
        }
        self.skip_samples(split, failed);
        Ok(scored)
    }

    /// [`Self::skip_sample`] for each (position, id, why) of `split`.
    fn skip_samples(&mut self, split: Split, failed: Vec<(usize, String, String)>) {
        let set = match split {
            Split::Train => "train",
            Split::Val => "val",
            Split::HeldOut(set) => self.held_out[set].key(),
        }
        .to_string();
        for (index, id, why) in failed {
            self.skip_sample(skips::key(&set, index), &id, why);
        }
    }
}

/// The datasets of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Split {
    Train,
    Val,
    /// A held-out set, by its position in [`Trainer::held_out`] (`data.test` first when set).
    HeldOut(usize),
}

/// A step's rollouts: the groups it trains on (this rank's), and the records of every group this
/// rank scored (dropped ones too, so the step's statistics describe all that was sampled).
pub(super) struct Rollouts {
    pub(super) kept: Vec<Group>,
    /// The records of each draw in order, each draw's groups numbered from 0.
    pub(super) scored: Vec<Vec<CompletionRecord>>,
    /// Groups dropped by dynamic sampling (all rewards equal), on every rank.
    pub(super) dropped: usize,
}

/// What one draw of a step gave this rank ([`Trainer::draw`]).
#[derive(Default)]
struct Draw {
    kept: Vec<Group>,
    /// The records of every group scored, kept or not.
    records: Vec<CompletionRecord>,
    kept_here: u64,
    dropped_here: u64,
}

/// One prompt's completions with their scores.
pub(super) struct Group {
    /// The sample's index in its dataset.
    pub(super) index: usize,
    /// Its position in the draw, which seeds its completions ([`draw_seed`]).
    pub(super) position: usize,
    /// Its prompt, as [`crate::inference::Inference::encode`] made it.
    pub(super) prompt: Prompt,
    pub(super) completions: Vec<Trajectory>,
    pub(super) records: Vec<CompletionRecord>,
}

impl Group {
    fn new(index: usize, position: usize, prompt: Prompt) -> Self {
        Self {
            index,
            position,
            prompt,
            completions: Vec::new(),
            records: Vec::new(),
        }
    }

    /// Some rewards differ, so the group has a learning signal (DAPO's dynamic sampling keeps these).
    fn informative(&self) -> bool {
        let rewards: Vec<f64> = self.records.iter().map(|r| r.reward).collect();
        informative_groups(&rewards, &vec![0; rewards.len()]).is_ok_and(|v| v.first() == Some(&true))
    }
}

/// The sampling seed of the prompt at `position` in a draw seeded `seed`: by position, so a sample
/// drawn twice in one step (at an epoch's end and the next one's start) gets different completions.
pub(super) fn draw_seed(seed: u64, position: usize) -> u64 {
    keyed(seed, &position.to_string())
}
