//! From the rewards of a step's completions to their advantages: GRPO's group baseline, Dr.GRPO's
//! variant without the std division, and DAPO's reward-side tools (dynamic sampling's informative
//! groups, overlong shaping and filtering). Formulas: DeepSeekMath (arXiv 2402.03300), Dr.GRPO
//! (arXiv 2503.20783), DAPO (arXiv 2503.14476); docs/design.md.
//!
//! A group is the completions sampled for one prompt; every token of a completion shares its
//! advantage. Advantages are computed on the host in f64: a step has at most a few hundred rewards.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How a completion's reward becomes its advantage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Estimator {
    /// GRPO (DeepSeekMath): `(r - mean) / (std + eps)` over the group.
    #[default]
    Grpo,
    /// Dr.GRPO (arXiv 2503.20783): `r - mean`, no std division, which would up-weight groups whose
    /// rewards barely differ (too easy or too hard prompts).
    DrGrpo,
}

/// The `advantage` section of the training configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdvantageConfig {
    /// `grpo` or `dr_grpo`.
    pub estimator: Estimator,
    /// Added to the group's std before dividing (GRPO only); verl's 1e-6 (TRL uses 1e-4).
    pub std_eps: f64,
    /// Bessel's correction (divide by n - 1) in the group's std, as TRL does; verl and the default
    /// divide by n.
    pub unbiased_std: bool,
    /// DAPO's treatment of completions that reach the length budget.
    pub overlong: OverlongConfig,
}

impl Default for AdvantageConfig {
    fn default() -> Self {
        Self {
            estimator: Estimator::Grpo,
            std_eps: 1e-6,
            unbiased_std: false,
            overlong: OverlongConfig::default(),
        }
    }
}

impl AdvantageConfig {
    /// Checks ranges; the error names the key.
    pub fn validate(&self) -> Result<(), AdvantageError> {
        if !(self.std_eps.is_finite() && self.std_eps >= 0.0) {
            return Err(AdvantageError::Config {
                key: "advantage.std_eps",
                problem: format!("must be a finite number >= 0, got {}", self.std_eps),
            });
        }
        self.overlong.validate()
    }
}

/// What happens to a completion that runs into the length budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverlongMode {
    /// Nothing.
    #[default]
    Off,
    /// Truncated completions (no end of sequence within the budget) are left out of the loss: their
    /// reward judges an unfinished answer.
    Filter,
    /// DAPO's soft overlong punishment: a penalty growing linearly over the last `buffer` tokens of
    /// the budget is added to the reward.
    Penalty,
}

/// DAPO's overlong filtering and soft overlong punishment (arXiv 2503.14476 §3.4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OverlongConfig {
    /// `off`, `filter` or `penalty`.
    pub mode: OverlongMode,
    /// Length of the penalty zone at the end of the budget, in tokens; must be > 0 with `penalty`
    /// (DAPO: a fifth of the budget, 4096 of 20480).
    pub buffer: usize,
    /// The penalty of a completion that uses the whole budget (DAPO: 1).
    pub factor: f64,
}

impl Default for OverlongConfig {
    fn default() -> Self {
        Self {
            mode: OverlongMode::Off,
            buffer: 0,
            factor: 1.0,
        }
    }
}

impl OverlongConfig {
    /// Checks ranges; the error names the key.
    pub fn validate(&self) -> Result<(), AdvantageError> {
        if self.mode == OverlongMode::Penalty && self.buffer == 0 {
            return Err(AdvantageError::Config {
                key: "advantage.overlong.buffer",
                problem: "must be > 0 when mode is `penalty`".into(),
            });
        }
        if !(self.factor.is_finite() && self.factor >= 0.0) {
            return Err(AdvantageError::Config {
                key: "advantage.overlong.factor",
                problem: format!("must be a finite number >= 0, got {}", self.factor),
            });
        }
        Ok(())
    }

    /// What to add to the reward of a completion of `len` tokens under a budget of `max_len`: the
    /// [`overlong_penalty`] in `penalty` mode, 0 otherwise.
    pub fn reward_shaping(&self, len: usize, max_len: usize) -> f64 {
        match self.mode {
            OverlongMode::Penalty => overlong_penalty(len, max_len, self.buffer, self.factor),
            OverlongMode::Off | OverlongMode::Filter => 0.0,
        }
    }

    /// Whether a completion's tokens count in the loss: in `filter` mode a truncated one does not
    /// (the caller zeroes its row of the loss mask).
    pub fn counts_in_loss(&self, truncated: bool) -> bool {
        !(self.mode == OverlongMode::Filter && truncated)
    }
}

/// DAPO's soft overlong punishment of a completion of `len` tokens under a budget of `max_len`:
/// 0 up to `max_len - buffer` tokens, then falling linearly to `-factor` at `max_len`:
/// `min(-(len - (max_len - buffer)) / buffer * factor, 0)`. A `len` past the budget (which the
/// rollout never produces) counts as `max_len`, as in the paper; `buffer == 0` means no zone (0).
pub fn overlong_penalty(len: usize, max_len: usize, buffer: usize, factor: f64) -> f64 {
    let zone_start = max_len.saturating_sub(buffer);
    if buffer == 0 || len <= zone_start {
        return 0.0;
    }
    let excess = len.min(max_len) - zone_start;
    -(excess as f64) / buffer as f64 * factor
}

/// Bad rewards or group ids handed to the advantage functions, or a bad `advantage` section.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AdvantageError {
    #[error("{rewards} rewards but {groups} group ids: one group id per completion")]
    Lengths { rewards: usize, groups: usize },
    #[error("reward of completion {index} is {value}: rewards must be finite")]
    NonFinite { index: usize, value: f64 },
    #[error("`{key}` {problem}")]
    Config { key: &'static str, problem: String },
}

/// Each completion's advantage: its reward against the other completions of its group
/// (`group_of[i]` is completion i's group id; a group's members need not be adjacent).
///
/// A group of one gets advantage 0. verl instead takes mean 0 and std 1 for it, which makes the raw
/// reward the advantage: with rewards in [0, 1] that pushes up every lone completion, good or bad,
/// since there is no peer to compare it with. We take "no peers, no signal", as for a group whose
/// rewards are all equal.
pub fn group_advantages(
    rewards: &[f64],
    group_of: &[usize],
    cfg: &AdvantageConfig,
) -> Result<Vec<f64>, AdvantageError> {
    cfg.validate()?;
    let mut advantages = vec![0.0; rewards.len()];
    for members in groups(rewards, group_of)?.values() {
        let n = members.len();
        if n == 1 {
            continue;
        }
        let mean = members.iter().map(|&i| rewards[i]).sum::<f64>() / n as f64;
        let squares = members.iter().map(|&i| (rewards[i] - mean).powi(2)).sum::<f64>();
        let dof = if cfg.unbiased_std { n - 1 } else { n };
        let std = (squares / dof as f64).sqrt();
        for &i in members {
            advantages[i] = match cfg.estimator {
                Estimator::Grpo => (rewards[i] - mean) / (std + cfg.std_eps),
                Estimator::DrGrpo => rewards[i] - mean,
            };
        }
    }
    Ok(advantages)
}

/// For each completion, whether its group can teach anything: false when every reward of the group
/// is exactly equal (all advantages are then 0). DAPO's dynamic sampling keeps only informative
/// groups and samples more prompts until the batch is full.
pub fn informative_groups(rewards: &[f64], group_of: &[usize]) -> Result<Vec<bool>, AdvantageError> {
    let mut informative = vec![false; rewards.len()];
    for members in groups(rewards, group_of)?.values() {
        let first = rewards[members[0]];
        let varied = members.iter().any(|&i| rewards[i] != first);
        for &i in members {
            informative[i] = varied;
        }
    }
    Ok(informative)
}

/// The completions of each group id, in order, after checking the inputs.
fn groups(rewards: &[f64], group_of: &[usize]) -> Result<BTreeMap<usize, Vec<usize>>, AdvantageError> {
    if rewards.len() != group_of.len() {
        return Err(AdvantageError::Lengths {
            rewards: rewards.len(),
            groups: group_of.len(),
        });
    }
    if let Some(index) = rewards.iter().position(|r| !r.is_finite()) {
        return Err(AdvantageError::NonFinite {
            index,
            value: rewards[index],
        });
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, &g) in group_of.iter().enumerate() {
        groups.entry(g).or_default().push(i);
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() < 1e-9, "item {i}: {g} vs {w} ({got:?})");
        }
    }

    fn config(estimator: Estimator, unbiased_std: bool) -> AdvantageConfig {
        AdvantageConfig {
            estimator,
            unbiased_std,
            ..AdvantageConfig::default()
        }
    }

    #[test]
    fn grpo_divides_by_the_biased_std() {
        // Rewards 1, 0, 0, 1: mean 0.5; squared deviations 4 x 0.25 = 1; biased var 1/4, std 0.5.
        // Advantages +-0.5 / (0.5 + 1e-6) = +-0.999998000004.
        let a = group_advantages(&[1.0, 0.0, 0.0, 1.0], &[0; 4], &config(Estimator::Grpo, false)).unwrap();
        let unit = 0.5 / (0.5 + 1e-6);
        close(&a, &[unit, -unit, -unit, unit]);
    }

    #[test]
    fn grpo_with_bessel_divides_by_the_unbiased_std() {
        // Rewards 1, 0, 0, 1: unbiased var 1/3, std 0.5773502691896258.
        // Advantages +-0.5 / (0.5773502691896258 + 1e-6).
        let a = group_advantages(&[1.0, 0.0, 0.0, 1.0], &[0; 4], &config(Estimator::Grpo, true)).unwrap();
        let unit = 0.5 / (0.5773502691896258 + 1e-6);
        close(&a, &[unit, -unit, -unit, unit]);
    }

    #[test]
    fn dr_grpo_only_subtracts_the_mean() {
        // Rewards 0.2, 0.4, 0.9: mean 0.5; advantages -0.3, -0.1, 0.4.
        let a = group_advantages(&[0.2, 0.4, 0.9], &[7; 3], &config(Estimator::DrGrpo, false)).unwrap();
        close(&a, &[-0.3, -0.1, 0.4]);
    }

    #[test]
    fn a_group_of_one_and_an_equal_group_get_zero() {
        // Group 3 = {0.7}; group 1 = {0.5, 0.5}: mean 0.5, std 0 -> 0 / (0 + eps) = 0.
        for estimator in [Estimator::Grpo, Estimator::DrGrpo] {
            let a = group_advantages(&[0.7, 0.5, 0.5], &[3, 1, 1], &config(estimator, true)).unwrap();
            close(&a, &[0.0, 0.0, 0.0]);
        }
    }

    #[test]
    fn groups_need_not_be_contiguous() {
        // Group 5 = completions 0, 2 with rewards 1, 0: mean 0.5, biased std 0.5 -> +-0.5/(0.5+eps).
        // Group 2 = completions 1, 3, 4 with rewards 0.3, 0.6, 0.9: mean 0.6; squared deviations
        // 0.09 + 0 + 0.09 = 0.18, biased var 0.06, std 0.24494897427831783 -> (-0.3, 0, 0.3)/(std+eps).
        let a = group_advantages(
            &[1.0, 0.3, 0.0, 0.6, 0.9],
            &[5, 2, 5, 2, 2],
            &config(Estimator::Grpo, false),
        )
        .unwrap();
        let (u, v) = (0.5 / (0.5 + 1e-6), 0.3 / (0.24494897427831783 + 1e-6));
        close(&a, &[u, -v, -u, 0.0, v]);
    }

    #[test]
    fn bad_inputs_are_errors_naming_the_problem() {
        let cfg = AdvantageConfig::default();
        let err = group_advantages(&[1.0, 0.0], &[0], &cfg).unwrap_err();
        assert_eq!(
            err.to_string(),
            "2 rewards but 1 group ids: one group id per completion"
        );
        let err = group_advantages(&[1.0, f64::NAN], &[0, 0], &cfg).unwrap_err();
        assert_eq!(
            err.to_string(),
            "reward of completion 1 is NaN: rewards must be finite"
        );
        let cfg = AdvantageConfig { std_eps: -1.0, ..cfg };
        let err = group_advantages(&[1.0], &[0], &cfg).unwrap_err().to_string();
        assert!(err.starts_with("`advantage.std_eps` must be"), "{err}");
    }

    #[test]
    fn informative_groups_have_differing_rewards() {
        // Group 0 = {1, 1} uniform; group 1 = {0, 1} varied; group 2 = {0.5} alone; group 3 = {0, 0, 0}.
        let keep = informative_groups(
            &[1.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0, 0.0],
            &[0, 1, 0, 2, 3, 1, 3, 3],
        );
        assert_eq!(
            keep.unwrap(),
            [false, true, false, false, false, true, false, false]
        );
    }

    #[test]
    fn overlong_penalty_is_zero_before_the_zone_and_linear_inside() {
        // max_len 100, buffer 20: zone starts after 80 tokens; penalty -(len - 80)/20 * 0.5.
        assert_eq!(overlong_penalty(0, 100, 20, 0.5), 0.0);
        assert_eq!(overlong_penalty(80, 100, 20, 0.5), 0.0);
        assert_eq!(overlong_penalty(81, 100, 20, 0.5), -0.025); // -1/20 * 0.5
        assert_eq!(overlong_penalty(90, 100, 20, 0.5), -0.25); // -10/20 * 0.5
        assert_eq!(overlong_penalty(100, 100, 20, 0.5), -0.5); // -20/20 * 0.5
        assert_eq!(overlong_penalty(130, 100, 20, 0.5), -0.5); // past the budget: as at the budget
        assert_eq!(overlong_penalty(100, 100, 0, 0.5), 0.0); // no zone
    }

    #[test]
    fn overlong_modes_shape_rewards_or_mask_truncations() {
        let penalty = OverlongConfig {
            mode: OverlongMode::Penalty,
            buffer: 4,
            factor: 1.0,
        };
        assert_eq!(penalty.reward_shaping(10, 10), -1.0);
        assert_eq!(penalty.reward_shaping(7, 10), -0.25); // -(7 - 6)/4
        assert!(penalty.counts_in_loss(true));
        let filter = OverlongConfig {
            mode: OverlongMode::Filter,
            ..penalty.clone()
        };
        assert_eq!(filter.reward_shaping(10, 10), 0.0);
        assert!(!filter.counts_in_loss(true));
        assert!(filter.counts_in_loss(false));
        let off = OverlongConfig::default();
        assert_eq!(off.reward_shaping(10, 10), 0.0);
        assert!(off.counts_in_loss(true));
        let err = OverlongConfig { buffer: 0, ..penalty }.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "`advantage.overlong.buffer` must be > 0 when mode is `penalty`"
        );
    }

    #[test]
    fn config_reads_snake_case_names_and_rejects_unknown_keys() {
        let cfg: AdvantageConfig = serde_json::from_str(
            r#"{"estimator": "dr_grpo", "overlong": {"mode": "penalty", "buffer": 16}}"#,
        )
        .unwrap();
        assert_eq!(cfg.estimator, Estimator::DrGrpo);
        assert_eq!(cfg.overlong.mode, OverlongMode::Penalty);
        assert_eq!(
            (cfg.std_eps, cfg.unbiased_std, cfg.overlong.factor),
            (1e-6, false, 1.0)
        );
        let err = serde_json::from_str::<AdvantageConfig>(r#"{"std": 1.0}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `std`"), "{err}");
    }
}
