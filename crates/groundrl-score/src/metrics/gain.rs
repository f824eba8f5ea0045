//! Is a held-out accuracy change real? Intervals for the before/after comparison of one run and for
//! the mean over runs of several seeds.
//!
//! - One run: the same test items are answered before and after training, so the gain is the mean
//!   of per-item differences d_i in {-1, 0, 1}; its 95% interval is the normal one on that mean
//!   (mean ± 1.96 s / sqrt(n)), which is tighter than comparing two independent accuracies because
//!   items both answers get right (or wrong) cancel.
//! - Several seeds: each seed's gain is one observation of what the recipe does; the mean's 95%
//!   interval is Student's t with S - 1 degrees of freedom (S = 3: t = 4.303), which is wide on
//!   purpose: three runs say little about the spread between runs.
//! - One accuracy: Wilson's score interval (Wilson 1927), which stays inside [0, 1] near the ends.

use serde::Serialize;

/// A value with its two-sided 95% interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Interval {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl Interval {
    /// Half the interval's width (for `value ± half_width` when it is symmetric).
    pub fn half_width(&self) -> f64 {
        (self.high - self.low) / 2.0
    }
}

/// The normal distribution's 97.5% quantile.
const Z_975: f64 = 1.959_963_984_540_054;

/// The accuracy change from `before` to `after` on the same items (true = correct), with the 95%
/// interval of the mean paired difference. `None` when the lists are empty or differ in length.
pub fn paired_gain(before: &[bool], after: &[bool]) -> Option<Interval> {
    if before.is_empty() || before.len() != after.len() {
        return None;
    }
    let d: Vec<f64> = before
        .iter()
        .zip(after)
        .map(|(&b, &a)| f64::from(u8::from(a)) - f64::from(u8::from(b)))
        .collect();
    let (mean, sd) = mean_and_sd(&d);
    let half = Z_975 * sd / (d.len() as f64).sqrt();
    Some(Interval {
        value: mean,
        low: mean - half,
        high: mean + half,
    })
}

/// The mean of per-seed values with Student's t 95% interval. `None` for fewer than two values
/// (one run has no spread to measure).
pub fn mean_over_seeds(values: &[f64]) -> Option<Interval> {
    if values.len() < 2 {
        return None;
    }
    let (mean, sd) = mean_and_sd(values);
    let half = t_975(values.len() - 1) * sd / (values.len() as f64).sqrt();
    Some(Interval {
        value: mean,
        low: mean - half,
        high: mean + half,
    })
}

/// Wilson's 95% score interval of `correct` successes in `n` trials. `None` for n = 0.
pub fn wilson(correct: usize, n: usize) -> Option<Interval> {
    if n == 0 {
        return None;
    }
    let (n, p) = (n as f64, correct as f64 / n as f64);
    let z2 = Z_975 * Z_975;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z_975 / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(Interval {
        value: p,
        low: centre - half,
        high: centre + half,
    })
}

/// Mean and sample standard deviation (n - 1) of at least one value; the deviation of one value is 0.
fn mean_and_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// Student's t 97.5% quantile for `df` degrees of freedom (tabulated to 30, then the normal's
/// with the first two terms of its Cornish-Fisher expansion, within 0.001 of the exact value).
fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        _ => {
            let (z, df) = (Z_975, df as f64);
            z + (z.powi(3) + z) / (4.0 * df)
                + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * df * df)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn paired_gain_is_the_mean_difference_with_a_normal_interval() {
        // 4 items: two gained, one lost, one unchanged: d = [1, 1, -1, 0], mean 0.25,
        // sd = sqrt(((0.75)^2 * 2 + 1.25^2 + 0.25^2) / 3) = sqrt(2.75 / 3).
        let before = [false, false, true, true];
        let after = [true, true, false, true];
        let g = paired_gain(&before, &after).unwrap();
        let half = Z_975 * (2.75f64 / 3.0).sqrt() / 2.0;
        assert!(close(g.value, 0.25));
        assert!(close(g.low, 0.25 - half) && close(g.high, 0.25 + half));
        // Identical answers: no change and no width.
        let same = paired_gain(&before, &before).unwrap();
        assert_eq!((same.value, same.low, same.high), (0.0, 0.0, 0.0));
        assert_eq!(paired_gain(&before, &after[..3]), None);
        assert_eq!(paired_gain(&[], &[]), None);
    }

    #[test]
    fn seeds_mean_uses_students_t() {
        // Gains of 0.10, 0.12 and 0.14: mean 0.12, sd 0.02, half = 4.303 * 0.02 / sqrt(3).
        let g = mean_over_seeds(&[0.10, 0.12, 0.14]).unwrap();
        let half = 4.303 * 0.02 / 3f64.sqrt();
        assert!(close(g.value, 0.12));
        assert!(close(g.half_width(), half), "{}", g.half_width());
        assert_eq!(mean_over_seeds(&[0.3]), None);
        assert_eq!(mean_over_seeds(&[]), None);
        // Past the table, the approximation meets the tabulated value's neighbourhood.
        assert!((t_975(31) - 2.040).abs() < 1e-3 && (t_975(120) - 1.980).abs() < 1e-3);
    }

    #[test]
    fn wilson_interval_matches_hand_values() {
        // 50 of 100: centre 0.5, half = 1.96 / (1 + 1.96^2/100) * sqrt(0.0025 + 1.96^2/40000).
        let w = wilson(50, 100).unwrap();
        let z2 = Z_975 * Z_975;
        let half = Z_975 / (1.0 + z2 / 100.0) * (0.0025 + z2 / 40_000.0).sqrt();
        assert!(close(w.low, 0.5 - half) && close(w.high, 0.5 + half));
        assert!((w.low - 0.4038).abs() < 1e-4, "{}", w.low);
        // 0 of 10 stays inside [0, 1].
        let zero = wilson(0, 10).unwrap();
        assert!(close(zero.low, 0.0) && zero.high > 0.0 && zero.high < 0.31);
        assert_eq!(wilson(0, 0), None);
    }
}
