//! Samples skipped because they cannot be encoded, scored or given a reference answer: each is
//! said and counted once, however often a run meets it (in later epochs, in every validation, in the
//! held-out evaluations before and after training). A sample that fails fails alike each time, so
//! counting every meeting would give a total that says nothing about the data.

use std::fmt::Display;

use super::{TrainError, Trainer};

/// Which sample, as a key of [`super::RunState::bad_sample_keys`]: its set and its position there.
pub(super) fn key(set: &str, index: usize) -> String {
    format!("{set}#{index}")
}

impl Trainer {
    /// Skips sample `id` (`key`: [`key`]) for `why`: said and counted the first time only. In a
    /// data-parallel run the ranks then exchange what they skipped ([`Self::share_skips`]).
    pub(super) fn skip_sample(&mut self, key: String, id: &str, why: impl Display) {
        if self.state.bad_sample_keys.insert(key.clone()) {
            self.state.bad_samples += 1;
            eprintln!("skipped sample {id}: {why}");
            if self.dp.is_some() {
                self.unshared_skips.push(key);
            }
        }
    }

    /// The samples this rank skipped since it last shared them, handed over for a gather.
    pub(super) fn take_unshared_skips(&mut self) -> Vec<String> {
        std::mem::take(&mut self.unshared_skips)
    }

    /// Counts what the other ranks skipped (`by_rank`: every rank's [`Self::take_unshared_skips`]),
    /// each sample once, so that every rank holds the count one process would.
    pub(super) fn merge_skips(&mut self, by_rank: Vec<Vec<String>>) {
        for key in by_rank.into_iter().flatten() {
            if self.state.bad_sample_keys.insert(key) {
                self.state.bad_samples += 1;
            }
        }
    }

    /// [`Self::take_unshared_skips`] gathered over the ranks and merged; nothing without ranks.
    pub(super) fn share_skips(&mut self) -> Result<(), TrainError> {
        let mine = self.take_unshared_skips();
        let Some(dp) = self.dp.as_mut() else {
            return Ok(());
        };
        let by_rank = dp.gather("skipped samples", &mine)?;
        self.merge_skips(by_rank);
        Ok(())
    }
}
