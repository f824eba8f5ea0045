//! Curriculum rounds (`[rounds]`): what happens between two rounds of GRPO.
//!
//! After round r (ledger round `r`, 1-based) the policy is rolled out on the round's training pool
//! into `rounds/round-r/ledger.jsonl`; from round 2 on, that ledger is compared with the previous
//! one (`rounds/transition-{r-1}-{r}.svg` and `.json`, embedded by the report). Unless r was the last
//! round, the next pool is chosen from the ledger (`rounds/round-{r+1}/pool.jsonl` and its report),
//! the temperature is swept on the validation set when `rounds.temperatures` is set, and training
//! goes on in round r + 1 on the new pool with epochs counted afresh. A pool's image paths are those
//! of `data.train`, read against `data.train`'s folder ([`Trainer::pool_dataset`]): images stay
//! confined to the data's folder as they are in round 1.
//!
//! Everything here is keyed by the step at which the round ended, so redoing it after a resume
//! (from a checkpoint taken before the switch) writes the same files again. Every file is written
//! whole and atomically (a resumed run reads the pool of its round).
//!
//! In a data-parallel run the ledger and the sweep are rolled out in shares of whole batches, each
//! batch seeded by its number in the whole pool or validation subsample, and gathered
//! ([`Trainer::answer_shared`]): every rank holds one process's entries and sweep points, chooses
//! the same next pool and temperature from them in memory, and rank 0 alone writes the files.

use std::path::PathBuf;

use groundrl_core::atomic::{publish_file, temporary_path};
use groundrl_core::curriculum::ledger::{Ledger, LedgerEntry, read_ledger, write_ledger};
use groundrl_core::curriculum::pool::{NextPool, PoolOptions, SourceCounts, next_pool};
use groundrl_core::curriculum::temperature::{SweepPoint, pick_temperature};
use groundrl_core::curriculum::transition::transition;
use groundrl_core::data::jsonl::write_jsonl;
use groundrl_core::rng::keyed;
use groundrl_core::telemetry::CompletionRecord;
use groundrl_score::data::Sample;
use serde::{Deserialize, Serialize};

use super::rollouts::Split;
use super::{TRAINING_ROUND, TrainError, Trainer, io, setup, write_file};
use crate::dataset::{Dataset, fixed_subsample};
use crate::run_folder::{LEDGER_FILE, POOL_FILE, POOL_REPORT_FILE, round_dir, transition_stem};

impl Trainer {
    /// The ledger round number of the current round.
    pub(super) fn ledger_round(&self) -> u32 {
        TRAINING_ROUND + self.state.round
    }

    /// The folder of ledger round `round`.
    fn round_dir(&self, round: u32) -> PathBuf {
        round_dir(&self.run_dir, round)
    }

    /// The pool file of ledger round `round` (round 1 trains on `data.train` itself).
    fn pool_path(&self, round: u32) -> PathBuf {
        self.round_dir(round).join(POOL_FILE)
    }

    /// The ledger file of ledger round `round`.
    fn ledger_path(&self, round: u32) -> PathBuf {
        self.round_dir(round).join(LEDGER_FILE)
    }

    /// The samples of ledger round `round`'s pool as rank 0 wrote them, for a resumed run (every
    /// rank reads it after rank 0 has tidied the run folder: `Trainer::resume_data_parallel`).
    pub(super) fn load_pool(&self, round: u32) -> Result<Dataset, TrainError> {
        let pool = Dataset::load(format!("round {round}'s pool"), &self.pool_path(round))?;
        Ok(self.pool_dataset(pool.samples))
    }

    /// A pool's samples as the train set: their image paths are `data.train`'s, read against its
    /// folder.
    fn pool_dataset(&self, samples: Vec<Sample>) -> Dataset {
        Dataset {
            samples,
            base: Dataset::base_of(&self.cfg.data.train),
            skipped: Vec::new(),
        }
    }

    /// Ends the current round: its ledger, the transition from the previous round, and, unless it
    /// was the last, the next pool and temperature. Returns whether another round starts.
    ///
    /// Every rank of a data-parallel run rolls out its share of the ledger and of the sweep and
    /// ends with all of both ([`Trainer::answer_shared`]), so every rank picks the same pool (same
    /// entries, same seed) and temperature in memory; rank 0 alone writes the files, and no rank
    /// reads what another wrote.
    pub(super) fn end_round(&mut self) -> Result<bool, TrainError> {
        let last = self.state.round + 1 >= self.cfg.rounds.count;
        if last && !self.cfg.rounds.final_ledger {
            return Ok(false);
        }
        let round = self.ledger_round();
        let entries = self.round_ledger(round)?;
        if self.writes() {
            self.write_round_ledger(round, &entries)?;
        }
        if last {
            return Ok(false);
        }
        // The entries as the file holds them: JSON keeps every f64 (float_roundtrip), and each
        // entry has its own draw seed, so reading the file back would drop no duplicate.
        let ledger = Ledger {
            path: self.ledger_path(round),
            entries,
            ..Ledger::default()
        };
        let summary = ledger.summary(round).map_err(setup)?;
        let options = PoolOptions {
            zero_share: self.cfg.rounds.zero_share,
            seed: keyed(self.cfg.trainer.seed, &format!("pool {}", round + 1)),
            ..PoolOptions::default()
        };
        let pool = next_pool(self.train.samples.clone(), &summary, &options).map_err(setup)?;
        if self.writes() {
            self.write_pool(round, &pool)?;
        }
        if pool.samples.is_empty() {
            return Ok(false);
        }
        if !self.cfg.rounds.temperatures.is_empty() {
            self.state.temperature = Some(self.sweep_temperature(round + 1)?);
        }
        self.train = self.pool_dataset(pool.samples);
        self.state.round += 1;
        self.state.round_start_step = self.state.step;
        self.state.epoch = 0;
        self.state.cursor = 0;
        Ok(true)
    }

    /// The ledger entries of `rounds.ledger_n` rollouts on every sample of the round's pool, in the
    /// pool's order, each rank rolling out its share of the batches. A batch's sampling is seeded
    /// by its number in the whole pool, so the entries are one process's on any world size.
    fn round_ledger(&mut self, round: u32) -> Result<Vec<LedgerEntry>, TrainError> {
        let n = self.ledger_n();
        let indices: Vec<usize> = (0..self.train.len()).collect();
        let seed = keyed(self.cfg.trainer.seed, &format!("round {round} ledger"));
        let (entries, _) = self.answer_shared("round ledger entries", &indices, |t, c, chunk| {
            let chunk_seed = keyed(seed, &c.to_string());
            let groups = t.sample_groups_with(chunk, chunk_seed, Split::Train, n, t.temperature(), 0)?;
            t.ledger_entries(&groups, round, t.state.step, chunk_seed)
        })?;
        Ok(entries)
    }

    /// Writes `rounds/round-r/ledger.jsonl` anew and, from round 2 on, the transition from the
    /// round before.
    fn write_round_ledger(&self, round: u32, entries: &[LedgerEntry]) -> Result<(), TrainError> {
        let dir = self.round_dir(round);
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        write_ledger(&self.ledger_path(round), entries).map_err(setup)?;
        if round > TRAINING_ROUND {
            self.write_transition(round)?;
        }
        Ok(())
    }

    /// `rounds/round-{round+1}/pool-report.json` and, unless the pool is empty (which ends the
    /// rounds, said), `pool.jsonl`.
    fn write_pool(&self, round: u32, pool: &NextPool) -> Result<(), TrainError> {
        let dir = self.round_dir(round + 1);
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let report = dir.join(POOL_REPORT_FILE);
        let json = serde_json::to_string_pretty(&pool.report).map_err(setup)?;
        write_file(&report, json.as_bytes())?;
        if pool.samples.is_empty() {
            eprintln!("{}", empty_pool_message(round, &pool.report.total));
            return Ok(());
        }
        let path = self.pool_path(round + 1);
        let tmp = temporary_path(&path);
        write_jsonl(&tmp, &pool.samples).map_err(setup)?;
        publish_file(&tmp, &path).map_err(|e| io(&path, e))?;
        eprintln!(
            "round {round} ended at step {}: next pool of {} samples ({})",
            self.state.step,
            pool.samples.len(),
            path.display()
        );
        Ok(())
    }

    /// `rounds/transition-{round-1}-{round}.json` and `.svg`: how each sample's k moved.
    fn write_transition(&self, round: u32) -> Result<(), TrainError> {
        let summary = |r: u32| {
            read_ledger(&self.ledger_path(r))
                .and_then(|l| l.summary(r))
                .map_err(setup)
        };
        let matrix = transition(&summary(round - 1)?, &summary(round)?).map_err(setup)?;
        let stem = transition_stem(&self.run_dir, round);
        let json = stem.with_extension("json");
        let text = serde_json::to_string_pretty(&matrix).map_err(setup)?;
        write_file(&json, text.as_bytes())?;
        write_file(&stem.with_extension("svg"), matrix.heatmap().svg().as_bytes())
    }

    /// Accuracy of `rounds.ledger_n` rollouts per validation sample (the fixed subsample) at each
    /// temperature of `rounds.temperatures`, each rank rolling out its share of the batches (seeded
    /// by their numbers, as in [`Self::round_ledger`]); picks the highest within the tolerance of
    /// the best. Rank 0 writes `rounds/round-r/temperature.json` and `.svg`.
    fn sweep_temperature(&mut self, round: u32) -> Result<f64, TrainError> {
        let t = &self.cfg.trainer;
        let indices = fixed_subsample(self.val.len(), t.val_samples as usize, t.seed);
        let (n, seed) = (self.ledger_n(), keyed(t.seed, &format!("round {round} sweep")));
        let mut points = Vec::new();
        for temperature in self.cfg.rounds.temperatures.clone() {
            let (groups, _) = self.answer_shared("temperature sweep scores", &indices, |t, c, chunk| {
                let groups =
                    t.sample_groups_with(chunk, keyed(seed, &c.to_string()), Split::Val, n, temperature, 0)?;
                Ok(groups.iter().map(|g| GroupScore::of(&g.records)).collect())
            })?;
            points.push(GroupScore::point(temperature, &groups));
        }
        let sweep = pick_temperature(points, self.cfg.rounds.tolerance).map_err(setup)?;
        if self.writes() {
            let stem = self.round_dir(round).join("temperature");
            let json = stem.with_extension("json");
            let text = serde_json::to_string_pretty(&sweep).map_err(setup)?;
            write_file(&json, text.as_bytes())?;
            write_file(&stem.with_extension("svg"), sweep.line_chart().svg().as_bytes())?;
            eprintln!(
                "round {round}: temperature {} (sweep in {})",
                sweep.picked,
                json.display()
            );
        }
        Ok(sweep.picked)
    }

    fn ledger_n(&self) -> usize {
        self.cfg.rounds.ledger_samples(self.cfg.rollout.n) as usize
    }
}

/// One validation sample's rollouts in a temperature sweep: correct ones, all, and their summed
/// reward (gathered over the ranks, then added up in the samples' order as one process adds them).
#[derive(Serialize, Deserialize)]
struct GroupScore {
    correct: u64,
    total: u64,
    reward: f64,
}

impl GroupScore {
    fn of(records: &[CompletionRecord]) -> Self {
        Self {
            correct: records.iter().filter(|r| r.correct == Some(true)).count() as u64,
            total: records.len() as u64,
            reward: records.iter().map(|r| r.reward).sum(),
        }
    }

    /// The sweep's point at `temperature` from its samples' scores.
    fn point(temperature: f64, scores: &[Self]) -> SweepPoint {
        let (mut correct, mut total, mut reward) = (0, 0, 0.0);
        for s in scores {
            correct += s.correct;
            total += s.total;
            reward += s.reward;
        }
        SweepPoint {
            temperature,
            correct,
            total,
            mean_reward: reward / total.max(1) as f64,
        }
    }
}

/// What ends the rounds when round `round`'s ledger leaves no sample for the next pool. With every
/// source allowed and unseen samples kept, a pool is empty only when no sample was partly solved:
/// then every sample was solved, or the unsolved ones had no partly solved ones to be a share of
/// (`rounds.zero_share`).
fn empty_pool_message(round: u32, counts: &SourceCounts) -> String {
    let why = match (counts.solved, counts.unsolved) {
        (_, 0) => "every sample solved".to_string(),
        (0, unsolved) => format!(
            "all {unsolved} samples unsolved, and unsolved samples are kept only as a share beside \
             partly solved ones"
        ),
        (solved, unsolved) => format!(
            "{solved} samples solved and {unsolved} unsolved, none partly solved, and unsolved samples \
             are kept only as a share beside partly solved ones"
        ),
    };
    format!(
        "round {round}: the next pool is empty ({why}): no round {}",
        round + 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(solved: usize, unsolved: usize) -> SourceCounts {
        SourceCounts {
            data: solved + unsolved,
            solved,
            unsolved,
            ..SourceCounts::default()
        }
    }

    #[test]
    fn empty_pool_message_says_whether_samples_were_solved_or_unsolved() {
        assert_eq!(
            empty_pool_message(1, &counts(5, 0)),
            "round 1: the next pool is empty (every sample solved): no round 2"
        );
        assert_eq!(
            empty_pool_message(2, &counts(0, 4)),
            "round 2: the next pool is empty (all 4 samples unsolved, and unsolved samples are kept \
             only as a share beside partly solved ones): no round 3"
        );
        assert_eq!(
            empty_pool_message(1, &counts(3, 2)),
            "round 1: the next pool is empty (3 samples solved and 2 unsolved, none partly solved, and \
             unsolved samples are kept only as a share beside partly solved ones): no round 2"
        );
    }
}
