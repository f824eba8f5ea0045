//! Importers on small fixture files written in each benchmark's released format.

use std::path::{Path, PathBuf};

use groundrl_core::data::import::coco::{self, CocoStats, Mode, Subset};
use groundrl_core::data::import::{odvg, osworld_g, refcoco, screenspot, screenspot_pro};
use groundrl_score::data::{ImageRef, Loaded, Sample, Shape, Task};
use groundrl_score::frame::Frame;
use serde_json::json;

fn fixture(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/data")
        .join(relative)
}

fn boxes(sample: &Sample) -> Vec<[f64; 4]> {
    sample
        .targets
        .iter()
        .map(|t| match t.shape {
            Shape::Box(b) => b,
            ref other => panic!("expected a box, got {other:?}"),
        })
        .collect()
}

fn labels(sample: &Sample) -> Vec<&str> {
    sample
        .targets
        .iter()
        .map(|t| t.label.as_deref().unwrap_or(""))
        .collect()
}

/// `(record, field)` of each skipped record.
fn skipped(loaded: &Loaded) -> Vec<(&str, &str)> {
    loaded
        .skipped
        .iter()
        .map(|e| (e.record.as_str(), e.field.as_str()))
        .collect()
}

#[test]
fn screenspot_converts_xywh_and_reads_sizes_from_image_headers() {
    let images = fixture("screenspot/images");
    let loaded = screenspot::import(&fixture("screenspot/screenspot_mobile.json"), Some(&images)).unwrap();
    assert_eq!(loaded.samples.len(), 2);
    let first = &loaded.samples[0];
    assert_eq!(first.id, "screenspot/mobile/0");
    assert_eq!(first.source, "screenspot/mobile");
    assert_eq!(first.task, Task::PointGrounding);
    assert_eq!(first.frame, Frame::Pixel);
    let path = images.join("mobile_1.png").display().to_string();
    assert_eq!(
        first.images,
        vec![ImageRef {
            path,
            width: 40,
            height: 30
        }]
    );
    assert_eq!(boxes(first), vec![[4.0, 5.0, 14.0, 11.0]]);
    assert_eq!(first.metadata["data_type"], json!("icon"));
    assert_eq!(first.metadata["data_source"], json!("ios"));
    let second = &loaded.samples[1];
    assert_eq!((second.images[0].width, second.images[0].height), (24, 48));
    assert_eq!(boxes(second), vec![[0.5, 10.0, 20.5, 12.25]]);
    assert_eq!(second.instruction, "tap \"Sign in\"");
    assert_eq!(
        skipped(&loaded),
        vec![("record 2", "img_filename"), ("record 3", "bbox")]
    );
    assert!(
        loaded.skipped[0].problem.contains("missing.png"),
        "{}",
        loaded.skipped[0]
    );
    assert!(loaded.skipped[0].file.ends_with("screenspot_mobile.json"));
}

#[test]
fn screenspot_pro_keeps_xyxy_sizes_and_slice_fields() {
    let loaded = screenspot_pro::import(&fixture("screenspot_pro/pycharm_macos.json"), None).unwrap();
    assert_eq!(loaded.samples.len(), 2);
    let s = &loaded.samples[0];
    assert_eq!(s.id, "screenspot-pro/pycharm_macos_0");
    assert_eq!(s.source, "screenspot-pro/Dev");
    assert_eq!((s.images[0].width, s.images[0].height), (3840, 2160));
    assert!(
        s.images[0]
            .path
            .ends_with("screenspot_pro/pycharm_macos/screenshot_01.png")
    );
    assert_eq!(boxes(s), vec![[2532.0, 208.0, 2558.0, 234.0]]);
    for (key, value) in [
        ("platform", "macos"),
        ("application", "pycharm"),
        ("group", "Dev"),
        ("ui_type", "icon"),
    ] {
        assert_eq!(s.metadata[key], json!(value), "{key}");
    }
    assert_eq!(s.metadata["instruction_cn"], json!("运行当前文件"));
    assert!(!loaded.samples[1].metadata.contains_key("instruction_cn"));
    assert_eq!(
        skipped(&loaded),
        vec![
            ("record 2 (id pycharm_macos_2)", "targets[0].shape"),
            ("record 3 (id pycharm_macos_3)", "img_size")
        ]
    );
}

#[test]
fn osworld_g_boxes_polygons_and_refusals() {
    let loaded = osworld_g::import(&fixture("osworld_g/OSWorld-G.json"), None).unwrap();
    let [bbox, polygon, refusal] = loaded.samples.as_slice() else {
        panic!("expected 3 samples, got {:?}", loaded.samples);
    };
    assert_eq!(bbox.id, "osworld-g/1fFmeCFIJ2_0");
    assert_eq!((bbox.images[0].width, bbox.images[0].height), (1920, 1080));
    assert_eq!(boxes(bbox), vec![[100.0, 200.0, 150.0, 220.0]]);
    assert_eq!(bbox.metadata["GUI_types"], json!(["Button", "Text"]));
    assert_eq!(
        polygon.targets[0].shape,
        Shape::Polygon(vec![[10.0, 10.0], [30.0, 10.0], [30.0, 25.0], [10.0, 25.0]])
    );
    assert!(refusal.none && refusal.targets.is_empty());
    assert_eq!(refusal.metadata["box_type"], json!("refusal"));
    assert_eq!(skipped(&loaded), vec![("record 3 (id 1fFmeCFIJ2_3)", "box_type")]);
}

fn coco(subset: Subset, mode: Mode) -> (Loaded, CocoStats) {
    coco::import(
        &fixture("coco/instances_val2017.json"),
        Some(Path::new("/coco/val2017")),
        subset,
        mode,
    )
    .unwrap()
}

fn image_ids(loaded: &Loaded) -> Vec<u64> {
    loaded
        .samples
        .iter()
        .map(|s| s.metadata["image_id"].as_u64().unwrap())
        .collect()
}

#[test]
fn coco_full_all_mode_asks_every_category_and_keeps_empty_images_as_none() {
    let (loaded, stats) = coco(Subset::Full, Mode::All);
    assert_eq!(image_ids(&loaded), vec![1, 2, 3, 4, 5]);
    assert_eq!(
        stats,
        CocoStats {
            excluded_by_subset: 0,
            excluded_no_boxes: 0,
            crowd_boxes_skipped: 1
        }
    );
    // Bad annotations: unknown image, negative width.
    assert_eq!(
        skipped(&loaded),
        vec![("annotation id 128", "image_id"), ("annotation id 129", "bbox")]
    );
    let second = &loaded.samples[1];
    assert_eq!(second.id, "coco/val2017/2");
    assert_eq!(second.source, "coco/val2017");
    assert_eq!(second.instruction, "person, car, dog");
    assert_eq!(second.metadata["categories"], json!(["person", "car", "dog"]));
    assert_eq!(
        boxes(second),
        vec![[1.0, 2.0, 4.0, 6.0], [100.0, 100.0, 160.0, 130.0]]
    );
    assert_eq!(labels(second), vec!["person", "car"]);
    assert_eq!(
        second.images[0],
        ImageRef {
            path: "/coco/val2017/000000000002.jpg".into(),
            width: 640,
            height: 480
        }
    );
    let crowded = &loaded.samples[2];
    assert_eq!(
        labels(crowded),
        vec!["car", "car"],
        "the crowd person is not a target"
    );
    assert_eq!(crowded.metadata["crowd_categories"], json!(["person"]));
    let empty = &loaded.samples[3];
    assert!(empty.none && empty.targets.is_empty());
    assert_eq!(loaded.samples[0].targets.len(), 13);
}

#[test]
fn coco_positive_and_one_box_modes() {
    let (positive, stats) = coco(Subset::Full, Mode::Positive);
    assert_eq!(image_ids(&positive), vec![1, 2, 3, 5]);
    assert_eq!(stats.excluded_no_boxes, 1);
    assert_eq!(positive.samples[2].instruction, "car");
    assert_eq!(positive.samples[0].instruction, "person, dog");

    let (one_box, _) = coco(Subset::Full, Mode::OneBox);
    let third = &one_box.samples[2];
    assert_eq!(boxes(third), vec![[50.0, 50.0, 70.0, 70.0]], "the larger car");
    // Equal areas: the first box in file order.
    assert_eq!(boxes(&one_box.samples[3]), vec![[0.0, 100.0, 15.0, 115.0]]);
    assert_eq!(labels(&one_box.samples[0]), vec!["person", "dog"]);
    assert_eq!(one_box.samples[0].metadata["mode"], json!("one-box"));
}

#[test]
fn coco_pos_1_drops_categories_with_more_than_ten_boxes_in_the_image() {
    let (loaded, stats) = coco(Subset::Pos1, Mode::Positive);
    assert_eq!(image_ids(&loaded), vec![1, 2, 3, 5]);
    assert_eq!(stats.excluded_by_subset, 1);
    let first = &loaded.samples[0];
    assert_eq!(first.source, "coco/val2017/pos_1");
    assert_eq!(labels(first), vec!["dog"]);
    assert_eq!(first.metadata["dropped_categories"], json!(["person"]));
    // Ten dogs is not more than ten: kept.
    assert_eq!(loaded.samples[3].targets.len(), 10);
    // All mode still does not ask the dropped category.
    let (all, _) = coco(Subset::Pos1, Mode::All);
    assert_eq!(all.samples[0].instruction, "car, dog");
    assert_eq!(all.samples[1].instruction, "person, car, dog");
}

#[test]
fn coco_pos_2_and_pos_3() {
    let (pos2, stats2) = coco(Subset::Pos2, Mode::Positive);
    assert_eq!(image_ids(&pos2), vec![2]);
    assert_eq!(stats2.excluded_by_subset, 4);
    let (pos3, stats3) = coco(Subset::Pos3, Mode::Positive);
    assert_eq!(
        image_ids(&pos3),
        vec![2, 3, 5],
        "13 boxes is too many, 10 is not, no box is excluded"
    );
    assert_eq!(stats3.excluded_by_subset, 2);
}

#[test]
fn odvg_detection_and_grounding_lines() {
    let loaded = odvg::import(&fixture("odvg/o365_sample.jsonl"), Some(Path::new("/data"))).unwrap();
    let [detection, grounding] = loaded.samples.as_slice() else {
        panic!("expected 2 samples, got {:?}", loaded.samples);
    };
    assert_eq!(detection.id, "odvg/o365_sample/1");
    assert_eq!(detection.source, "odvg/o365_sample");
    assert_eq!(detection.task, Task::Detection);
    assert_eq!(
        detection.images[0],
        ImageRef {
            path: "/data/o365/obj_1.jpg".into(),
            width: 800,
            height: 600
        }
    );
    assert_eq!(detection.instruction, "person, cup");
    assert_eq!(labels(detection), vec!["person", "cup", "cup"]);
    assert_eq!(boxes(detection)[2], [400.0, 40.0, 460.0, 95.0]);
    assert_eq!(grounding.id, "odvg/o365_sample/4");
    assert_eq!(grounding.instruction, "a man, a brown horse");
    assert_eq!(grounding.metadata["caption"], json!("a man riding a brown horse"));
    let lines: Vec<&str> = loaded.skipped.iter().map(|e| e.record.as_str()).collect();
    assert_eq!(lines, vec!["line 3", "line 5"]);
    assert_eq!(loaded.skipped[1].field, "targets[0].shape");
}

#[test]
fn refcoco_one_sample_per_sentence() {
    let dir = fixture("refcoco/refcoco");
    let loaded = refcoco::import(&dir.join("refs.json"), &dir.join("instances.json"), None).unwrap();
    let ids: Vec<&str> = loaded.samples.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, vec!["refcoco/0/0", "refcoco/0/1", "refcoco/1/2"]);
    let first = &loaded.samples[0];
    assert_eq!(first.task, Task::ReferringExpression);
    assert_eq!(first.source, "refcoco/train");
    assert_eq!(first.instruction, "the lady");
    assert_eq!(
        boxes(first),
        vec![[103.93, 299.99, 103.93 + 134.22, 299.99 + 177.39]]
    );
    assert_eq!(labels(first), vec!["person"]);
    assert_eq!((first.images[0].width, first.images[0].height), (427, 640));
    assert!(
        first.images[0]
            .path
            .ends_with("refcoco/COCO_train2014_000000581857.jpg")
    );
    assert_eq!(loaded.samples[2].source, "refcoco/testA");
    assert_eq!(skipped(&loaded), vec![("ref_id 2", "ann_id")]);
}
