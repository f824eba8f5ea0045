//! The pass-rate ledger: how many of each sample's rollouts were correct, round after round.
//!
//! One JSON line per (sample, round, rollout batch):
//!
//! ```json
//! {"id":"ss-17","source":"screenspot/web","round":1,"step":12,"n":8,"k":5,"mean_reward":0.61,"temperature":1.1,"rule":"click >= 1","run":"grpo","draw":7301}
//! ```
//!
//! `step` is the training step of the batch (0 for offline rollouts), so a trainer resumed from a
//! checkpoint can drop what it logged after that step ([`drop_after_step`]) before logging it again.
//! `rule` says what "correct" meant ([`rule_text`]): counts made under different rules are not pooled.
//!
//! A sample rolled out several times in one round (several epochs, or a trainer and an offline pass)
//! has several entries; [`Ledger::summary`] pools them into one [`Tally`] (k and n summed, mean
//! reward weighted by n), which is what the next pool and the transition matrices read.
//!
//! The same rollouts logged twice (a command re-run after a crash) must not count twice: an entry is
//! keyed by `run` (who drew: the training run, or the offline command's model), `round`, the sample,
//! `step`, `draw` (the seed its rollouts were sampled with) and the temperature ([`DrawKey`]).
//! [`LedgerWriter`] does not append a key the file already holds, and [`read_ledger`] keeps the first
//! entry of a key and counts the others in [`Ledger::duplicates`]. Entries without a `draw` (written
//! before it existed) are never duplicates.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::CurriculumError;
use crate::atomic::write_atomic;
use crate::telemetry::{CompletionRecord, JsonlLog};
use groundrl_score::data::error::from_json_str;
use groundrl_score::data::{FieldError, RecordError, Sample};

/// `k` correct of `n` rollouts of one sample in one batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// The sample's id (`Sample::id`).
    pub id: String,
    /// The sample's source (`Sample::source`), for per-source reports.
    pub source: String,
    /// The curriculum round (by convention 0 for the model before RL, 1 for the first RL round).
    pub round: u32,
    /// The training step of the batch; 0 for offline rollouts.
    pub step: u64,
    /// Rollouts of the sample in the batch.
    pub n: u32,
    /// Rollouts judged correct by `rule`.
    pub k: u32,
    /// Mean total reward of the `n` rollouts.
    pub mean_reward: f64,
    /// Sampling temperature of the rollouts.
    pub temperature: f64,
    /// The correctness rule, e.g. `click >= 1` ([`rule_text`]).
    pub rule: String,
    /// Who drew the rollouts: the training run's folder name, or the offline command's `--run`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run: String,
    /// The seed the sample's rollouts were drawn with; with the rest of [`DrawKey`], what tells the
    /// same rollouts logged twice from new ones. `None` in ledgers written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw: Option<u64>,
}

/// What identifies one draw of a sample's rollouts: run, round, sample id, step, draw seed and the
/// temperature's bits.
pub type DrawKey = (String, u32, String, u64, u64, u64);

/// What every entry of one rollout batch shares.
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutBatch {
    /// Who draws ([`LedgerEntry::run`]).
    pub run: String,
    pub round: u32,
    /// Training step, or 0 for offline rollouts.
    pub step: u64,
    pub temperature: f64,
    /// The correctness rule ([`rule_text`]).
    pub rule: String,
}

/// The correctness rule as ledgers write it: `click >= 1` for a component and threshold, `reward >=
/// 0.5` when the total reward decides (an empty component, as in `RewardConfig::correct_component`).
pub fn rule_text(component: &str, threshold: f64) -> String {
    let value = if component.is_empty() { "reward" } else { component };
    format!("{value} >= {threshold}")
}

impl LedgerEntry {
    /// The entry of one sample's scored rollouts, drawn with the seed `draw`. Every record must carry
    /// a correctness judgment (`CompletionRecord::correct`); a sample without rollouts has no entry.
    pub fn from_records(
        sample: &Sample,
        batch: &RolloutBatch,
        draw: u64,
        records: &[CompletionRecord],
    ) -> Result<Self, CurriculumError> {
        let what = || format!("sample {}", sample.id);
        let mut k = 0u32;
        for (i, record) in records.iter().enumerate() {
            match record.correct {
                Some(correct) => k += u32::from(correct),
                None => {
                    return Err(CurriculumError::invalid(
                        what(),
                        format!("rollout {i} was not judged"),
                    ));
                }
            }
        }
        let n = u32::try_from(records.len())
            .map_err(|_| CurriculumError::invalid(what(), "more than 2^32 rollouts"))?;
        let entry = Self {
            id: sample.id.clone(),
            source: sample.source.clone(),
            round: batch.round,
            step: batch.step,
            n,
            k,
            mean_reward: records.iter().map(|r| r.reward).sum::<f64>() / f64::from(n.max(1)),
            temperature: batch.temperature,
            rule: batch.rule.clone(),
            run: batch.run.clone(),
            draw: Some(draw),
        };
        entry
            .validate()
            .map_err(|e| CurriculumError::invalid(what(), format!("{}: {}", e.field, e.problem)))?;
        Ok(entry)
    }

    /// The entry's [`DrawKey`]; `None` without a `draw`.
    pub fn key(&self) -> Option<DrawKey> {
        let draw = self.draw?;
        let (run, id) = (self.run.clone(), self.id.clone());
        Some((run, self.round, id, self.step, draw, self.temperature.to_bits()))
    }

    /// Checks what the summaries rely on, naming the first bad field.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.id.is_empty() {
            return Err(FieldError::new("id", "is empty"));
        }
        if self.n == 0 {
            return Err(FieldError::new("n", "must be at least 1"));
        }
        if self.k > self.n {
            return Err(FieldError::new(
                "k",
                format!("{} is more than n = {}", self.k, self.n),
            ));
        }
        if !self.mean_reward.is_finite() {
            return Err(FieldError::new(
                "mean_reward",
                format!("{} is not finite", self.mean_reward),
            ));
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            let problem = format!("{} is not a finite number >= 0", self.temperature);
            return Err(FieldError::new("temperature", problem));
        }
        Ok(())
    }
}

/// Appends entries to a ledger file, each batch written and flushed at once, so that a crash loses at
/// most the batch being written; an entry whose [`DrawKey`] the file already holds is not written
/// again.
#[derive(Debug)]
pub struct LedgerWriter {
    log: JsonlLog,
    /// The keys of the entries in the file.
    keys: HashSet<DrawKey>,
}

impl LedgerWriter {
    /// Opens `path` for appending, creating it if needed, and reads the keys it holds.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CurriculumError> {
        let log = JsonlLog::open(path)?;
        let existing = read_ledger(log.path())?;
        let keys = existing.entries.iter().filter_map(LedgerEntry::key).collect();
        Ok(Self { log, keys })
    }

    pub fn path(&self) -> &Path {
        self.log.path()
    }

    /// Checks every entry, then writes in order those whose key is new; returns how many were
    /// already in the file (not written again). Nothing is written if one is invalid.
    pub fn append(&mut self, entries: &[LedgerEntry]) -> Result<usize, CurriculumError> {
        for entry in entries {
            entry.validate().map_err(|e| {
                let what = format!("{}: ledger entry of sample {:?}", self.path().display(), entry.id);
                CurriculumError::invalid(what, format!("{}: {}", e.field, e.problem))
            })?;
        }
        let mut duplicates = 0;
        for entry in entries {
            if entry.key().is_some_and(|key| !self.keys.insert(key)) {
                duplicates += 1;
            } else {
                self.log.append(entry)?;
            }
        }
        Ok(duplicates)
    }
}

/// Replaces the ledger at `path` with `entries` atomically (a crash leaves the old file or the new
/// one): for ledgers written whole, such as a curriculum round's.
pub fn write_ledger(path: &Path, entries: &[LedgerEntry]) -> Result<(), CurriculumError> {
    let mut text = Vec::new();
    for entry in entries {
        entry.validate().map_err(|e| {
            let what = format!("{}: ledger entry of sample {:?}", path.display(), entry.id);
            CurriculumError::invalid(what, format!("{}: {}", e.field, e.problem))
        })?;
        serde_json::to_writer(&mut text, entry)
            .map_err(|e| CurriculumError::io(path, std::io::Error::other(e)))?;
        text.push(b'\n');
    }
    write_atomic(path, &text).map_err(|e| CurriculumError::io(path, e))
}

/// A ledger file as read: its valid entries in file order and the lines that had to be skipped.
#[derive(Debug, Default, PartialEq)]
pub struct Ledger {
    pub path: PathBuf,
    pub entries: Vec<LedgerEntry>,
    /// One error per bad line (`file: line N: field: problem`).
    pub skipped: Vec<RecordError>,
    /// Entries left out because an earlier one has their [`DrawKey`] (the same rollouts logged twice).
    pub duplicates: usize,
}

/// Reads a ledger; a line that is not a valid entry is skipped and listed in [`Ledger::skipped`] (a
/// crash can leave the last line cut short), and a second entry of a [`DrawKey`] is left out and
/// counted in [`Ledger::duplicates`]. Blank lines are allowed.
pub fn read_ledger(path: &Path) -> Result<Ledger, CurriculumError> {
    let file = File::open(path).map_err(|e| CurriculumError::io(path, e))?;
    let mut ledger = Ledger {
        path: path.to_path_buf(),
        ..Ledger::default()
    };
    let mut keys = HashSet::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| CurriculumError::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        match parse_line(&line) {
            Ok(entry) if entry.key().is_some_and(|key| !keys.insert(key)) => ledger.duplicates += 1,
            Ok(entry) => ledger.entries.push(entry),
            Err(e) => ledger.skipped.push(e.at(path, format!("line {}", i + 1))),
        }
    }
    Ok(ledger)
}

fn parse_line(line: &str) -> Result<LedgerEntry, FieldError> {
    let entry: LedgerEntry = from_json_str(line)?;
    entry.validate()?;
    Ok(entry)
}

/// Rewrites the ledger at `path` without the entries of `round` logged after training step `step`;
/// returns how many were dropped. A trainer resumed from the checkpoint of step `step` calls it before
/// logging those steps again. Lines that are not valid entries are kept as they are (the reader reports
/// them); the file is replaced atomically.
pub fn drop_after_step(path: &Path, round: u32, step: u64) -> Result<usize, CurriculumError> {
    let io = |e| CurriculumError::io(path, e);
    let text = std::fs::read_to_string(path).map_err(io)?;
    let mut kept = String::with_capacity(text.len());
    let mut dropped = 0;
    for line in text.lines() {
        match parse_line(line) {
            Ok(entry) if entry.round == round && entry.step > step => dropped += 1,
            _ => {
                kept.push_str(line);
                kept.push('\n');
            }
        }
    }
    if dropped > 0 {
        write_atomic(path, kept.as_bytes()).map_err(io)?;
    }
    Ok(dropped)
}

/// How a sample fared in a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every rollout correct (k = n): nothing left to learn; the next pool drops it.
    Solved,
    /// Some rollouts correct (0 < k < n): the GRPO signal; the next pool keeps it.
    Partial,
    /// No rollout correct (k = 0): hard, or ambiguous and noisy; the next pool keeps a share of them.
    Unsolved,
}

/// One sample's entries of a round, pooled.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tally {
    pub source: String,
    /// Rollouts, summed over the entries.
    pub n: u64,
    /// Correct rollouts, summed over the entries.
    pub k: u64,
    /// Mean reward over all `n` rollouts (the entries' means weighted by their n).
    pub mean_reward: f64,
    /// How many entries were pooled.
    pub entries: u32,
}

impl Tally {
    pub fn outcome(&self) -> Outcome {
        if self.k == self.n {
            Outcome::Solved
        } else if self.k == 0 {
            Outcome::Unsolved
        } else {
            Outcome::Partial
        }
    }
}

/// Every sample of one round, its entries pooled.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoundSummary {
    pub round: u32,
    /// The correctness rule all its entries share.
    pub rule: String,
    /// By sample id.
    pub samples: BTreeMap<String, Tally>,
}

impl Ledger {
    /// The rounds that have entries, in increasing order.
    pub fn rounds(&self) -> BTreeSet<u32> {
        self.entries.iter().map(|e| e.round).collect()
    }

    /// The highest round with entries.
    pub fn latest_round(&self) -> Option<u32> {
        self.entries.iter().map(|e| e.round).max()
    }

    /// Pools the entries of `round` per sample. Fails when the round has no entries, when its entries
    /// disagree on the correctness rule (their counts would not mean the same thing), or when one
    /// sample id appears with two sources.
    pub fn summary(&self, round: u32) -> Result<RoundSummary, CurriculumError> {
        let what = || format!("{}: round {round}", self.path.display());
        let mut entries = self.entries.iter().filter(|e| e.round == round).peekable();
        let Some(first) = entries.peek() else {
            let rounds: Vec<String> = self.rounds().iter().map(u32::to_string).collect();
            let problem = format!("no entries (rounds in the ledger: {})", list_or_none(&rounds));
            return Err(CurriculumError::invalid(what(), problem));
        };
        let (rule, first_id) = (first.rule.clone(), first.id.clone());
        let mut samples: BTreeMap<String, Tally> = BTreeMap::new();
        let mut reward_sums: BTreeMap<&str, f64> = BTreeMap::new();
        for e in entries {
            if e.rule != rule {
                let problem = format!(
                    "mixes correctness rules {rule:?} (sample {first_id}) and {:?} (sample {})",
                    e.rule, e.id
                );
                return Err(CurriculumError::invalid(what(), problem));
            }
            let tally = samples.entry(e.id.clone()).or_insert_with(|| Tally {
                source: e.source.clone(),
                n: 0,
                k: 0,
                mean_reward: 0.0,
                entries: 0,
            });
            if tally.source != e.source {
                let problem = format!("sample {} has source {:?} and {:?}", e.id, tally.source, e.source);
                return Err(CurriculumError::invalid(what(), problem));
            }
            tally.n += u64::from(e.n);
            tally.k += u64::from(e.k);
            tally.entries += 1;
            *reward_sums.entry(&e.id).or_default() += e.mean_reward * f64::from(e.n);
        }
        for (id, tally) in &mut samples {
            tally.mean_reward = reward_sums[id.as_str()] / tally.n as f64;
        }
        Ok(RoundSummary { round, rule, samples })
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::curriculum::testing::{entry, sample};

    fn ledger(entries: Vec<LedgerEntry>) -> Ledger {
        Ledger {
            path: "l.jsonl".into(),
            entries,
            ..Ledger::default()
        }
    }

    fn record(reward: f64, correct: Option<bool>) -> CompletionRecord {
        CompletionRecord {
            group: 0,
            source: "s".into(),
            reward,
            components: vec![reward],
            correct,
            iou: None,
            response_tokens: 4,
            truncated: false,
            parse_ok: true,
            frame: None,
            confidence: None,
            ..Default::default()
        }
    }

    #[test]
    fn rule_text_names_the_component_or_the_total_reward() {
        assert_eq!(rule_text("click", 1.0), "click >= 1");
        assert_eq!(rule_text("", 0.5), "reward >= 0.5");
    }

    #[test]
    fn an_entry_counts_correct_rollouts_and_averages_rewards() {
        let batch = RolloutBatch {
            run: "r".into(),
            round: 2,
            step: 7,
            temperature: 1.4,
            rule: "click >= 1".into(),
        };
        let records = [
            record(1.0, Some(true)),
            record(0.25, Some(false)),
            record(0.5, Some(true)),
            record(0.25, Some(false)),
        ];
        let e = LedgerEntry::from_records(&sample("a", "web"), &batch, 31, &records).unwrap();
        assert_eq!((e.n, e.k, e.round, e.step), (4, 2, 2, 7));
        assert_eq!((e.run.as_str(), e.draw), ("r", Some(31)));
        assert_eq!(e.mean_reward, 0.5);
        assert_eq!((e.source.as_str(), e.temperature), ("web", 1.4));

        let unjudged = [record(1.0, Some(true)), record(0.0, None)];
        let err = LedgerEntry::from_records(&sample("a", "web"), &batch, 31, &unjudged).unwrap_err();
        assert_eq!(err.to_string(), "sample a: rollout 1 was not judged");
        let err = LedgerEntry::from_records(&sample("a", "web"), &batch, 31, &[]).unwrap_err();
        assert_eq!(err.to_string(), "sample a: n: must be at least 1");
    }

    #[test]
    fn written_entries_read_back_and_bad_lines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let mut writer = LedgerWriter::open(&path).unwrap();
        let good = [entry("a", "web", 1, 8, 3, 0.5), entry("b", "web", 1, 8, 8, 1.0)];
        writer.append(&good).unwrap();
        let err = writer.append(&[entry("c", "web", 1, 8, 1, 0.1), entry("d", "web", 1, 4, 5, 0.1)]);
        assert!(
            err.unwrap_err()
                .to_string()
                .ends_with("sample \"d\": k: 5 is more than n = 4")
        );
        drop(writer);
        let mut text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "nothing of a refused batch is written");
        text.push_str("\n{\"id\":\"e\",\"source\":\"web\",\"round\":\"one\"}\n");
        text.push_str(&serde_json::to_string(&entry("f", "web", 1, 0, 0, 0.0)).unwrap());
        text.push_str("\n{\"id\":\"g\",\"sou");
        std::fs::write(&path, text).unwrap();

        let read = read_ledger(&path).unwrap();
        assert_eq!(read.entries, good);
        let problems: Vec<(String, String)> = read
            .skipped
            .iter()
            .map(|e| (e.record.clone(), e.field.clone()))
            .collect();
        assert_eq!(
            problems,
            [
                ("line 4".to_string(), "round".to_string()),
                ("line 5".to_string(), "n".to_string()),
                ("line 6".to_string(), "record".to_string())
            ]
        );
        assert!(
            read.skipped[0]
                .to_string()
                .starts_with(&format!("{}: line 4: round:", path.display()))
        );
    }

    #[test]
    fn the_same_draw_logged_twice_counts_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let drawn = |id, draw| LedgerEntry {
            run: "r".into(),
            draw: Some(draw),
            ..entry(id, "web", 1, 8, 2, 0.25)
        };
        let mut writer = LedgerWriter::open(&path).unwrap();
        assert_eq!(writer.append(&[drawn("a", 1), drawn("b", 1)]).unwrap(), 0);
        drop(writer);
        // Re-run after a crash: the first two draws are there already; a new seed is a new draw.
        let mut writer = LedgerWriter::open(&path).unwrap();
        let again = [drawn("a", 1), drawn("b", 1), drawn("c", 1), drawn("a", 2)];
        assert_eq!(writer.append(&again).unwrap(), 2);
        drop(writer);
        let mut text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 4);
        // A line copied by another writer, and two entries without a draw (never duplicates).
        let line = |e: &LedgerEntry| serde_json::to_string(e).unwrap() + "\n";
        text += &line(&drawn("b", 1));
        text += &line(&entry("z", "web", 1, 8, 1, 0.0)).repeat(2);
        std::fs::write(&path, text).unwrap();
        let read = read_ledger(&path).unwrap();
        assert_eq!((read.entries.len(), read.duplicates), (6, 1));
        let summary = read.summary(1).unwrap();
        let tally = |id: &str| (summary.samples[id].n, summary.samples[id].entries);
        assert_eq!(
            [tally("a"), tally("b"), tally("c"), tally("z")],
            [(16, 2), (8, 1), (8, 1), (16, 2)]
        );
    }

    #[test]
    fn a_summary_pools_a_samples_entries_of_one_round() {
        let l = ledger(vec![
            entry("a", "web", 1, 8, 2, 0.25),
            entry("b", "app", 1, 8, 0, 0.0),
            entry("a", "web", 1, 4, 4, 1.0),
            entry("a", "web", 2, 8, 8, 1.0),
        ]);
        assert_eq!(l.rounds(), BTreeSet::from([1, 2]));
        assert_eq!(l.latest_round(), Some(2));
        let s = l.summary(1).unwrap();
        assert_eq!(s.rule, "click >= 1");
        let a = &s.samples["a"];
        // k and n summed; mean reward (8 * 0.25 + 4 * 1.0) / 12 = 0.5.
        assert_eq!((a.n, a.k, a.mean_reward, a.entries), (12, 6, 0.5, 2));
        assert_eq!(a.outcome(), Outcome::Partial);
        assert_eq!(s.samples["b"].outcome(), Outcome::Unsolved);
        assert_eq!(l.summary(2).unwrap().samples["a"].outcome(), Outcome::Solved);
        assert_eq!(
            l.summary(3).unwrap_err().to_string(),
            "l.jsonl: round 3: no entries (rounds in the ledger: 1, 2)"
        );
    }

    #[test]
    fn a_summary_refuses_mixed_rules_and_sources() {
        let mut other_rule = entry("b", "web", 1, 8, 1, 0.1);
        other_rule.rule = "reward >= 0.5".into();
        let l = ledger(vec![entry("a", "web", 1, 8, 1, 0.1), other_rule]);
        assert_eq!(
            l.summary(1).unwrap_err().to_string(),
            "l.jsonl: round 1: mixes correctness rules \"click >= 1\" (sample a) and \"reward >= 0.5\" (sample b)"
        );
        let l = ledger(vec![
            entry("a", "web", 1, 8, 1, 0.1),
            entry("a", "app", 1, 8, 1, 0.1),
        ]);
        assert_eq!(
            l.summary(1).unwrap_err().to_string(),
            "l.jsonl: round 1: sample a has source \"web\" and \"app\""
        );
    }

    #[test]
    fn a_resumed_trainer_drops_the_entries_after_its_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let at = |round, step| LedgerEntry {
            step,
            ..entry("a", "web", round, 8, 1, 0.1)
        };
        let mut writer = LedgerWriter::open(&path).unwrap();
        writer.append(&[at(1, 9), at(2, 3), at(2, 4), at(2, 5)]).unwrap();
        drop(writer);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"id\":\"cut sh");
        std::fs::write(&path, &text).unwrap();

        assert_eq!(drop_after_step(&path, 2, 3).unwrap(), 2);
        let read = read_ledger(&path).unwrap();
        let kept: Vec<(u32, u64)> = read.entries.iter().map(|e| (e.round, e.step)).collect();
        assert_eq!(kept, [(1, 9), (2, 3)]);
        assert_eq!(
            read.skipped.len(),
            1,
            "the cut line is kept for the reader to report"
        );
        assert_eq!(drop_after_step(&path, 2, 3).unwrap(), 0);
    }
}
