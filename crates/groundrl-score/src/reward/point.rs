//! Click rewards: the model's answer as a point (a box clicks its centre, ScreenSpot's rule).
//!
//! The first click point is scored; against several target boxes the best-fitting target counts.
//! No point (parse failure, empty answer) scores 0; a target with no box scores the reward's ceiling
//! iff the model answered "None", else 0.
//!
//! - **Point in box**: 1 if `x1 <= px <= x2` and `y1 <= py <= y2` (inclusive), else 0.
//! - **Gaussian point** (GUI-G2): `exp(-0.5 * ((dx/sx)^2 + (dy/sy)^2))`, `d` the offset from the
//!   target centre, `sx, sy = 0.5 * target width, height`. A degenerate target (zero width or height)
//!   admits no Gaussian and scores 0.
//! - **Gaussian coverage** (GUI-G2): each box is a diagonal Gaussian centred on the box with
//!   standard deviations `sx = w/2, sy = h/2` (as above). With per-axis variances `v1, v2` and
//!   `v = (v1 + v2) / 2`, the Bhattacharyya distance is
//!   `D = Σ_axis [ (mu1 - mu2)^2 / (8 v) + 0.5 * ln(v / sqrt(v1 v2)) ]` and the reward `exp(-D)`:
//!   1 for identical boxes, towards 0 as they part or differ in shape. Needs a predicted box.
//! - **Dense distance** (SE-GUI): `1[p in box] + (1 - (d / dmax)^2)`, `d` the distance from the point
//!   to the target centre, `dmax` from the target centre to the farthest image corner; in [0, 2]
//!   for points inside the image.

use super::Scene;
use crate::frame::Size;
use crate::geometry::{BBox, Point};

/// 1 if the first click lies inside a target box (border included), else 0.
pub fn point_in_box_reward(scene: &Scene) -> f64 {
    click_reward(scene, 1.0, |p, t| if t.contains(p) { 1.0 } else { 0.0 })
}

/// GUI-G2's Gaussian point reward of the first click.
pub fn gaussian_point_reward(scene: &Scene) -> f64 {
    click_reward(scene, 1.0, gaussian_point)
}

/// SE-GUI's dense distance reward of the first click; needs the image extent (0 without it).
pub fn dense_distance_reward(scene: &Scene) -> f64 {
    match scene.image_extent {
        Some(extent) => click_reward(scene, 2.0, |p, t| dense_distance(p, t, extent)),
        None => 0.0,
    }
}

/// GUI-G2's Gaussian coverage of the first predicted box.
pub fn gaussian_coverage_reward(scene: &Scene) -> f64 {
    if scene.expects_nothing() {
        return scene.refusal_score(1.0, 0.0);
    }
    match scene.prediction.and_then(|p| p.first_box()) {
        Some(pred) => scene.best_over_targets(|t| gaussian_coverage(pred, t)),
        None => 0.0,
    }
}

/// Scores the first click with `score` against the best target; the shared edge cases live here.
fn click_reward(scene: &Scene, ceiling: f64, score: impl Fn(Point, &BBox) -> f64) -> f64 {
    if scene.expects_nothing() {
        return scene.refusal_score(ceiling, 0.0);
    }
    match scene.prediction.and_then(|p| p.first_click()) {
        Some(p) => scene.best_over_targets(|t| score(p, t)),
        None => 0.0,
    }
}

/// Standard deviations of a box's Gaussian: half its width and height.
fn sigmas(b: &BBox) -> Option<(f64, f64)> {
    let (sx, sy) = (0.5 * b.width(), 0.5 * b.height());
    (sx > 0.0 && sy > 0.0).then_some((sx, sy))
}

fn gaussian_point(p: Point, target: &BBox) -> f64 {
    let Some((sx, sy)) = sigmas(target) else {
        return 0.0;
    };
    let c = target.centre();
    let (zx, zy) = ((p.x - c.x) / sx, (p.y - c.y) / sy);
    (-0.5 * (zx * zx + zy * zy)).exp()
}

fn gaussian_coverage(pred: &BBox, target: &BBox) -> f64 {
    let (Some((px, py)), Some((tx, ty))) = (sigmas(pred), sigmas(target)) else {
        return 0.0;
    };
    let (cp, ct) = (pred.centre(), target.centre());
    let distance =
        bhattacharyya_axis(cp.x - ct.x, px * px, tx * tx) + bhattacharyya_axis(cp.y - ct.y, py * py, ty * ty);
    (-distance).exp()
}

/// One axis of the Bhattacharyya distance between two 1-D Gaussians of variances `v1`, `v2` whose
/// means differ by `dm`.
fn bhattacharyya_axis(dm: f64, v1: f64, v2: f64) -> f64 {
    let v = 0.5 * (v1 + v2);
    dm * dm / (8.0 * v) + 0.5 * (v / (v1 * v2).sqrt()).ln()
}

fn dense_distance(p: Point, target: &BBox, image: Size) -> f64 {
    let c = target.centre();
    let far_x = c.x.max(image.width - c.x);
    let far_y = c.y.max(image.height - c.y);
    let dmax = far_x.hypot(far_y);
    let inside = if target.contains(p) { 1.0 } else { 0.0 };
    if dmax <= 0.0 {
        return inside;
    }
    let d = (p.x - c.x).hypot(p.y - c.y);
    inside + 1.0 - (d / dmax).powi(2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::LabeledBox;
    use crate::reward::Prediction;

    fn target(xyxy: [f64; 4]) -> Vec<LabeledBox> {
        vec![LabeledBox {
            bbox: BBox::from_xyxy(xyxy),
            label: String::new(),
        }]
    }

    fn click(x: f64, y: f64) -> Prediction {
        Prediction {
            boxes: vec![],
            clicks: vec![Point::new(x, y)],
            no_objects: false,
        }
    }

    fn scene<'a>(targets: &'a [LabeledBox], p: &'a Prediction) -> Scene<'a> {
        Scene {
            targets,
            target_none: false,
            prediction: Some(p),
            image_extent: Some(Size::new(100.0, 50.0)),
            excess_boxes: 0,
        }
    }

    #[test]
    fn point_in_box_is_inclusive() {
        let t = target([10.0, 10.0, 20.0, 20.0]);
        assert_eq!(point_in_box_reward(&scene(&t, &click(20.0, 10.0))), 1.0);
        assert_eq!(point_in_box_reward(&scene(&t, &click(20.5, 10.0))), 0.0);
    }

    #[test]
    fn gaussian_point_hand_computed() {
        // box 10..30 x 10..20: centre (20, 15), sx 10, sy 5
        let t = target([10.0, 10.0, 30.0, 20.0]);
        assert_eq!(gaussian_point_reward(&scene(&t, &click(20.0, 15.0))), 1.0);
        // dx = 10 (1 sigma), dy = 5 (1 sigma): exp(-0.5 * 2) = exp(-1)
        assert_eq!(
            gaussian_point_reward(&scene(&t, &click(30.0, 20.0))),
            (-1.0f64).exp()
        );
        let flat = target([10.0, 10.0, 30.0, 10.0]);
        assert_eq!(gaussian_point_reward(&scene(&flat, &click(20.0, 10.0))), 0.0);
    }

    #[test]
    fn gaussian_coverage_hand_computed() {
        let t = target([0.0, 0.0, 20.0, 10.0]);
        let same = Prediction {
            boxes: t.clone(),
            clicks: vec![],
            no_objects: false,
        };
        assert_eq!(gaussian_coverage_reward(&scene(&t, &same)), 1.0);
        // shifted by 10 in x, same shape: sx^2 = 100 both, D = 100 / (8 * 100) = 1/8
        let shifted = Prediction {
            boxes: target([10.0, 0.0, 30.0, 10.0]),
            ..Prediction::default()
        };
        let got = gaussian_coverage_reward(&scene(&t, &shifted));
        assert!((got - (-0.125f64).exp()).abs() < 1e-15, "{got}");
        // same centre, double width: v1 = 100, v2 = 400, v = 250: D = 0.5 ln(250 / 200)
        let wide = Prediction {
            boxes: target([-10.0, 0.0, 30.0, 10.0]),
            ..Prediction::default()
        };
        let got = gaussian_coverage_reward(&scene(&t, &wide));
        assert!((got - (1.25f64).powf(-0.5)).abs() < 1e-15, "{got}");
        // a click only: no box to cover with
        assert_eq!(gaussian_coverage_reward(&scene(&t, &click(10.0, 5.0))), 0.0);
    }

    #[test]
    fn dense_distance_hand_computed() {
        // image 100 x 50, target centre (20, 10): farthest corner (100, 50), dmax^2 = 80^2 + 40^2
        let t = target([10.0, 0.0, 30.0, 20.0]);
        assert_eq!(dense_distance_reward(&scene(&t, &click(20.0, 10.0))), 2.0);
        // inside at distance 10: 1 + 1 - 100/8000
        assert_eq!(
            dense_distance_reward(&scene(&t, &click(30.0, 10.0))),
            2.0 - 100.0 / 8000.0
        );
        // outside at (100, 50): exactly dmax away
        assert_eq!(dense_distance_reward(&scene(&t, &click(100.0, 50.0))), 0.0);
    }

    #[test]
    fn best_target_and_refusals() {
        let two = [target([0.0, 0.0, 10.0, 10.0]), target([50.0, 0.0, 60.0, 10.0])].concat();
        assert_eq!(point_in_box_reward(&scene(&two, &click(55.0, 5.0))), 1.0);
        let none = Prediction {
            no_objects: true,
            ..Prediction::default()
        };
        assert_eq!(dense_distance_reward(&scene(&[], &none)), 2.0);
        assert_eq!(point_in_box_reward(&scene(&[], &click(1.0, 1.0))), 0.0);
        assert_eq!(point_in_box_reward(&scene(&two, &none)), 0.0);
    }
}
