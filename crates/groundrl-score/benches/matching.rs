//! weighted_sum's greedy matching on one answer of many boxes, without the spec's `max_boxes` cap:
//! n predicted boxes against n targets, each prediction overlapping its own target (IoU 0.68) and
//! no other, for n = 1,000, 2,000 and 10,000. The rescanning loop this replaced was cubic (0.55 s
//! and 5.3 s for the first two; the third did not finish in 400 s).
//!
//! `cargo bench -p groundrl-score --bench matching`

use std::hint::black_box;

use criterion::Criterion;
use groundrl_score::geometry::{BBox, LabeledBox};
use groundrl_score::reward::detection::{WeightedSumParams, weighted_sum};
use groundrl_score::reward::{Prediction, Scene};

/// `n` 10 x 10 boxes on a grid of pitch 20, shifted by `offset` pixels.
fn grid(n: usize, offset: f64) -> Vec<LabeledBox> {
    let side = (n as f64).sqrt().ceil() as usize;
    (0..n)
        .map(|i| {
            let (x, y) = (
                (i % side) as f64 * 20.0 + offset,
                (i / side) as f64 * 20.0 + offset,
            );
            LabeledBox {
                bbox: BBox::from_xyxy([x, y, x + 10.0, y + 10.0]),
                label: "icon".into(),
            }
        })
        .collect()
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args().sample_size(10);
    let mut group = criterion.benchmark_group("weighted_sum_greedy");
    for n in [1_000, 2_000, 10_000] {
        let targets = grid(n, 0.0);
        let prediction = Prediction {
            clicks: Vec::new(),
            boxes: grid(n, 1.0),
            no_objects: false,
        };
        let scene = Scene {
            targets: &targets,
            target_none: false,
            prediction: Some(&prediction),
            image_extent: None,
            excess_boxes: 0,
        };
        let params = WeightedSumParams::default();
        // Every prediction matches its target: position 0.68, no miss, no false alarm.
        let expected = 0.7 * 81.0 / 119.0 + 0.3;
        assert!((weighted_sum(&scene, &params) - expected).abs() < 1e-9);
        group.bench_function(format!("{n}_boxes"), |b| {
            b.iter(|| black_box(weighted_sum(&scene, &params)))
        });
    }
    group.finish();
    criterion.final_summary();
}
