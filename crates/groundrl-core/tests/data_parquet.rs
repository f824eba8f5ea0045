//! Parquet in verl's layout: exact round trip, the written schema, and reading verl-style variants.

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BinaryArray, ListArray, RecordBatch, StringArray, StructArray};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields, Schema};
use groundrl_core::data::parquet::{read_parquet, verl_schema, write_parquet};
use groundrl_score::data::{Content, ImageRef, Message, Sample, Shape, Target, Task};
use groundrl_score::frame::Frame;
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::json;

fn samples() -> Vec<Sample> {
    let image = |p: &str, w, h| ImageRef {
        path: p.into(),
        width: w,
        height: h,
    };
    let rendered = Sample {
        id: "ss/0".into(),
        source: "screenspot/web".into(),
        task: Task::PointGrounding,
        images: vec![image("a.png", 1280, 720), image("b.png", 640, 480)],
        instruction: "open the menu".into(),
        targets: vec![Target {
            shape: Shape::Box([1.0, 2.5, 3.0, 4.0]),
            label: None,
        }],
        frame: Frame::Pixel,
        none: false,
        prompt: vec![
            Message {
                role: "system".into(),
                content: vec![Content::Text {
                    text: "You ground.".into(),
                }],
            },
            Message {
                role: "user".into(),
                content: vec![
                    Content::Image { image: 0 },
                    Content::Text { text: "then ".into() },
                    Content::Image { image: 1 },
                    Content::Text {
                        text: "open the menu".into(),
                    },
                ],
            },
        ],
        metadata: BTreeMap::from([
            ("data_type".to_string(), json!("icon")),
            ("n".to_string(), json!(3)),
        ]),
    };
    let refusal = Sample {
        id: "og/1".into(),
        source: "osworld-g".into(),
        task: Task::PointGrounding,
        images: vec![image("c.png", 1920, 1080)],
        instruction: "click the missing thing".into(),
        targets: vec![],
        frame: Frame::Pixel,
        none: true,
        prompt: vec![],
        metadata: BTreeMap::new(),
    };
    let polygon = Sample {
        id: "og/2".into(),
        source: "osworld-g".into(),
        task: Task::Detection,
        images: vec![image("d.png", 100, 100)],
        instruction: "cat, dog".into(),
        targets: vec![
            Target {
                shape: Shape::Polygon(vec![[0.0, 0.0], [5.0, 0.0], [5.0, 5.0]]),
                label: Some("cat".into()),
            },
            Target {
                shape: Shape::Point([0.25, 0.5]),
                label: Some("dog".into()),
            },
        ],
        frame: Frame::Normalized,
        none: false,
        prompt: vec![],
        metadata: BTreeMap::from([("GUI_types".to_string(), json!(["Slider"]))]),
    };
    vec![rendered, refusal, polygon]
}

#[test]
fn round_trip_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train.parquet");
    write_parquet(&path, &samples(), "train").unwrap();
    let loaded = read_parquet(&path).unwrap();
    assert!(loaded.skipped.is_empty(), "{:?}", loaded.skipped);
    assert_eq!(loaded.samples, samples());
}

#[test]
fn written_file_has_verl_columns_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("val.parquet");
    write_parquet(&path, &samples(), "val").unwrap();
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let batch = reader.into_iter().next().unwrap().unwrap();
    assert_eq!(batch.schema().as_ref(), &verl_schema());
    let schema = verl_schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "data_source",
            "prompt",
            "images",
            "ability",
            "reward_model",
            "extra_info"
        ]
    );

    let prompt = batch.column(1).as_any().downcast_ref::<ListArray>().unwrap();
    let first = prompt.value(0);
    let messages = first.as_any().downcast_ref::<StructArray>().unwrap();
    let content = messages.column(1).as_any().downcast_ref::<StringArray>().unwrap();
    assert_eq!(content.value(1), "<image>then <image>open the menu");
    // A sample without a rendered prompt gets the bare one verl needs.
    let bare = prompt.value(1);
    let bare = bare.as_any().downcast_ref::<StructArray>().unwrap();
    let bare = bare.column(1).as_any().downcast_ref::<StringArray>().unwrap();
    assert_eq!(bare.value(0), "<image>click the missing thing");

    let reward = batch.column(4).as_any().downcast_ref::<StructArray>().unwrap();
    let truth = reward.column(1).as_any().downcast_ref::<StringArray>().unwrap();
    assert_eq!(
        truth.value(0),
        r#"{"task":"point_grounding","frame":"pixel","none":false,"image_sizes":[[1280,720],[640,480]],"targets":[{"shape":{"type":"box","coords":[1.0,2.5,3.0,4.0]}}]}"#
    );
    let extra = batch.column(5).as_any().downcast_ref::<StructArray>().unwrap();
    let split = extra
        .column_by_name("split")
        .unwrap()
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert_eq!(split.value(2), "val");
}

#[test]
fn refuses_prompts_verl_would_misread() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = samples();
    bad[0].prompt[1].content.swap(0, 2);
    let err = write_parquet(&dir.path().join("x.parquet"), &bad, "train").unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("sample 0 (id ss/0): prompt[1].content[0]: image 1 comes where verl expects image 0"),
        "{text}"
    );
}

fn strings(values: &[Option<&str>]) -> ArrayRef {
    Arc::new(StringArray::from(values.to_vec()))
}

fn utf8(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

/// A one-element list per row over `values`.
fn singleton_lists(values: ArrayRef) -> ArrayRef {
    let item = Arc::new(Field::new("item", values.data_type().clone(), true));
    let lengths = vec![1; values.len()];
    Arc::new(ListArray::new(
        item,
        OffsetBuffer::from_lengths(lengths),
        values,
        None,
    ))
}

/// Rows as verl's example preprocessors and the Hugging Face `datasets` writer make them: `data_source` as a
/// list, `prompt` as a JSON string, `images` as `{bytes, path}` structs, an `extra_info` without our flags.
#[test]
fn reads_verl_style_variants_and_reports_bad_rows() {
    let truth = r#"{"task":"point_grounding","frame":"pixel","none":false,"image_sizes":[[200,100]],"targets":[{"shape":{"type":"point","coords":[5.0,6.0]}}]}"#;
    let image_fields = Fields::from(vec![Field::new("bytes", DataType::Binary, true), utf8("path")]);
    let images = StructArray::new(
        image_fields,
        vec![
            Arc::new(BinaryArray::from(vec![None, Some(b"\x89PNG".as_ref())])),
            strings(&[Some("/img/a.png"), None]),
        ],
        None,
    );
    let reward = StructArray::new(
        Fields::from(vec![utf8("style"), utf8("ground_truth")]),
        vec![
            strings(&[Some("rule"), Some("rule")]),
            strings(&[Some(truth), Some(truth)]),
        ],
        None,
    );
    let extra = StructArray::new(
        Fields::from(vec![utf8("id"), utf8("instruction")]),
        vec![
            strings(&[Some("v/0"), Some("v/1")]),
            strings(&[Some("click OK"), Some("click OK")]),
        ],
        None,
    );
    let prompt = r#"[{"role": "user", "content": "<image>click OK"}]"#;
    let columns: Vec<ArrayRef> = vec![
        singleton_lists(strings(&[Some("arc_vision"), Some("arc_vision")])),
        strings(&[Some(prompt), Some(prompt)]),
        singleton_lists(Arc::new(images)),
        strings(&[Some("grounding"), Some("grounding")]),
        Arc::new(reward),
        Arc::new(extra),
    ];
    let fields: Vec<Field> = [
        "data_source",
        "prompt",
        "images",
        "ability",
        "reward_model",
        "extra_info",
    ]
    .iter()
    .zip(&columns)
    .map(|(name, c)| Field::new(*name, c.data_type().clone(), true))
    .collect();
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("verl.parquet");
    let mut writer = ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();

    let loaded = read_parquet(&path).unwrap();
    assert_eq!(loaded.samples.len(), 1);
    let s = &loaded.samples[0];
    assert_eq!(s.id, "v/0");
    assert_eq!(s.source, "arc_vision");
    assert_eq!(
        s.images,
        vec![ImageRef {
            path: "/img/a.png".into(),
            width: 200,
            height: 100
        }]
    );
    assert_eq!(
        s.targets,
        vec![Target {
            shape: Shape::Point([5.0, 6.0]),
            label: None
        }]
    );
    assert_eq!(
        s.prompt,
        vec![Message {
            role: "user".into(),
            content: vec![
                Content::Image { image: 0 },
                Content::Text {
                    text: "click OK".into()
                }
            ]
        }]
    );
    assert_eq!(loaded.skipped.len(), 1);
    let bad = &loaded.skipped[0];
    assert_eq!((bad.record.as_str(), bad.field.as_str()), ("row 1", "images[0]"));
    assert!(bad.problem.contains("embedded image bytes"), "{}", bad.problem);
}
