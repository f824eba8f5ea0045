//! A small case (tests/fixtures/coco-parity: five images, gt.json and dt.json in COCO's
//! format, and expected_stats.json, the 12 stats pycocotools 2.0.11's `COCOeval(gt, dt, "bbox")`
//! computed for them) must give the same 12 stats, here to the last bit. scripts/parity/coco.sh checks
//! 60 generated cases against live pycocotools.

use std::path::PathBuf;

use groundrl_score::metrics::coco::{evaluate, load_detections, load_ground_truth};

const KEYS: [&str; 12] = [
    "AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl",
];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/coco-parity")
        .join(name)
}

#[test]
fn fixture_stats_match_pycocotools() {
    let gt = load_ground_truth(&fixture("gt.json")).unwrap();
    let dt = load_detections(&fixture("dt.json")).unwrap();
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("expected_stats.json")).unwrap()).unwrap();
    let stats = evaluate(&gt, &dt).unwrap().stats.to_array();
    for (key, ours) in KEYS.iter().zip(stats) {
        let theirs = expected[key].as_f64().unwrap();
        assert!(
            (ours - theirs).abs() <= 1e-12,
            "{key}: ours {ours:?}, pycocotools {theirs:?}"
        );
        assert_eq!(
            ours.to_bits(),
            theirs.to_bits(),
            "{key}: ours {ours:?}, pycocotools {theirs:?}"
        );
    }
}
