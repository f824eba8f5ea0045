//! The fixed evaluation settings of pycocotools' `Params` for bbox: IoU and recall thresholds, area
//! ranges, detection caps. The float values are built the way numpy's `linspace` builds them, because
//! the matching compares against them exactly.

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

    /// The cap matching keeps detections up to (pycocotools' `maxDets[-1]`).
    pub fn largest_cap(&self) -> usize {
        self.max_dets.last().map_or(0, |&m| MAX_DETS[m])
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

    /// True when `area` falls outside the range. Written as pycocotools writes it (`a < lo or a > hi`)
    /// so that a NaN area counts as inside.
    pub fn excludes(self, area: f64) -> bool {
        let (lo, hi) = self.bounds();
        area < lo || area > hi
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
        assert_eq!((FULL_SCOPE.largest_cap(), AP_SCOPE.largest_cap()), (100, 100));
    }

    #[test]
    fn area_bounds_are_inclusive() {
        assert!(!AreaRange::Small.excludes(1024.0));
        assert!(!AreaRange::Medium.excludes(1024.0));
        assert!(AreaRange::Medium.excludes(9216.5));
        assert!(!AreaRange::All.excludes(f64::NAN));
    }
}
