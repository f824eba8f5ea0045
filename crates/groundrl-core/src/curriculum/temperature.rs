//! Choosing the next round's sampling temperature.
//!
//! A multi-round curriculum raises the temperature each round (say 1.1, then 1.7) for more diverse
//! rollouts, taking the highest temperature where accuracy does not collapse on a validation set
//! (docs/design.md, "Curriculum"). Here that is: sample n
//! rollouts per validation sample at each temperature, and pick the highest temperature whose accuracy
//! is within `tolerance` (absolute, e.g. 0.01 = one point) of the best accuracy of the sweep.

use serde::Serialize;

use super::CurriculumError;
use crate::plot::{LineChart, Marker, Series};

/// Slack for float rounding when comparing an accuracy with `best - tolerance`: counts that are exactly
/// at the tolerance (e.g. 0.74 against 0.75 with 0.01) must pass.
const ROUNDING: f64 = 1e-9;

/// The rollouts of one temperature.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SweepPoint {
    pub temperature: f64,
    /// Correct rollouts.
    pub correct: u64,
    /// Scored rollouts.
    pub total: u64,
    pub mean_reward: f64,
}

impl SweepPoint {
    /// Share of correct rollouts (0 when none was scored; [`pick_temperature`] refuses such points).
    pub fn accuracy(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.correct as f64 / self.total as f64
        }
    }
}

/// A sweep's points in increasing temperature, and the one picked.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sweep {
    pub points: Vec<SweepPoint>,
    pub tolerance: f64,
    pub best_accuracy: f64,
    /// The highest temperature with accuracy >= best_accuracy - tolerance.
    pub picked: f64,
}

/// Sorts the points by temperature and picks the highest temperature whose accuracy is within
/// `tolerance` of the best. Refuses an empty sweep, a point without scored rollouts, a temperature
/// given twice, and a negative or non-finite tolerance.
pub fn pick_temperature(mut points: Vec<SweepPoint>, tolerance: f64) -> Result<Sweep, CurriculumError> {
    if !(tolerance.is_finite() && tolerance >= 0.0) {
        return Err(CurriculumError::invalid(
            "tolerance",
            format!("{tolerance} is not a number >= 0"),
        ));
    }
    if let Some(p) = points.iter().find(|p| p.total == 0 || p.correct > p.total) {
        let problem = format!("{} correct of {} scored rollouts", p.correct, p.total);
        return Err(CurriculumError::invalid(
            format!("temperature {}", p.temperature),
            problem,
        ));
    }
    points.sort_by(|a, b| a.temperature.total_cmp(&b.temperature));
    if let Some(pair) = points.windows(2).find(|w| w[0].temperature == w[1].temperature) {
        let problem = "appears twice in the sweep";
        return Err(CurriculumError::invalid(
            format!("temperature {}", pair[0].temperature),
            problem,
        ));
    }
    let best_accuracy = points.iter().map(SweepPoint::accuracy).fold(0.0, f64::max);
    let within = |p: &&SweepPoint| p.accuracy() >= best_accuracy - tolerance - ROUNDING;
    let Some(picked) = points.iter().rev().find(within).map(|p| p.temperature) else {
        return Err(CurriculumError::invalid("temperature sweep", "no temperatures"));
    };
    Ok(Sweep {
        points,
        tolerance,
        best_accuracy,
        picked,
    })
}

impl Sweep {
    /// Accuracy against temperature on a 0-1 axis, the picked temperature marked.
    pub fn line_chart(&self) -> LineChart {
        let accuracy = |p: &SweepPoint| (p.temperature, p.accuracy());
        let picked = self.points.iter().find(|p| p.temperature == self.picked);
        LineChart {
            title: format!(
                "accuracy by sampling temperature (picked: the highest within {} of the best)",
                self.tolerance
            ),
            x_label: "temperature".into(),
            y_label: "accuracy".into(),
            series: vec![Series::new(
                "accuracy",
                self.points.iter().map(accuracy).collect(),
            )],
            y_range: Some((0.0, 1.0)),
            marker: picked.map(|p| Marker {
                x: p.temperature,
                y: p.accuracy(),
                label: format!("picked {}", p.temperature),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points of 100 rollouts each with the given numbers correct.
    fn sweep(points: &[(f64, u64)]) -> Vec<SweepPoint> {
        points
            .iter()
            .map(|&(temperature, correct)| SweepPoint {
                temperature,
                correct,
                total: 100,
                mean_reward: 0.0,
            })
            .collect()
    }

    fn picked(points: &[(f64, u64)], tolerance: f64) -> f64 {
        pick_temperature(sweep(points), tolerance).unwrap().picked
    }

    #[test]
    fn picks_the_highest_temperature_within_the_tolerance() {
        let points = [(1.0, 75), (1.4, 75), (1.7, 74), (2.0, 60)];
        assert_eq!(picked(&points, 0.01), 1.7, "0.74 is exactly one point below 0.75");
        assert_eq!(
            picked(&points, 0.0),
            1.4,
            "ties at the best: the higher temperature"
        );
        assert_eq!(picked(&points, 0.2), 2.0);
        let s = pick_temperature(sweep(&points), 0.01).unwrap();
        assert_eq!(s.best_accuracy, 0.75);

        let chart = s.line_chart();
        assert_eq!(
            chart.series[0].points,
            [(1.0, 0.75), (1.4, 0.75), (1.7, 0.74), (2.0, 0.6)]
        );
        let marker = chart.marker.unwrap();
        assert_eq!(
            (marker.x, marker.y, marker.label.as_str()),
            (1.7, 0.74, "picked 1.7")
        );
    }

    #[test]
    fn all_equal_picks_the_highest_and_order_does_not_matter() {
        assert_eq!(picked(&[(1.7, 50), (1.0, 50), (1.4, 50)], 0.0), 1.7);
        let s = pick_temperature(sweep(&[(2.0, 10), (1.0, 40), (1.5, 39)]), 0.01).unwrap();
        let temperatures: Vec<f64> = s.points.iter().map(|p| p.temperature).collect();
        assert_eq!(temperatures, [1.0, 1.5, 2.0]);
        assert_eq!(s.picked, 1.5);
    }

    #[test]
    fn a_collapse_at_a_middle_temperature_does_not_hide_a_recovery() {
        // Not a monotone search: the highest temperature within tolerance wins.
        assert_eq!(picked(&[(1.0, 70), (1.4, 50), (1.7, 70)], 0.01), 1.7);
    }

    #[test]
    fn bad_sweeps_are_refused() {
        let err =
            |points: Vec<SweepPoint>, tolerance| pick_temperature(points, tolerance).unwrap_err().to_string();
        assert_eq!(err(Vec::new(), 0.01), "temperature sweep: no temperatures");
        assert_eq!(
            err(sweep(&[(1.0, 5), (1.0, 6)]), 0.01),
            "temperature 1: appears twice in the sweep"
        );
        assert_eq!(
            err(sweep(&[(1.0, 5)]), -0.1),
            "tolerance: -0.1 is not a number >= 0"
        );
        let mut empty = sweep(&[(1.2, 0)]);
        empty[0].total = 0;
        assert_eq!(
            err(empty, 0.01),
            "temperature 1.2: 0 correct of 0 scored rollouts"
        );
    }
}
