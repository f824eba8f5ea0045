//! Scoring completion text end to end (parser, frames, rewards), in parallel batches.

use groundrl_score::reward::{RewardInput, RewardSpec, score_batch, score_one};
use proptest::prelude::*;
use serde_json::json;

/// Every kind of reward, so that no reward escapes the never-panic test.
const ALL_KINDS: &str = r#"
[components.iou]
kind = "iou"
weight = 1
[components.iou_vlm]
kind = "iou"
weight = 1
overlap = "vlm_r1"
[components.giou]
kind = "giou"
weight = 1
[components.click]
kind = "point_in_box"
weight = 1
[components.gauss]
kind = "gaussian_point"
weight = 1
[components.cover]
kind = "gaussian_coverage"
weight = 1
[components.dense]
kind = "dense_distance"
weight = 1
[components.ap]
kind = "ap"
weight = 1
[components.ap50]
kind = "ap"
weight = 1
metric = "ap50"
length_penalty = true
[components.ws]
kind = "weighted_sum"
weight = 1
[components.ws_h]
kind = "weighted_sum"
weight = 1
matching = "hungarian"
[components.len]
kind = "cosine_length"
weight = 1
correct_from = "ws"
correct_threshold = 0.5
max_length = 100
[components.rep]
kind = "repetition"
weight = 1
[components.fmt]
kind = "format"
weight = 1
think_answer = true
[components.conf]
kind = "confidence"
weight = 1
correct_from = "iou"
correct_threshold = 0.5
rule = "log"
"#;

fn detection_record(completion: &str) -> RewardInput {
    let v = json!({"completion": completion, "num_tokens": 10, "target": {
        "boxes": [{"bbox": [0, 0, 10, 10], "label": "cat"}, {"bbox": [20, 0, 30, 10], "label": "cat"}],
        "frame": "pixel", "image_size": [100, 100], "resized_size": [100, 100]}});
    RewardInput::from_json_object(v.as_object().unwrap()).unwrap()
}

fn ap_spec() -> RewardSpec {
    RewardSpec::from_toml(
        "[components.ap]\nkind = \"ap\"\nweight = 1\n[components.ap50]\nkind = \"ap\"\nweight = 1\nmetric = \"ap50\"\n\
         [components.ws]\nkind = \"weighted_sum\"\nweight = 1\n",
    )
    .unwrap()
}

fn json_boxes(boxes: &[[u32; 4]]) -> String {
    let items: Vec<String> = boxes
        .iter()
        .map(|b| format!(r#"{{"bbox_2d": {b:?}, "label": "cat"}}"#))
        .collect();
    format!("```json\n[{}]\n```", items.join(", "))
}

#[test]
fn per_sample_ap_depends_on_listing_order() {
    let spec = ap_spec();
    let hit = [0, 0, 10, 10];
    let miss = [50, 50, 60, 60];
    let records = [
        detection_record(&json_boxes(&[hit, miss])),
        detection_record(&json_boxes(&[miss, hit])),
    ];
    let scored = score_batch(&spec, &records);
    let first = scored[0].as_ref().unwrap();
    let second = scored[1].as_ref().unwrap();
    // Every prediction scores 1.0, so listing order ranks them. Hit first: precision 1 up to recall
    // 1/2, i.e. at 51 of the 101 recall thresholds, at every IoU threshold: AP = 51/101.
    assert!((first.components[0] - 51.0 / 101.0).abs() < 1e-12, "{first:?}");
    assert!((first.components[1] - 51.0 / 101.0).abs() < 1e-12);
    // Miss first: precision 1/2 at those thresholds: AP = 25.5/101.
    assert!((second.components[0] - 25.5 / 101.0).abs() < 1e-12, "{second:?}");
    // weighted_sum does not care about order: position 1/2, miss 1/2, false alarm 1/2
    let ws = 0.7 * 0.5 + 0.3 * 0.5;
    assert!((first.components[2] - ws).abs() < 1e-12);
    assert!((second.components[2] - ws).abs() < 1e-12);
}

#[test]
fn batch_results_are_in_input_order() {
    let spec = ap_spec();
    let records: Vec<RewardInput> = (0..200)
        .map(|i| {
            if i % 2 == 0 {
                detection_record(&json_boxes(&[[0, 0, 10, 10], [20, 0, 30, 10]]))
            } else {
                detection_record("no idea")
            }
        })
        .collect();
    for (i, scored) in score_batch(&spec, &records).iter().enumerate() {
        let scored = scored.as_ref().unwrap();
        let expected = if i % 2 == 0 { 1.0 } else { 0.0 };
        assert_eq!(scored.components, vec![expected; 3], "record {i}");
        assert_eq!(scored.parse.ok, i % 2 == 0);
    }
}

/// configs/rewards/words-length.toml, the benchmarks' reward that varies within groups on random
/// weights: its documented values, read from words whatever the token count.
#[test]
fn words_length_spec_scores_words_not_tokens() {
    let spec = RewardSpec::from_toml(include_str!("../../../configs/rewards/words-length.toml")).unwrap();
    let record = |words: usize, num_tokens: u64| {
        let v = json!({"completion": vec!["w"; words].join(" "), "num_tokens": num_tokens, "target": {
            "boxes": [{"bbox": [0, 0, 10, 10], "label": ""}], "frame": "pixel", "image_size": [100, 100]}});
        RewardInput::from_json_object(v.as_object().unwrap()).unwrap()
    };
    // 0.5 (1 + cos(pi W / 32)) below 32 words, 0 from 32 on.
    for (words, expected) in [
        (0, 1.0),
        (2, 0.990_392_640_201_615_2),
        (16, 0.5),
        (31, 0.002_407_636_663_901_591),
        (32, 0.0),
        (90, 0.0),
    ] {
        for num_tokens in [1, 128] {
            let total = score_one(&spec, &record(words, num_tokens)).unwrap().total;
            assert!(
                (total - expected).abs() < 1e-12,
                "{words} words, {num_tokens} tokens: {total}"
            );
        }
    }
}

proptest! {
    #[test]
    fn no_completion_makes_any_reward_panic(text in any::<String>()) {
        let spec = RewardSpec::from_toml(ALL_KINDS).unwrap();
        let scored = score_one(&spec, &detection_record(&text)).unwrap();
        prop_assert!(scored.total.is_finite());
    }

    #[test]
    fn no_box_list_makes_any_reward_panic(
        boxes in proptest::collection::vec(proptest::array::uniform4(0u32..120), 0..6),
    ) {
        let spec = RewardSpec::from_toml(ALL_KINDS).unwrap();
        let scored = score_one(&spec, &detection_record(&json_boxes(&boxes))).unwrap();
        prop_assert!(scored.total.is_finite());
    }
}
