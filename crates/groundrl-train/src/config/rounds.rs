//! `[rounds]`: multi-round curriculum (docs/design.md, "Curriculum"). After each round of GRPO the policy is
//! rolled out on the round's training pool (`ledger_n` rollouts per sample) into a pass-rate ledger; the next
//! round trains on the pool the ledger selects (samples every rollout solved are dropped, partly solved ones
//! kept, unsolved ones kept up to `zero_share` of the pool) at the highest temperature of `temperatures`
//! whose validation accuracy stays within `tolerance` of the best.

use serde::{Deserialize, Serialize};

use super::{ConfigError, ensure};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoundsConfig {
    /// Rounds of GRPO; 1 is a plain run without curriculum. Each round runs `trainer.total_epochs`
    /// over its pool, or `trainer.max_steps` steps. Default 1.
    pub count: u32,
    /// Target share of never-solved (k = 0) samples in the next pool, in [0, 1). Default 0.2.
    pub zero_share: f64,
    /// Rollouts per sample for the end-of-round ledger; 0 takes `rollout.n`. Default 0.
    pub ledger_n: u32,
    /// Temperatures swept on `data.val` before each next round; empty keeps `rollout.temperature`.
    /// Default empty.
    pub temperatures: Vec<f64>,
    /// Accuracy slack of the temperature pick (absolute, 0.01 = one point). Default 0.01.
    pub tolerance: f64,
    /// Roll the policy out on the last round's pool too, into its ledger (and the transition from
    /// the round before), for `groundrl curate` or a later round started by hand. It costs about as
    /// many rollouts as the round's own training; a run that only wants the trained model can skip
    /// it. Default true.
    pub final_ledger: bool,
}

impl Default for RoundsConfig {
    fn default() -> Self {
        Self {
            count: 1,
            zero_share: 0.2,
            ledger_n: 0,
            temperatures: Vec::new(),
            tolerance: 0.01,
            final_ledger: true,
        }
    }
}

impl RoundsConfig {
    /// Rollouts of a sample in a round's ledger and temperature sweep: `ledger_n`, or the rollout's
    /// `n` when that is 0.
    pub fn ledger_samples(&self, rollout_n: u32) -> u32 {
        match self.ledger_n {
            0 => rollout_n,
            n => n,
        }
    }

    /// Whether the run rolls out a ledger: at the end of every round but the last, and at the end
    /// of the last with `final_ledger`.
    pub fn rolls_out_ledger(&self) -> bool {
        self.final_ledger || self.count > 1
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        ensure(self.count >= 1, "rounds.count", "must be at least 1, found 0")?;
        ensure(
            (0.0..1.0).contains(&self.zero_share),
            "rounds.zero_share",
            format!("must be in [0, 1), found {}", self.zero_share),
        )?;
        ensure(
            self.temperatures.iter().all(|t| t.is_finite() && *t > 0.0),
            "rounds.temperatures",
            format!("must all be positive, found {:?}", self.temperatures),
        )?;
        ensure(
            self.tolerance.is_finite() && self.tolerance >= 0.0,
            "rounds.tolerance",
            format!("must be a number >= 0, found {}", self.tolerance),
        )
    }
}
