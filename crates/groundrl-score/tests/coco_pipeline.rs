//! End-to-end COCO evaluation on small hand-computed cases, through the in-memory entry point.

use groundrl_score::metrics::coco::{Category, Counts, Detection, GroundTruth, GtAnnotation, evaluate};

/// pycocotools' precision of a run of true positives: 1 / (1 + eps).
const ONE: f64 = 1.0 / (1.0 + f64::EPSILON);

fn gt(annotations: &[(i64, i64, [f64; 4])], image_ids: &[i64], category_ids: &[i64]) -> GroundTruth {
    GroundTruth {
        image_ids: image_ids.to_vec(),
        categories: category_ids
            .iter()
            .map(|&id| Category {
                id,
                name: format!("c{id}"),
            })
            .collect(),
        annotations: annotations
            .iter()
            .enumerate()
            .map(|(i, &(image_id, category_id, bbox))| GtAnnotation {
                id: i as i64 + 1,
                image_id,
                category_id,
                bbox,
                area: bbox[2] * bbox[3],
                iscrowd: false,
            })
            .collect(),
    }
}

fn dt(image_id: i64, category_id: i64, bbox: [f64; 4], score: f64) -> Detection {
    Detection {
        image_id,
        category_id,
        bbox,
        score,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-15
}

#[test]
fn categories_without_ground_truth_are_skipped_without_detections_score_zero() {
    let b = [0.0, 0.0, 10.0, 10.0];
    // Category 1 found, category 2 missed, category 3 has only a stray detection; image 3 is empty.
    let gt = gt(&[(1, 1, b), (2, 2, b)], &[1, 2, 3], &[1, 2, 3]);
    let eval = evaluate(&gt, &[dt(1, 1, b, 0.9), dt(2, 3, b, 0.8)]).unwrap();
    assert!(
        close(eval.stats.ap, 0.5) && close(eval.stats.ap50, 0.5),
        "{:?}",
        eval.stats
    );
    assert!(close(eval.stats.ar100, 0.5));
    let aps: Vec<Option<f64>> = eval.per_category.iter().map(|c| c.ap).collect();
    assert!(aps[0].is_some_and(|ap| close(ap, 1.0)));
    assert_eq!(aps[1..], [Some(0.0), None]);
    // The stray detection of category 3 is a false positive for precision at 0.5.
    let expected = Counts {
        true_positives: 1,
        false_positives: 1,
        ground_truths: 2,
    };
    assert_eq!(eval.at50, expected);
    assert_eq!(
        (eval.at50.precision(), eval.at50.recall()),
        (Some(0.5), Some(0.5))
    );
}

#[test]
fn area_ranges_without_ground_truth_report_minus_one() {
    // One small (10x10) object found exactly: small AP ~1, medium and large have nothing to average.
    let b = [0.0, 0.0, 10.0, 10.0];
    let eval = evaluate(&gt(&[(1, 1, b)], &[1], &[1]), &[dt(1, 1, b, 1.0)]).unwrap();
    assert!(close(eval.stats.ap_small, ONE));
    assert_eq!((eval.stats.ap_medium, eval.stats.ap_large), (-1.0, -1.0));
    assert_eq!((eval.stats.ar_medium, eval.stats.ar_large), (-1.0, -1.0));
    assert_eq!(eval.stats.ar1, 1.0);
}

#[test]
fn no_ground_truth_gives_minus_one_everywhere_and_no_detection_zero() {
    let b = [0.0, 0.0, 10.0, 10.0];
    let eval = evaluate(&gt(&[], &[1], &[1]), &[dt(1, 1, b, 1.0)]).unwrap();
    assert!(eval.stats.to_array().iter().all(|&s| s == -1.0));
    // A small object and no detection: 0 where it counts, -1 for medium and large.
    let eval = evaluate(&gt(&[(1, 1, b)], &[1], &[1]), &[]).unwrap();
    let m = -1.0;
    assert_eq!(
        eval.stats.to_array(),
        [0.0, 0.0, 0.0, 0.0, m, m, 0.0, 0.0, 0.0, 0.0, m, m]
    );
}

#[test]
fn ties_across_images_keep_image_id_order() {
    // Equal scores: image 1's miss ranks before image 2's hit (ascending image id, whatever the
    // listing order), so precision at recall 1 is 1/2.
    let b = [0.0, 0.0, 10.0, 10.0];
    let far = [100.0, 100.0, 10.0, 10.0];
    let gt = gt(&[(2, 1, b)], &[2, 1], &[1]);
    let eval = evaluate(&gt, &[dt(2, 1, b, 0.5), dt(1, 1, far, 0.5)]).unwrap();
    assert_eq!(eval.stats.ap50, 0.5);
    // Scored higher, the hit ranks first whatever the image order.
    let eval = evaluate(&gt, &[dt(2, 1, b, 0.6), dt(1, 1, far, 0.5)]).unwrap();
    assert!(close(eval.stats.ap50, ONE));
}

#[test]
fn crowd_regions_absorb_detections() {
    // A crowd region with three detections inside and one real object found: AP ~1, nothing counts as FP.
    let mut gt = gt(
        &[
            (1, 1, [0.0, 0.0, 100.0, 100.0]),
            (1, 1, [200.0, 200.0, 10.0, 10.0]),
        ],
        &[1],
        &[1],
    );
    gt.annotations[0].iscrowd = true;
    let inside = |x| dt(1, 1, [x, x, 5.0, 5.0], 0.9);
    let dts = [
        inside(1.0),
        inside(20.0),
        inside(40.0),
        dt(1, 1, [200.0, 200.0, 10.0, 10.0], 0.1),
    ];
    let eval = evaluate(&gt, &dts).unwrap();
    assert!(close(eval.stats.ap, ONE));
    assert_eq!(
        eval.at50,
        Counts {
            true_positives: 1,
            false_positives: 0,
            ground_truths: 1
        }
    );
}
