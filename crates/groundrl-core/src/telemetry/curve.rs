//! Did the training reward rise and stay up? A run whose reward climbs and then collapses can end
//! worse than it started while its best steps look fine; this check reads the end of the curve.
//!
//! The curve is smoothed by a trailing moving average (window: a tenth of the steps, at least 5),
//! and the run *holds* when the average over its last window is at least the 80th percentile of all
//! its moving averages: the end of the run is among its best fifth.

use serde::Serialize;

/// The verdict on one run's per-step reward (or accuracy) curve.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CurveCheck {
    /// Steps in the moving average.
    pub window: usize,
    /// The moving average over the first and the last window.
    pub start: f64,
    pub end: f64,
    /// The 80th percentile of the moving averages: the bar `end` must reach.
    pub best_fifth: f64,
    pub holds: bool,
}

/// Checks `values` (one per step, in step order); `None` for fewer than two values.
pub fn check_curve(values: &[f64]) -> Option<CurveCheck> {
    if values.len() < 2 {
        return None;
    }
    let window = (values.len() / 10).max(5).min(values.len());
    let averages = moving_average(values, window);
    let mut sorted = averages.clone();
    sorted.sort_by(f64::total_cmp);
    // Nearest rank: the smallest average that at least 80% of the averages do not exceed.
    let rank = ((0.8 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    let best_fifth = sorted[rank - 1];
    let (start, end) = (averages[0], averages[averages.len() - 1]);
    Some(CurveCheck {
        window,
        start,
        end,
        best_fifth,
        holds: end >= best_fifth,
    })
}

/// The means of every `window` consecutive values (`values.len() - window + 1` of them).
pub fn moving_average(values: &[f64], window: usize) -> Vec<f64> {
    values
        .windows(window.max(1))
        .map(|w| w.iter().sum::<f64>() / w.len() as f64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rising_curve_holds_and_a_collapsing_one_does_not() {
        let rising: Vec<f64> = (0..50).map(|i| 0.3 + 0.01 * f64::from(i)).collect();
        let c = check_curve(&rising).unwrap();
        assert_eq!(c.window, 5);
        assert!((c.start - 0.32).abs() < 1e-12 && (c.end - 0.77).abs() < 1e-12);
        assert!(c.holds);
        // Rises to 0.8, then falls back to 0.4 for the last 15 steps.
        let collapsing: Vec<f64> = (0..50)
            .map(|i| if i < 35 { 0.3 + 0.015 * f64::from(i) } else { 0.4 })
            .collect();
        let c = check_curve(&collapsing).unwrap();
        assert!((c.end - 0.4).abs() < 1e-12);
        assert!(!c.holds, "{c:?}");
    }

    #[test]
    fn the_bar_is_the_80th_percentile_of_the_moving_averages() {
        // 100 steps: window 10; a flat curve holds (its end equals every average).
        let flat = vec![0.5; 100];
        let c = check_curve(&flat).unwrap();
        assert_eq!((c.window, c.best_fifth, c.holds), (10, 0.5, true));
        // Averages of 0..10 with window 5 are 2, 3, 4, 5, 6, 7: 80% rank = ceil(4.8) = 5 -> 6.
        let ramp: Vec<f64> = (0..10).map(f64::from).collect();
        let c = check_curve(&ramp).unwrap();
        assert_eq!((c.best_fifth, c.end, c.holds), (6.0, 7.0, true));
        assert_eq!(check_curve(&[1.0]), None);
        assert_eq!(moving_average(&[1.0, 2.0, 3.0], 2), vec![1.5, 2.5]);
    }
}
