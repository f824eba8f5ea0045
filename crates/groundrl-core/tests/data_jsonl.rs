//! JSON Lines: round trip, per-line errors naming line and field, skip-and-count vs strict.

use std::collections::BTreeMap;

use groundrl_core::data::jsonl::{read_jsonl, write_jsonl};
use groundrl_score::data::{Content, DataError, ImageRef, Message, Sample, Shape, Target, Task};
use groundrl_score::frame::Frame;
use serde_json::json;

fn sample(id: &str) -> Sample {
    Sample {
        id: id.into(),
        source: "screenspot/web".into(),
        task: Task::PointGrounding,
        images: vec![ImageRef {
            path: "img/a.png".into(),
            width: 1280,
            height: 720,
        }],
        instruction: "open the menu".into(),
        targets: vec![Target {
            shape: Shape::Box([1.0, 2.0, 3.5, 4.0]),
            label: Some("menu".into()),
        }],
        frame: Frame::Pixel,
        none: false,
        prompt: vec![Message {
            role: "user".into(),
            content: vec![
                Content::Image { image: 0 },
                Content::Text {
                    text: "open the menu".into(),
                },
            ],
        }],
        metadata: BTreeMap::from([("data_type".to_string(), json!("icon"))]),
    }
}

#[test]
fn round_trip_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let samples = vec![sample("a"), sample("b")];
    write_jsonl(&path, &samples).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 2);
    let loaded = read_jsonl(&path).unwrap();
    assert!(loaded.skipped.is_empty());
    assert_eq!(loaded.samples, samples);
}

#[test]
fn bad_lines_are_skipped_with_line_and_field_and_strict_mode_fails() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let good = serde_json::to_string(&sample("a")).unwrap();
    let mut inverted = sample("b");
    inverted.targets[0].shape = Shape::Box([5.0, 2.0, 3.0, 4.0]);
    let mut bad_prompt = sample("c");
    bad_prompt.prompt[0].content[0] = Content::Image { image: 3 };
    let lines = [
        good.clone(),
        String::new(),
        good.replace("\"task\":\"point_grounding\"", "\"task\":\"clicking\""),
        serde_json::to_string(&inverted).unwrap(),
        "{not json".to_string(),
        serde_json::to_string(&bad_prompt).unwrap(),
        good.replace("\"width\":1280", "\"width\":-5"),
    ];
    std::fs::write(&path, lines.join("\n")).unwrap();

    let loaded = read_jsonl(&path).unwrap();
    assert_eq!(loaded.samples.len(), 1);
    let found: Vec<(&str, &str)> = loaded
        .skipped
        .iter()
        .map(|e| (e.record.as_str(), e.field.as_str()))
        .collect();
    assert_eq!(
        found,
        vec![
            ("line 3", "task"),
            ("line 4", "targets[0].shape"),
            ("line 5", "record"),
            ("line 6", "prompt[0].content[0].image"),
            ("line 7", "images[0].width"),
        ]
    );
    let message = loaded.skipped[0].to_string();
    assert!(
        message.starts_with(&format!(
            "{}: line 3: task: unknown variant `clicking`",
            path.display()
        )),
        "{message}"
    );

    match read_jsonl(&path).unwrap().strict() {
        Err(DataError::Record(e)) => assert_eq!(e.record, "line 3"),
        other => panic!("strict mode should fail on line 3, got {other:?}"),
    }
}

#[test]
fn missing_file_names_the_path() {
    let err = read_jsonl(std::path::Path::new("/nonexistent/x.jsonl")).unwrap_err();
    assert!(err.to_string().starts_with("/nonexistent/x.jsonl: "), "{err}");
}
