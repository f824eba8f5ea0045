//! pycocotools' `Params` for bbox: the default IoU and recall thresholds, area ranges and detection
//! caps (the float values built the way numpy's `linspace` builds them, because the matching compares
//! against them exactly), and [`Params`], any values of them, as the Python `COCOeval` takes them.

/// IoU thresholds 0.50, 0.55, ..., 0.95: `np.linspace(.5, .95, 10)`, i.e. `i * ((0.95 - 0.5) / 9) + 0.5`
/// with the last one set to 0.95 (so the 8th is 0.8999999999999999, not 0.9).
pub const IOU_THRESHOLDS: [f64; 10] = linspace(0.5, 0.95);

/// Recall thresholds 0.00, 0.01, ..., 1.00: `np.linspace(.0, 1.00, 101)`.
pub const RECALL_THRESHOLDS: [f64; 101] = linspace(0.0, 1.0);

/// Index of IoU 0.5 in [`IOU_THRESHOLDS`].
pub const IOU_50: usize = 0;
/// Index of IoU 0.75 in [`IOU_THRESHOLDS`] (exactly 0.75, as pycocotools' `np.where` needs).
pub const IOU_75: usize = 5;

/// Caps on detections per image and category, ascending as pycocotools sorts them.
pub const MAX_DETS: [usize; 3] = [1, 10, 100];
/// Index of the largest cap (100), the one AP is reported at.
pub const MAX_DET_100: usize = 2;

/// The settings an evaluation computes curves for: area ranges and detection caps (indices into
/// [`MAX_DETS`]), each in pycocotools' order, largest cap last. The full evaluation needs all of them;
/// the per-sample reward reads only AP and AP50, so it computes one setting of the twelve and skips
/// the rest of the work (and the memory for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scope {
    pub areas: &'static [AreaRange],
    pub max_dets: &'static [usize],
}

/// Every setting: what `COCOeval` computes and its 12 stats need.
pub const FULL_SCOPE: Scope = Scope {
    areas: &AREA_RANGES,
    max_dets: &[0, 1, MAX_DET_100],
};

/// Area "all" and 100 detections: all that AP and AP50 (`stats[0]`, `stats[1]`) read.
pub const AP_SCOPE: Scope = Scope {
    areas: &[AreaRange::All],
    max_dets: &[MAX_DET_100],
};

impl Scope {
    /// Positions of `area` and cap index `max_det` in this scope, if it holds both.
    pub fn position(&self, area: AreaRange, max_det: usize) -> Option<(usize, usize)> {
        let a = self.areas.iter().position(|&x| x == area)?;
        let m = self.max_dets.iter().position(|&x| x == max_det)?;
        Some((a, m))
    }
}

/// What `evaluate()` reads from pycocotools' `Params` once it has normalized them: `img_ids` and, with
/// `use_cats`, `cat_ids` sorted and unique, `max_dets` ascending. An evaluation unit is a category
/// (`use_cats`) or, without it, every listed category at once.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub img_ids: Vec<i64>,
    pub cat_ids: Vec<i64>,
    pub use_cats: bool,
    pub iou_thrs: Vec<f64>,
    pub max_dets: Vec<usize>,
    /// `[lo, hi]` per area range, both bounds inclusive.
    pub area_rng: Vec<[f64; 2]>,
}

impl Params {
    /// The default thresholds, with the area ranges and caps of `scope`, on `img_ids` and `cat_ids`
    /// (sorted and unique).
    pub fn scoped(img_ids: Vec<i64>, cat_ids: Vec<i64>, scope: &Scope) -> Self {
        Self {
            img_ids,
            cat_ids,
            use_cats: true,
            iou_thrs: IOU_THRESHOLDS.to_vec(),
            max_dets: scope.max_dets.iter().map(|&m| MAX_DETS[m]).collect(),
            area_rng: scope
                .areas
                .iter()
                .map(|a| {
                    let (lo, hi) = a.bounds();
                    [lo, hi]
                })
                .collect(),
        }
    }

    /// pycocotools' `min([t, 1 - 1e-10])` of each IoU threshold: the IoU a match must reach.
    pub(super) fn limits(&self) -> Vec<f64> {
        let limit = 1.0 - 1e-10;
        self.iou_thrs
            .iter()
            .map(|&t| if limit < t { limit } else { t })
            .collect()
    }

    /// pycocotools matches the top `maxDets[-1]` detections of each image.
    pub(super) fn cap(&self) -> usize {
        self.max_dets.last().copied().unwrap_or(0)
    }

    /// Whether `area` is outside area range `a` (written as pycocotools writes it, `a < lo or a > hi`,
    /// so that a NaN area counts as inside).
    pub(super) fn excludes(&self, a: usize, area: f64) -> bool {
        let [lo, hi] = self.area_rng[a];
        area < lo || area > hi
    }
}

/// numpy's `linspace(start, stop, N)`: `i * step + start`, last value exactly `stop`.
const fn linspace<const N: usize>(start: f64, stop: f64) -> [f64; N] {
    let step = (stop - start) / (N - 1) as f64;
    let mut out = [0.0; N];
    let mut i = 0;
    while i < N {
        out[i] = i as f64 * step + start;
        i += 1;
    }
    out[N - 1] = stop;
    out
}

/// Object size classes by area in pixels², bounds inclusive on both ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AreaRange {
    All,
    Small,
    Medium,
    Large,
}

/// In pycocotools' order: all, small, medium, large.
pub const AREA_RANGES: [AreaRange; 4] = [
    AreaRange::All,
    AreaRange::Small,
    AreaRange::Medium,
    AreaRange::Large,
];

impl AreaRange {
    /// `[lo, hi]`: all `[0, 1e10]`, small `[0, 32²]`, medium `[32², 96²]`, large `[96², 1e10]`.
    pub fn bounds(self) -> (f64, f64) {
        match self {
            AreaRange::All => (0.0, 1e10),
            AreaRange::Small => (0.0, 1024.0),
            AreaRange::Medium => (1024.0, 9216.0),
            AreaRange::Large => (9216.0, 1e10),
        }
    }

    /// The label pycocotools prints.
    pub fn label(self) -> &'static str {
        match self {
            AreaRange::All => "all",
            AreaRange::Small => "small",
            AreaRange::Medium => "medium",
            AreaRange::Large => "large",
        }
    }

    /// Position in [`AREA_RANGES`].
    pub fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_numpy_linspace_values() {
        assert_eq!(IOU_THRESHOLDS[0], 0.5);
        assert_eq!(IOU_THRESHOLDS[IOU_75], 0.75);
        assert_eq!(IOU_THRESHOLDS[7], 0.85);
        assert_eq!(IOU_THRESHOLDS[8], 0.8999999999999999);
        assert_eq!(IOU_THRESHOLDS[9], 0.95);
        assert_eq!(RECALL_THRESHOLDS[57], 0.5700000000000001);
        assert_eq!(RECALL_THRESHOLDS[100], 1.0);
    }

    #[test]
    fn scopes_hold_what_their_users_read() {
        assert_eq!(FULL_SCOPE.position(AreaRange::Large, 1), Some((3, 1)));
        assert_eq!(AP_SCOPE.position(AreaRange::All, MAX_DET_100), Some((0, 0)));
        assert_eq!(AP_SCOPE.position(AreaRange::Small, MAX_DET_100), None);
        let p = Params::scoped(vec![1], vec![1], &AP_SCOPE);
        assert_eq!((p.max_dets, p.area_rng), (vec![100], vec![[0.0, 1e10]]));
        assert_eq!(Params::scoped(vec![], vec![], &FULL_SCOPE).cap(), 100);
    }

    #[test]
    fn area_bounds_are_inclusive_and_nan_is_inside() {
        let p = Params::scoped(vec![], vec![], &FULL_SCOPE);
        let (small, medium) = (AreaRange::Small.index(), AreaRange::Medium.index());
        assert!(!p.excludes(small, 1024.0));
        assert!(!p.excludes(medium, 1024.0));
        assert!(p.excludes(medium, 9216.5));
        assert!(!p.excludes(AreaRange::All.index(), f64::NAN));
    }

    #[test]
    fn limits_stop_below_one() {
        let mut p = Params::scoped(vec![], vec![], &AP_SCOPE);
        p.iou_thrs = vec![0.5, 1.0];
        assert_eq!(p.limits(), [0.5, 1.0 - 1e-10]);
    }
}
