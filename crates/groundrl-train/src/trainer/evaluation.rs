//! Held-out evaluation (`eval/before.jsonl`, `eval/after.jsonl` on `data.test`, and
//! `eval/<name>/...` on each set of `data.held_out`) and validation every `trainer.test_freq` steps
//! on `data.val`, with early stopping on its metric.

use groundrl_core::rng::keyed;
use groundrl_core::telemetry::{EvalRecord, SampledAnswers, SampledSummary};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::rollouts::{Group, Split};
use super::{Ending, TrainError, Trainer, io, setup, write_file};
use crate::config::EarlyStoppingMode;
use crate::data_parallel::batch_share;
use crate::dataset::{Dataset, fixed_subsample};
use crate::fault;
use crate::run_folder::eval_file;
use crate::scorer::Scorer;

/// A held-out set of a run: `data.test`, or a named set of `data.held_out`.
pub(super) struct HeldOutSet {
    /// `None` for `data.test`, whose evaluations are `eval/<label>.jsonl`.
    pub(super) name: Option<String>,
    /// Its config key (`data.test`, `data.held_out.<name>`), for errors.
    pub(super) config_key: String,
    /// Its name in the keys of skipped samples.
    skip_key: String,
    pub(super) data: Dataset,
    /// Its own scorer (`data.held_out_rewards`); `None`: the run's.
    pub(super) scorer: Option<Scorer>,
}

impl HeldOutSet {
    pub(super) fn test(data: Dataset) -> Self {
        Self {
            name: None,
            config_key: "data.test".into(),
            skip_key: "test".into(),
            data,
            scorer: None,
        }
    }

    /// The set `name` of `data.held_out`, scored by `scorer` when it has a reward spec of its own.
    pub(super) fn named(name: &str, data: Dataset, scorer: Option<Scorer>) -> Self {
        Self {
            name: Some(name.to_string()),
            config_key: format!("data.held_out.{name}"),
            skip_key: format!("held_out.{name}"),
            data,
            scorer,
        }
    }

    /// Its name in the keys of skipped samples (`skips::key`).
    pub(super) fn key(&self) -> &str {
        &self.skip_key
    }

    /// Its name in logs and summaries: `test` for `data.test`.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or("test")
    }
}

/// The accuracy of one held-out evaluation.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// The held-out set: `test` for `data.test`, else its name in `data.held_out`.
    pub set: String,
    pub label: String,
    pub samples: usize,
    /// Samples whose greedy answer was correct.
    pub correct: usize,
    /// With `trainer.eval_samples`: the completions sampled per sample (k), the samples with at
    /// least one correct (pass@k), and the correct ones among all sampled.
    pub sampled: Option<SampledSummary>,
}

impl Evaluation {
    pub fn accuracy(&self) -> f64 {
        self.correct as f64 / self.samples.max(1) as f64
    }

    fn of(set: &str, label: &str, records: &[EvalRecord]) -> Self {
        Self {
            set: set.to_string(),
            label: label.to_string(),
            samples: records.len(),
            correct: records.iter().filter(|r| r.correct).count(),
            sampled: SampledSummary::of(records),
        }
    }
}

impl Trainer {
    /// Answers every sample of every held-out set greedily once per `label` (unless done already):
    /// writes `eval/<label>.jsonl` (`data.test`) and `eval/<name>/<label>.jsonl` (`data.held_out`)
    /// and logs each accuracy. Nothing to do without held-out sets. In a data-parallel run each
    /// rank answers its share ([`Trainer::answer_shared`]).
    pub fn evaluate_once(&mut self, label: &str) -> Result<Vec<Evaluation>, TrainError> {
        let sets: Vec<usize> = (0..self.held_out.len())
            .filter(|&set| !self.held_out[set].data.is_empty())
            .collect();
        if sets.is_empty() || self.state.evaluations.iter().any(|l| l == label) {
            return Ok(Vec::new());
        }
        let mut evaluations = Vec::with_capacity(sets.len());
        for set in sets {
            evaluations.push(self.evaluate_set(set, label)?);
        }
        self.state.evaluations.push(label.to_string());
        Ok(evaluations)
    }

    /// [`Self::evaluate_once`] on the held-out set at `set`.
    fn evaluate_set(&mut self, set: usize, label: &str) -> Result<Evaluation, TrainError> {
        let indices: Vec<usize> = (0..self.held_out[set].data.len()).collect();
        let (records, answered) = self.answer_shared("held-out answers", &indices, |t, _, chunk| {
            t.eval_chunk(set, label, chunk)
        })?;
        let name = self.held_out[set].display_name().to_string();
        // The set is named where the run has more than one.
        let set_name = match self.held_out.len() {
            1 => String::new(),
            _ => format!(" ({name})"),
        };
        if self.world_size() > 1 {
            eprintln!(
                "rank {} of {}: answered {answered} of {} held-out samples ({label}){set_name}",
                self.rank(),
                self.world_size(),
                records.len()
            );
        }
        let evaluation = Evaluation::of(&name, label, &records);
        self.evaluations.push(evaluation.clone());
        if !self.writes() {
            // Every rank holds every answer; rank 0 writes them.
            return Ok(evaluation);
        }
        let path = eval_file(&self.run_dir, self.held_out[set].name.as_deref(), label);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        write_file(&path, &jsonl_bytes(&records)?)?;
        eprintln!(
            "held-out {label}{set_name}: {}/{} correct ({:.1}%)",
            evaluation.correct,
            evaluation.samples,
            100.0 * evaluation.accuracy()
        );
        if let Some(s) = evaluation.sampled {
            eprintln!(
                "held-out {label}{set_name}, {} samples each at temperature {}: pass@{} {}/{} ({:.1}%), {:.1}% of all sampled correct",
                s.k,
                self.temperature(),
                s.k,
                s.pass_at_k,
                evaluation.samples,
                100.0 * s.pass_rate(),
                100.0 * s.correct as f64 / s.completions.max(1) as f64
            );
        }
        Ok(evaluation)
    }

    /// The curve point of `phase` (`sft` or `grpo`) after its step `step`, when
    /// `trainer.held_out_freq` asks for one there: every held-out set answered, labelled
    /// `<phase>-step-NNNNNN`.
    pub(super) fn evaluate_curve_point(&mut self, phase: &str, step: u64) -> Result<(), TrainError> {
        let every = u64::from(self.cfg.trainer.held_out_freq);
        if every > 0 && step.is_multiple_of(every) {
            self.evaluate_once(&format!("{phase}-step-{step:06}"))?;
        }
        Ok(())
    }

    /// The evaluation record of a held-out sample's greedy answer: the answer placed in original
    /// pixels the way the run's reward spec reads it, scored by the set's scorer (its own reward, or
    /// the run's).
    fn eval_record(&self, set: usize, group: &Group) -> Result<EvalRecord, TrainError> {
        let data = &self.held_out[set].data;
        let sample = &data.samples[group.index];
        let (trajectory, scored) = match (group.completions.first(), group.records.first()) {
            (Some(c), Some(r)) => (c, r),
            _ => return Err(setup(format!("sample {}: no answer to evaluate", sample.id))),
        };
        let record = self
            .inference
            .eval_record(sample, &data.base, &group.prompt, trajectory);
        Ok(EvalRecord {
            target_size: scored.target_size,
            correct: scored.correct == Some(true),
            reward: scored.reward,
            confidence: scored.confidence,
            tool_calls: scored.tool_calls,
            tool_calls_ok: scored.tool_calls_ok,
            ..record
        })
    }

    /// The records of one batch of test samples: the greedy answers and, with
    /// `trainer.eval_samples`, how many of k sampled answers were correct.
    fn eval_chunk(
        &mut self,
        set: usize,
        label: &str,
        chunk: &[usize],
    ) -> Result<Vec<EvalRecord>, TrainError> {
        let split = Split::HeldOut(set);
        let greedy = self.sample_groups(chunk, 0, split)?;
        let k = self.cfg.trainer.eval_samples as usize;
        let mut sampled = match k {
            0 => Vec::new(),
            _ => {
                let seed = keyed(self.cfg.trainer.seed, &self.sampling_key(set, label, chunk[0]));
                self.sample_groups_with(chunk, seed, split, k, self.temperature(), 0)?
            }
        }
        .into_iter()
        .peekable();
        let mut records = Vec::with_capacity(greedy.len());
        for group in greedy {
            let mut record = self.eval_record(set, &group)?;
            // Both lists follow `chunk`'s order and skip the same unreadable samples.
            if let Some(s) = sampled.next_if(|s| s.index == group.index) {
                record.sampled = Some(SampledAnswers {
                    n: s.records.len() as u32,
                    correct: s.records.iter().filter(|r| r.correct == Some(true)).count() as u32,
                });
            }
            records.push(record);
        }
        fault::point(fault::EVAL);
        Ok(records)
    }

    /// The key of the sampling seed of a held-out chunk starting at sample `first`: `data.test`'s as
    /// before there were other sets, so its pass@k answers stay the same.
    fn sampling_key(&self, set: usize, label: &str, first: usize) -> String {
        match &self.held_out[set].name {
            None => format!("eval {label} {first}"),
            Some(name) => format!("eval {name} {label} {first}"),
        }
    }

    /// Greedy accuracy and mean reward on the fixed validation subsample, answered in shares.
    pub(super) fn validate(&mut self) -> Result<(f64, f64), TrainError> {
        let t = &self.cfg.trainer;
        let indices = fixed_subsample(self.val.len(), t.val_samples as usize, t.seed);
        let (scores, _) = self.answer_shared("validation scores", &indices, |t, _, chunk| {
            let groups = t.sample_groups(chunk, 0, Split::Val)?;
            Ok(groups
                .into_iter()
                .flat_map(|g| g.records)
                .map(|r| (r.correct == Some(true), r.reward))
                .collect())
        })?;
        let n = scores.len().max(1) as f64;
        let correct = scores.iter().filter(|(correct, _)| *correct).count() as f64;
        let reward: f64 = scores.iter().map(|(_, reward)| reward).sum();
        Ok((correct / n, reward / n))
    }

    /// Runs `answer` on this rank's share of `indices` and returns every rank's results, in
    /// `indices`' order, on every rank, with how many this rank answered. `indices` is cut into
    /// batches of `rollout.prompts_per_step` as one process cuts it, and each rank takes a
    /// contiguous run of whole batches ([`batch_share`]): every batch is the one a single process
    /// runs, and `answer` gets it with its number among all the batches (what seeds a batch's
    /// sampling), so the answers do not depend on the world size, and every rank computes the same
    /// metrics from them (early stopping is decided alike everywhere). The samples skipped travel
    /// with the results, so that every rank counts them as one process does. Every rank gathers
    /// once, whatever its share.
    pub(super) fn answer_shared<R: Serialize + DeserializeOwned>(
        &mut self,
        what: &'static str,
        indices: &[usize],
        mut answer: impl FnMut(&mut Self, usize, &[usize]) -> Result<Vec<R>, TrainError>,
    ) -> Result<(Vec<R>, usize), TrainError> {
        let batch = self.cfg.rollout.prompts_per_step.max(1) as usize;
        let mine = batch_share(indices.len(), batch, self.rank(), self.world_size());
        let first = mine.start / batch;
        let mut results = Vec::new();
        for (c, chunk) in indices[mine].chunks(batch).enumerate() {
            results.extend(answer(self, first + c, chunk)?);
        }
        let answered = results.len();
        let skipped = self.take_unshared_skips();
        let Some(dp) = self.dp.as_mut() else {
            return Ok((results, answered));
        };
        let all = dp.gather(what, &(results, skipped))?;
        let (results, skipped): (Vec<Vec<R>>, Vec<_>) = all.into_iter().unzip();
        self.merge_skips(skipped);
        Ok((results.into_iter().flatten().collect(), answered))
    }

    pub(super) fn track_best(&mut self, accuracy: f64, reward: f64) {
        let t = &self.cfg.trainer;
        // The config allows exactly these two names (`EARLY_STOPPING_METRICS`).
        let value = if t.early_stopping_metric == "val/reward" {
            reward
        } else {
            accuracy
        };
        let better = match (self.state.best, t.early_stopping_mode) {
            (None, _) => true,
            (Some(best), EarlyStoppingMode::Max) => value > best,
            (Some(best), EarlyStoppingMode::Min) => value < best,
        };
        if better {
            self.state.best = Some(value);
            self.state.validations_without_gain = 0;
        } else {
            self.state.validations_without_gain += 1;
        }
    }

    pub(super) fn early_stop(&self) -> Option<Ending> {
        let t = &self.cfg.trainer;
        let patience = t.early_stopping_patience;
        (patience > 0 && self.state.validations_without_gain >= patience).then(|| Ending::EarlyStopped {
            metric: t.early_stopping_metric.clone(),
            best: self.state.best.unwrap_or(f64::NAN),
        })
    }
}

/// Records as JSONL, one compact object per line, as `JsonlLog` writes them.
fn jsonl_bytes<T: Serialize>(records: &[T]) -> Result<Vec<u8>, TrainError> {
    let mut bytes = Vec::new();
    for record in records {
        serde_json::to_writer(&mut bytes, record).map_err(setup)?;
        bytes.push(b'\n');
    }
    Ok(bytes)
}
