//! COCO evaluation on a synthetic in-memory set (500 images, 20 categories, 100 detections per image),
//! JSON loading excluded, and the per-sample AP reward on 10k seeded samples:
//! `cargo bench -p groundrl-score --bench coco`.
//!
//! With `COCO_BENCH_GT` and `COCO_BENCH_DT` set (a ground-truth and a results JSON file), it instead
//! loads them, times `evaluate` `COCO_BENCH_RUNS` times (default 5) and prints one JSON line: each run's
//! seconds and the 12 stats. scripts/bench/coco.sh times the library this way next to the Python tools,
//! without building the libtorch-linked CLI.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group};
use groundrl_score::geometry::{BBox, LabeledBox};
use groundrl_score::metrics::coco::{
    Category, Detection, GroundTruth, GtAnnotation, evaluate, load_detections, load_ground_truth,
    single_image_ap,
};

/// A small deterministic generator (xorshift64*), so the bench needs no extra crate.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    fn index(&mut self, n: usize) -> usize {
        ((self.unit() * n as f64) as usize).min(n - 1)
    }
}

fn synthetic(images: usize, categories: usize, dets_per_image: usize) -> (GroundTruth, Vec<Detection>) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut gt = GroundTruth {
        image_ids: (1..=images as i64).collect(),
        categories: (1..=categories as i64)
            .map(|id| Category {
                id,
                name: format!("c{id}"),
            })
            .collect(),
        annotations: Vec::new(),
    };
    let mut dts = Vec::new();
    for image_id in 1..=images as i64 {
        let first = gt.annotations.len();
        for _ in 0..1 + rng.index(10) {
            let bbox = [
                rng.range(0.0, 600.0),
                rng.range(0.0, 400.0),
                rng.range(4.0, 400.0),
                rng.range(4.0, 400.0),
            ];
            gt.annotations.push(GtAnnotation {
                id: gt.annotations.len() as i64 + 1,
                image_id,
                category_id: 1 + rng.index(categories) as i64,
                bbox,
                area: bbox[2] * bbox[3],
                iscrowd: false,
            });
        }
        for _ in 0..dets_per_image {
            let (bbox, category_id) = if rng.unit() < 0.3 {
                let a = &gt.annotations[first + rng.index(gt.annotations.len() - first)];
                let [x, y, w, h] = a.bbox;
                (
                    [
                        x + rng.range(-3.0, 3.0),
                        y + rng.range(-3.0, 3.0),
                        w * rng.range(0.8, 1.2),
                        h,
                    ],
                    a.category_id,
                )
            } else {
                let b = [
                    rng.range(0.0, 600.0),
                    rng.range(0.0, 400.0),
                    rng.range(4.0, 300.0),
                    rng.range(4.0, 300.0),
                ];
                (b, 1 + rng.index(categories) as i64)
            };
            dts.push(Detection {
                image_id,
                category_id,
                bbox,
                score: (rng.unit() * 1000.0).round() / 1000.0,
            });
        }
    }
    (gt, dts)
}

fn bench_evaluate(c: &mut Criterion) {
    let (gt, dts) = synthetic(500, 20, 100);
    c.bench_function("coco evaluate 500 images x 20 categories x 100 dets", |b| {
        b.iter(|| evaluate(black_box(&gt), black_box(&dts)).map(|e| e.stats.ap))
    });
}

/// One reward sample: 1-8 ground-truth boxes over 3 labels; each answered with probability 0.8 by a
/// jittered copy (its label wrong one time in ten), plus 0-2 stray boxes, in shuffled order.
fn reward_sample(rng: &mut Rng) -> (Vec<LabeledBox>, Vec<LabeledBox>) {
    const LABELS: [&str; 3] = ["person", "car", "dog"];
    let labeled = |xyxy, label: &str| LabeledBox {
        bbox: BBox::from_xyxy(xyxy),
        label: label.to_string(),
    };
    let mut gt = Vec::new();
    let mut predictions = Vec::new();
    for _ in 0..1 + rng.index(8) {
        let (x, y) = (rng.range(0.0, 600.0), rng.range(0.0, 400.0));
        let (w, h) = (rng.range(8.0, 300.0), rng.range(8.0, 300.0));
        let label = LABELS[rng.index(LABELS.len())];
        gt.push(labeled([x, y, x + w, y + h], label));
        if rng.unit() < 0.8 {
            let jitter = |rng: &mut Rng, v: f64, size: f64| v + size * rng.range(-0.15, 0.15);
            let xyxy = [
                jitter(rng, x, w),
                jitter(rng, y, h),
                jitter(rng, x + w, w),
                jitter(rng, y + h, h),
            ];
            let label = if rng.unit() < 0.1 {
                LABELS[rng.index(3)]
            } else {
                label
            };
            predictions.push(labeled(xyxy, label));
        }
    }
    for _ in 0..rng.index(3) {
        let (x, y) = (rng.range(0.0, 600.0), rng.range(0.0, 400.0));
        let xyxy = [x, y, x + rng.range(8.0, 200.0), y + rng.range(8.0, 200.0)];
        predictions.push(labeled(xyxy, LABELS[rng.index(3)]));
    }
    for i in (1..predictions.len()).rev() {
        predictions.swap(i, rng.index(i + 1));
    }
    (gt, predictions)
}

fn bench_single_image_ap(c: &mut Criterion) {
    const SAMPLES: usize = 10_000;
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let samples: Vec<_> = (0..SAMPLES).map(|_| reward_sample(&mut rng)).collect();
    let mut group = c.benchmark_group("single_image_ap");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(SAMPLES as u64));
    group.bench_function("10k samples, 1-8 gt, jittered predictions", |b| {
        b.iter(|| {
            black_box(&samples)
                .iter()
                .map(|(gt, predictions)| single_image_ap(gt, predictions).ap)
                .sum::<f64>()
        })
    });
    group.finish();
}

criterion_group!(benches, bench_evaluate, bench_single_image_ap);

/// Times `evaluate` on the files named by the environment (see the module doc).
fn time_files(gt: &str, dt: &str) {
    let gt = load_ground_truth(gt.as_ref()).expect("ground truth");
    let dt = load_detections(dt.as_ref()).expect("detections");
    let runs: usize = std::env::var("COCO_BENCH_RUNS").map_or(5, |r| r.parse().expect("COCO_BENCH_RUNS"));
    let mut seconds = Vec::with_capacity(runs);
    let mut stats = None;
    for _ in 0..runs {
        let start = Instant::now();
        let eval = evaluate(&gt, &dt).expect("evaluation");
        seconds.push(start.elapsed().as_secs_f64());
        stats = Some(eval.stats);
    }
    let line = serde_json::json!({ "seconds": seconds, "stats": stats.map(|s| s.to_array()) });
    println!("{line}");
}

fn main() {
    match (std::env::var("COCO_BENCH_GT"), std::env::var("COCO_BENCH_DT")) {
        (Ok(gt), Ok(dt)) => time_files(&gt, &dt),
        _ => {
            benches();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}
