//! Whether a click hits a target, and whether an answer is correct for an item.
//!
//! All geometry here is in one frame (the evaluation uses original image pixels). Boundaries count
//! as inside everywhere, as ScreenSpot's `x1 <= x <= x2` does: a click on a box's border, on a
//! polygon's edge or on a polygon's vertex is a hit.

use crate::data::Shape;
use crate::geometry::{BBox, Point};

/// How far (in the targets' units, pixels here) a click may be from a polygon edge and still count
/// as on it: absorbs the rounding of the edge equation, nothing a model could aim for.
const EDGE_TOLERANCE: f64 = 1e-9;

/// What the model answered for one item, in the targets' frame.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Answer {
    /// A click: the point it gave, or the centre of the box it gave (kept for IoU statistics).
    Click { point: Point, bbox: Option<BBox> },
    /// An explicit refusal ("None"): the element is not on the screen.
    Refusal,
}

/// Whether an answer is correct for an item.
///
/// A refusal item (`none`, OSWorld-G `box_type: refusal`) is answered correctly only by a refusal;
/// on any other item a refusal is wrong. A click is correct when it hits any of the targets.
pub fn is_correct(answer: &Answer, targets: &[Shape], refusal_item: bool) -> bool {
    match answer {
        Answer::Refusal => refusal_item,
        Answer::Click { point, .. } => !refusal_item && targets.iter().any(|t| shape_contains(t, *point)),
    }
}

/// Inclusive containment for every target shape. A point target is a zero-size box: only that
/// exact point hits it.
pub fn shape_contains(shape: &Shape, p: Point) -> bool {
    match shape {
        Shape::Box(xyxy) => BBox::from_xyxy(*xyxy).contains(p),
        Shape::Point([x, y]) => p.x == *x && p.y == *y,
        Shape::Polygon(vertices) => polygon_contains(vertices, p),
    }
}

/// Point in polygon by ray casting (even-odd rule), inclusive on the boundary.
///
/// The polygon may be concave; vertices are in order and the last connects back to the first. A
/// point on an edge or vertex is inside (checked first, since ray casting alone decides boundary
/// points by rounding). Otherwise a ray from `p` towards +x crosses the boundary an odd number of
/// times iff `p` is inside; the half-open test `(yi > y) != (yj > y)` counts a vertex the ray passes
/// through exactly once.
pub fn polygon_contains(vertices: &[[f64; 2]], p: Point) -> bool {
    let edges = || vertices.iter().zip(vertices.iter().cycle().skip(1));
    if edges().any(|(a, b)| on_segment(*a, *b, p)) {
        return true;
    }
    let mut inside = false;
    for ([xi, yi], [xj, yj]) in edges() {
        if (*yi > p.y) != (*yj > p.y) {
            let x_cross = xi + (p.y - yi) / (yj - yi) * (xj - xi);
            if p.x < x_cross {
                inside = !inside;
            }
        }
    }
    inside
}

/// Whether `p` lies on the segment `a`-`b` (within [`EDGE_TOLERANCE`] of it).
fn on_segment([ax, ay]: [f64; 2], [bx, by]: [f64; 2], p: Point) -> bool {
    let (dx, dy) = (bx - ax, by - ay);
    let length = dx.hypot(dy);
    if length == 0.0 {
        return (p.x - ax).hypot(p.y - ay) <= EDGE_TOLERANCE;
    }
    let distance_to_line = (dx * (p.y - ay) - dy * (p.x - ax)).abs() / length;
    let along = dx * (p.x - ax) + dy * (p.y - ay);
    distance_to_line <= EDGE_TOLERANCE && (0.0..=length * length).contains(&along)
}

/// Area enclosed by a simple polygon (shoelace formula), for target-size buckets.
pub fn polygon_area(vertices: &[[f64; 2]]) -> f64 {
    let twice: f64 = vertices
        .iter()
        .zip(vertices.iter().cycle().skip(1))
        .map(|([x1, y1], [x2, y2])| x1 * y2 - x2 * y1)
        .sum();
    twice.abs() / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "U" opening upwards: the notch (4..6, 4..10) is outside.
    fn u_shape() -> Vec<[f64; 2]> {
        vec![
            [0.0, 0.0],
            [10.0, 0.0],
            [10.0, 10.0],
            [6.0, 10.0],
            [6.0, 4.0],
            [4.0, 4.0],
            [4.0, 10.0],
            [0.0, 10.0],
        ]
    }

    #[test]
    fn concave_polygon_inside_and_outside() {
        let u = u_shape();
        assert!(polygon_contains(&u, Point::new(2.0, 8.0)), "left arm");
        assert!(polygon_contains(&u, Point::new(8.0, 8.0)), "right arm");
        assert!(polygon_contains(&u, Point::new(5.0, 2.0)), "base");
        assert!(!polygon_contains(&u, Point::new(5.0, 8.0)), "in the notch");
        assert!(!polygon_contains(&u, Point::new(11.0, 5.0)), "right of it");
        assert!(!polygon_contains(&u, Point::new(-0.5, 5.0)), "left of it");
        assert!(!polygon_contains(&u, Point::new(5.0, 10.5)), "above it");
    }

    #[test]
    fn polygon_boundary_is_inside() {
        let u = u_shape();
        for v in &u {
            assert!(polygon_contains(&u, Point::new(v[0], v[1])), "vertex {v:?}");
        }
        assert!(polygon_contains(&u, Point::new(5.0, 0.0)), "bottom edge");
        assert!(polygon_contains(&u, Point::new(5.0, 4.0)), "notch floor");
        assert!(polygon_contains(&u, Point::new(6.0, 7.0)), "notch wall");
        assert!(
            !polygon_contains(&u, Point::new(5.0, 4.0 + 1e-6)),
            "just inside the notch"
        );
        // A slanted edge whose points are not exactly representable.
        let triangle = [[0.0, 0.0], [3.0, 0.0], [0.0, 7.0]];
        let on_hypotenuse = Point::new(1.0, 7.0 * 2.0 / 3.0);
        assert!(polygon_contains(&triangle, on_hypotenuse));
        assert!(!polygon_contains(
            &triangle,
            Point::new(1.0, 7.0 * 2.0 / 3.0 + 1e-6)
        ));
    }

    #[test]
    fn ray_through_a_vertex_counts_once() {
        // A diamond: rays along y = 5 pass exactly through the vertices (0, 5) and (10, 5).
        let diamond = [[5.0, 0.0], [10.0, 5.0], [5.0, 10.0], [0.0, 5.0]];
        assert!(polygon_contains(&diamond, Point::new(2.0, 5.0)));
        assert!(!polygon_contains(&diamond, Point::new(-1.0, 5.0)));
        assert!(!polygon_contains(&diamond, Point::new(1.0, 1.0)));
    }

    #[test]
    fn boxes_are_inclusive_and_points_exact() {
        let b = Shape::Box([10.0, 10.0, 20.0, 30.0]);
        assert!(shape_contains(&b, Point::new(20.0, 30.0)));
        assert!(!shape_contains(&b, Point::new(20.5, 30.0)));
        let p = Shape::Point([3.0, 4.0]);
        assert!(shape_contains(&p, Point::new(3.0, 4.0)));
        assert!(!shape_contains(&p, Point::new(3.0, 4.5)));
    }

    #[test]
    fn refusals_are_right_only_on_refusal_items() {
        let targets = [Shape::Box([0.0, 0.0, 10.0, 10.0])];
        let inside = Answer::Click {
            point: Point::new(5.0, 5.0),
            bbox: None,
        };
        let outside = Answer::Click {
            point: Point::new(50.0, 5.0),
            bbox: None,
        };
        assert!(is_correct(&inside, &targets, false));
        assert!(!is_correct(&outside, &targets, false));
        assert!(
            !is_correct(&Answer::Refusal, &targets, false),
            "refusing a present element"
        );
        assert!(
            is_correct(&Answer::Refusal, &[], true),
            "refusing an absent element"
        );
        assert!(!is_correct(&inside, &[], true), "clicking on a refusal item");
        let two = [Shape::Box([0.0, 0.0, 1.0, 1.0]), Shape::Box([4.0, 4.0, 6.0, 6.0])];
        assert!(is_correct(&inside, &two, false), "any target counts");
    }

    #[test]
    fn shoelace_area() {
        assert_eq!(polygon_area(&u_shape()), 100.0 - 12.0);
        assert_eq!(polygon_area(&[[0.0, 0.0], [3.0, 0.0], [0.0, 7.0]]), 10.5);
    }
}
