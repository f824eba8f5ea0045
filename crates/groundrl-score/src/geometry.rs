//! Boxes and points as plain numbers, with the overlap measures every reward and metric shares.
//!
//! A [`BBox`] here carries no frame: [`crate::frame`] attaches one. All arithmetic is `f64` and
//! continuous (no "+1" pixel convention), as in pycocotools and VLM-R1.

use serde::{Deserialize, Serialize};

/// A point `(x, y)`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub x: f64,
    pub y: f64,
}

impl Point {
    pub fn new(x: f64, y: f64) -> Self {
        Self { x, y }
    }

    pub fn is_finite(&self) -> bool {
        self.x.is_finite() && self.y.is_finite()
    }
}

/// An axis-aligned box in corner form `x1, y1, x2, y2`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct BBox {
    pub x1: f64,
    pub y1: f64,
    pub x2: f64,
    pub y2: f64,
}

impl BBox {
    pub fn from_xyxy([x1, y1, x2, y2]: [f64; 4]) -> Self {
        Self { x1, y1, x2, y2 }
    }

    /// COCO and ScreenSpot store boxes as top-left corner plus width and height.
    pub fn from_xywh([x, y, w, h]: [f64; 4]) -> Self {
        Self {
            x1: x,
            y1: y,
            x2: x + w,
            y2: y + h,
        }
    }

    /// Centre plus width and height (YOLO-style).
    pub fn from_cxcywh([cx, cy, w, h]: [f64; 4]) -> Self {
        Self {
            x1: cx - w / 2.0,
            y1: cy - h / 2.0,
            x2: cx + w / 2.0,
            y2: cy + h / 2.0,
        }
    }

    pub fn xyxy(&self) -> [f64; 4] {
        [self.x1, self.y1, self.x2, self.y2]
    }

    pub fn xywh(&self) -> [f64; 4] {
        [self.x1, self.y1, self.width(), self.height()]
    }

    pub fn cxcywh(&self) -> [f64; 4] {
        let c = self.centre();
        [c.x, c.y, self.width(), self.height()]
    }

    pub fn width(&self) -> f64 {
        self.x2 - self.x1
    }

    pub fn height(&self) -> f64 {
        self.y2 - self.y1
    }

    /// Area of a well-formed box; zero for a degenerate or inverted one.
    pub fn area(&self) -> f64 {
        self.width().max(0.0) * self.height().max(0.0)
    }

    /// The click point of a box (ScreenSpot: a predicted box clicks its centre).
    pub fn centre(&self) -> Point {
        Point::new((self.x1 + self.x2) / 2.0, (self.y1 + self.y2) / 2.0)
    }

    pub fn is_finite(&self) -> bool {
        self.x1.is_finite() && self.y1.is_finite() && self.x2.is_finite() && self.y2.is_finite()
    }

    /// Finite, with `x1 <= x2` and `y1 <= y2`.
    pub fn is_well_formed(&self) -> bool {
        self.is_finite() && self.x1 <= self.x2 && self.y1 <= self.y2
    }

    /// Inclusive containment: a point on the border is inside (ScreenSpot's rule).
    pub fn contains(&self, p: Point) -> bool {
        self.x1 <= p.x && p.x <= self.x2 && self.y1 <= p.y && p.y <= self.y2
    }

    /// Area of the overlap; zero when the boxes do not overlap.
    pub fn intersection(&self, other: &BBox) -> f64 {
        let w = self.x2.min(other.x2) - self.x1.max(other.x1);
        let h = self.y2.min(other.y2) - self.y1.max(other.y1);
        if w <= 0.0 || h <= 0.0 { 0.0 } else { w * h }
    }

    /// Intersection over union; 0 when the union is empty (two degenerate boxes).
    pub fn iou(&self, other: &BBox) -> f64 {
        let inter = self.intersection(other);
        let union = self.area() + other.area() - inter;
        if union <= 0.0 { 0.0 } else { inter / union }
    }

    /// The smallest box holding both.
    pub fn enclosing(&self, other: &BBox) -> BBox {
        BBox {
            x1: self.x1.min(other.x1),
            y1: self.y1.min(other.y1),
            x2: self.x2.max(other.x2),
            y2: self.y2.max(other.y2),
        }
    }

    /// Generalized IoU (Rezatofighi et al. 2019): IoU minus the share of the enclosing box that
    /// neither box covers. In [-1, 1]; unlike IoU it still ranks boxes that do not overlap.
    pub fn giou(&self, other: &BBox) -> f64 {
        let inter = self.intersection(other);
        let union = self.area() + other.area() - inter;
        let hull = self.enclosing(other).area();
        if hull <= 0.0 || union <= 0.0 {
            return 0.0;
        }
        inter / union - (hull - union) / hull
    }
}

/// A box with the class or referring-expression label a detector gave it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabeledBox {
    pub bbox: BBox,
    pub label: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_round_trip() {
        let b = BBox::from_xywh([10.0, 20.0, 30.0, 40.0]);
        assert_eq!(b.xyxy(), [10.0, 20.0, 40.0, 60.0]);
        assert_eq!(b.xywh(), [10.0, 20.0, 30.0, 40.0]);
        assert_eq!(b.cxcywh(), [25.0, 40.0, 30.0, 40.0]);
        assert_eq!(BBox::from_cxcywh(b.cxcywh()), b);
    }

    #[test]
    fn iou_hand_computed() {
        let a = BBox::from_xyxy([0.0, 0.0, 10.0, 10.0]);
        let b = BBox::from_xyxy([5.0, 5.0, 15.0, 15.0]);
        // overlap 25, union 175
        assert_eq!(a.iou(&b), 25.0 / 175.0);
        assert_eq!(a.iou(&a), 1.0);
        let far = BBox::from_xyxy([20.0, 20.0, 30.0, 30.0]);
        assert_eq!(a.iou(&far), 0.0);
        // touching edges do not overlap
        let touching = BBox::from_xyxy([10.0, 0.0, 20.0, 10.0]);
        assert_eq!(a.iou(&touching), 0.0);
    }

    #[test]
    fn giou_hand_computed() {
        let a = BBox::from_xyxy([0.0, 0.0, 10.0, 10.0]);
        let far = BBox::from_xyxy([20.0, 0.0, 30.0, 10.0]);
        // hull 30x10 = 300, union 200: giou = 0 - 100/300
        assert_eq!(a.giou(&far), -100.0 / 300.0);
        let b = BBox::from_xyxy([5.0, 5.0, 15.0, 15.0]);
        // iou 25/175, hull 225, union 175
        assert_eq!(a.giou(&b), 25.0 / 175.0 - 50.0 / 225.0);
    }

    #[test]
    fn containment_is_inclusive() {
        let b = BBox::from_xyxy([0.0, 0.0, 10.0, 10.0]);
        assert!(b.contains(Point::new(10.0, 0.0)));
        assert!(!b.contains(Point::new(10.0001, 5.0)));
    }
}
