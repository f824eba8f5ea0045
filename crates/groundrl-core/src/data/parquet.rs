//! Samples as Parquet in verl's multimodal RL layout, so data made here trains in verl unchanged and
//! verl-layout files made here (or repaired ones) read back.
//!
//! One row per sample. Columns, as verl's `RLHFDataset` and the geo3k example read them:
//! - `data_source` (string): [`Sample::source`]; verl picks its reward function by it.
//! - `prompt` (list of struct `{role: string, content: string}`): the chat, each image of the message
//!   written as an `<image>` placeholder that verl expands in order. verl iterates this list itself,
//!   so it is stored as a list of structs (what geo3k writes), not as a JSON string: a JSON-string
//!   prompt is what some custom loaders want and stock verl cannot use. Both read back here.
//!   A sample without a rendered prompt is written with a bare one (its `<image>` placeholders, then
//!   the instruction) and flagged `extra_info.prompt_rendered = false`, so it reads back without one.
//! - `images` (list of struct `{image: string}`): the image paths. verl hands each struct to
//!   `qwen_vl_utils.fetch_image`, which opens `image` as a path. The Hugging Face `{bytes, path}`
//!   struct is not written: verl's `process_image` tries `bytes` whenever the key exists, even when
//!   null. On reading, `image` or `path` is taken; embedded bytes without a path are refused.
//! - `ability` (string): the task name (`point_grounding`, `detection`, ...).
//! - `reward_model` (struct `{style: "rule", ground_truth: string}`): `ground_truth` is a JSON object
//!   `{"task", "frame", "none", "image_sizes": [[w, h], ...], "targets": [...]}`: everything a reward
//!   needs, coordinates with their frame and the image sizes to convert them (fields in a fixed order).
//! - `extra_info` (struct `{id, index, split, instruction, prompt_rendered, metadata}`): `metadata`
//!   is the sample's metadata as a JSON string (its keys differ per dataset, a struct could not hold
//!   them all); `index` is the row number and `split` the caller's split name.
//!
//! Reading also accepts what files written by other tools hold: `data_source` as a one-element list, `prompt` as a JSON
//! string, message `content` as a list of `{"type": "text" | "image"}` pieces, and `images` as a list
//! of path strings.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Int64Array, ListArray, RecordBatch, StringArray, StructArray,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use groundrl_score::data::error::{DataError, FieldError, Loaded, from_json_value};
use groundrl_score::data::{Content, ImageRef, Message, Sample, Target, Task};
use groundrl_score::frame::Frame;

/// The placeholder verl's dataset replaces by an image, in order of appearance.
const IMAGE_PLACEHOLDER: &str = "<image>";

/// Rows per record batch when writing.
const BATCH_ROWS: usize = 4096;

/// `reward_model.ground_truth`, as JSON.
#[derive(Serialize, Deserialize)]
struct GroundTruth {
    task: Task,
    frame: Frame,
    none: bool,
    image_sizes: Vec<[u32; 2]>,
    targets: Vec<Target>,
}

fn string_field(name: &str) -> Field {
    Field::new(name, DataType::Utf8, false)
}

fn message_fields() -> Fields {
    Fields::from(vec![string_field("role"), string_field("content")])
}

fn image_fields() -> Fields {
    Fields::from(vec![string_field("image")])
}

fn reward_fields() -> Fields {
    Fields::from(vec![string_field("style"), string_field("ground_truth")])
}

fn extra_fields() -> Fields {
    Fields::from(vec![
        string_field("id"),
        Field::new("index", DataType::Int64, false),
        string_field("split"),
        string_field("instruction"),
        Field::new("prompt_rendered", DataType::Boolean, false),
        string_field("metadata"),
    ])
}

fn list_of(fields: Fields) -> DataType {
    DataType::List(Arc::new(Field::new("item", DataType::Struct(fields), false)))
}

/// The written schema (see the module doc).
pub fn verl_schema() -> Schema {
    Schema::new(vec![
        string_field("data_source"),
        Field::new("prompt", list_of(message_fields()), false),
        Field::new("images", list_of(image_fields()), false),
        string_field("ability"),
        Field::new("reward_model", DataType::Struct(reward_fields()), false),
        Field::new("extra_info", DataType::Struct(extra_fields()), false),
    ])
}

/// The verl messages of a sample: its prompt with `<image>` placeholders, or the bare fallback.
/// Refuses prompts that verl would read differently (images out of order, literal placeholders).
fn verl_messages(sample: &Sample) -> Result<Vec<(String, String)>, FieldError> {
    if sample.prompt.is_empty() {
        let content = IMAGE_PLACEHOLDER.repeat(sample.images.len()) + &sample.instruction;
        return Ok(vec![("user".to_string(), content)]);
    }
    let mut next_image = 0;
    let mut messages = Vec::with_capacity(sample.prompt.len());
    for (m, message) in sample.prompt.iter().enumerate() {
        let mut content = String::new();
        for (c, piece) in message.content.iter().enumerate() {
            let field = || format!("prompt[{m}].content[{c}]");
            match piece {
                Content::Text { text } if text.contains(IMAGE_PLACEHOLDER) => {
                    return Err(FieldError::new(field(), "text contains a literal <image>"));
                }
                Content::Text { text } => content.push_str(text),
                Content::Image { image } if *image != next_image => {
                    let problem = format!("image {image} comes where verl expects image {next_image}");
                    return Err(FieldError::new(field(), problem));
                }
                Content::Image { .. } => {
                    content.push_str(IMAGE_PLACEHOLDER);
                    next_image += 1;
                }
            }
        }
        messages.push((message.role.clone(), content));
    }
    Ok(messages)
}

fn strings<'a>(values: impl IntoIterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(values))
}

/// A non-null list-of-struct column from per-row lists of struct columns.
fn list_column(fields: Fields, lengths: Vec<usize>, columns: Vec<ArrayRef>) -> ArrayRef {
    let values = StructArray::new(fields.clone(), columns, None);
    let item = Arc::new(Field::new("item", DataType::Struct(fields), false));
    Arc::new(ListArray::new(
        item,
        OffsetBuffer::from_lengths(lengths),
        Arc::new(values),
        None,
    ))
}

/// One record batch of `samples` with their verl `messages`; its first row is row `first_index`.
fn batch(
    samples: &[Sample],
    messages: &[Vec<(String, String)>],
    first_index: usize,
    split: &str,
) -> Result<RecordBatch, ArrowError> {
    let flat = messages.iter().flatten();
    let prompt = list_column(
        message_fields(),
        messages.iter().map(Vec::len).collect(),
        vec![
            strings(flat.clone().map(|m| m.0.as_str())),
            strings(flat.map(|m| m.1.as_str())),
        ],
    );
    let images = list_column(
        image_fields(),
        samples.iter().map(|s| s.images.len()).collect(),
        vec![strings(
            samples
                .iter()
                .flat_map(|s| s.images.iter().map(|i| i.path.as_str())),
        )],
    );
    let truths: Vec<String> = samples.iter().map(ground_truth_json).collect();
    let reward_model = StructArray::new(
        reward_fields(),
        vec![
            strings(samples.iter().map(|_| "rule")),
            strings(truths.iter().map(String::as_str)),
        ],
        None,
    );
    let metadata: Vec<String> = samples.iter().map(|s| json!(s.metadata).to_string()).collect();
    let extra_info = StructArray::new(
        extra_fields(),
        vec![
            strings(samples.iter().map(|s| s.id.as_str())),
            Arc::new(Int64Array::from_iter_values(
                (0..samples.len()).map(|i| (first_index + i) as i64),
            )),
            strings(samples.iter().map(|_| split)),
            strings(samples.iter().map(|s| s.instruction.as_str())),
            Arc::new(BooleanArray::from_iter(
                samples.iter().map(|s| Some(!s.prompt.is_empty())),
            )),
            strings(metadata.iter().map(String::as_str)),
        ],
        None,
    );
    let columns: Vec<ArrayRef> = vec![
        strings(samples.iter().map(|s| s.source.as_str())),
        prompt,
        images,
        strings(samples.iter().map(|s| task_name(s.task))),
        Arc::new(reward_model),
        Arc::new(extra_info),
    ];
    RecordBatch::try_new(Arc::new(verl_schema()), columns)
}

fn task_name(task: Task) -> &'static str {
    match task {
        Task::PointGrounding => "point_grounding",
        Task::BoxGrounding => "box_grounding",
        Task::ReferringExpression => "referring_expression",
        Task::Detection => "detection",
    }
}

fn ground_truth_json(sample: &Sample) -> String {
    let truth = GroundTruth {
        task: sample.task,
        frame: sample.frame,
        none: sample.none,
        image_sizes: sample.images.iter().map(|i| [i.width, i.height]).collect(),
        targets: sample.targets.clone(),
    };
    serde_json::to_string(&truth).expect("ground truth is plain data")
}

/// Writes `samples` to `path` in verl's layout (snappy-compressed), `split` going to
/// `extra_info.split`. A sample whose prompt verl would misread fails the write, naming the sample.
pub fn write_parquet(path: &Path, samples: &[Sample], split: &str) -> Result<(), DataError> {
    let parquet_error = |e: parquet::errors::ParquetError| DataError::format(path, e);
    let file = File::create(path).map_err(|e| DataError::io(path, e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut writer =
        ArrowWriter::try_new(file, Arc::new(verl_schema()), Some(props)).map_err(parquet_error)?;
    for (chunk_index, chunk) in samples.chunks(BATCH_ROWS).enumerate() {
        let first = chunk_index * BATCH_ROWS;
        let located =
            |i: usize, e: FieldError| e.at(path, format!("sample {} (id {})", first + i, chunk[i].id));
        let messages: Vec<_> = (chunk.iter().enumerate())
            .map(|(i, s)| verl_messages(s).map_err(|e| located(i, e)))
            .collect::<Result<_, _>>()?;
        let batch = batch(chunk, &messages, first, split).map_err(|e| DataError::format(path, e))?;
        writer.write(&batch).map_err(parquet_error)?;
    }
    writer.close().map_err(parquet_error)?;
    Ok(())
}

/// Reads a verl-layout Parquet file; rows that do not make a valid sample are skipped as `row N`.
pub fn read_parquet(path: &Path) -> Result<Loaded, DataError> {
    let file = File::open(path).map_err(|e| DataError::io(path, e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .map_err(|e| DataError::format(path, e))?;
    let mut loaded = Loaded::default();
    let mut row_number = 0;
    for batch in reader {
        let batch = batch.map_err(|e| DataError::format(path, e))?;
        for row in 0..batch.num_rows() {
            let outcome = row_json(&batch, row).and_then(|r| row_to_sample(&r));
            loaded.push(outcome.map_err(|e| e.at(path, format!("row {row_number}"))));
            row_number += 1;
        }
    }
    Ok(loaded)
}

/// One row as a JSON object keyed by column name.
fn row_json(batch: &RecordBatch, row: usize) -> Result<Map<String, Value>, FieldError> {
    let schema = batch.schema();
    let mut object = Map::new();
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let value = cell(column.as_ref(), row).map_err(|e| FieldError::new(field.name(), e))?;
        object.insert(field.name().clone(), value);
    }
    Ok(object)
}

/// One cell as JSON. Binary cells become the string `<N bytes>`: only their presence matters here.
/// `Err` (here and in [`list_json`]) is the problem in words, which [`row_json`] files under the
/// column ([`FieldError`]): the file is refused, so no caller acts on which cell failed.
fn cell(array: &dyn Array, row: usize) -> Result<Value, String> {
    if array.is_null(row) {
        return Ok(Value::Null);
    }
    Ok(match array.data_type() {
        DataType::Utf8 => json!(array.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => json!(array.as_string::<i64>().value(row)),
        DataType::Utf8View => json!(array.as_string_view().value(row)),
        DataType::Boolean => json!(array.as_boolean().value(row)),
        DataType::Int32 => json!(array.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => json!(array.as_primitive::<Int64Type>().value(row)),
        DataType::UInt32 => json!(array.as_primitive::<UInt32Type>().value(row)),
        DataType::UInt64 => json!(array.as_primitive::<UInt64Type>().value(row)),
        DataType::Float32 => json!(array.as_primitive::<Float32Type>().value(row)),
        DataType::Float64 => json!(array.as_primitive::<Float64Type>().value(row)),
        DataType::Binary => json!(format!("<{} bytes>", array.as_binary::<i32>().value(row).len())),
        DataType::LargeBinary => json!(format!("<{} bytes>", array.as_binary::<i64>().value(row).len())),
        DataType::List(_) => list_json(array.as_list::<i32>().value(row).as_ref())?,
        DataType::LargeList(_) => list_json(array.as_list::<i64>().value(row).as_ref())?,
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let mut object = Map::new();
            for (field, column) in fields.iter().zip(s.columns()) {
                object.insert(field.name().clone(), cell(column.as_ref(), row)?);
            }
            Value::Object(object)
        }
        other => return Err(format!("column type {other} is not read by groundrl")),
    })
}

fn list_json(values: &dyn Array) -> Result<Value, String> {
    (0..values.len())
        .map(|i| cell(values, i))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// The groundrl fields of `extra_info`.
#[derive(Deserialize)]
struct ExtraInfo {
    id: String,
    instruction: String,
    #[serde(default = "rendered_by_default")]
    prompt_rendered: bool,
    #[serde(default)]
    metadata: Value,
}

/// A file without the flag was not written here: its prompt is the real one.
fn rendered_by_default() -> bool {
    true
}

fn row_to_sample(row: &Map<String, Value>) -> Result<Sample, FieldError> {
    let get = |name: &str| row.get(name).cloned().unwrap_or(Value::Null);
    let source = data_source(get("data_source"))?;
    let truth_text = get("reward_model")
        .get("ground_truth")
        .cloned()
        .unwrap_or(Value::Null);
    let truth: GroundTruth = match truth_text {
        Value::String(text) => serde_json::from_str(&text).map_err(|e| {
            FieldError::new(
                "reward_model.ground_truth",
                format!("not groundrl ground truth: {e}"),
            )
        })?,
        other => {
            return Err(FieldError::new(
                "reward_model.ground_truth",
                format!("expected a JSON string, got {other}"),
            ));
        }
    };
    let extra: ExtraInfo = from_json_value(get("extra_info")).map_err(|e| prefixed("extra_info", e))?;
    let paths = image_paths(get("images"))?;
    if paths.len() != truth.image_sizes.len() {
        let problem = format!(
            "{} images but ground truth gives {} sizes",
            paths.len(),
            truth.image_sizes.len()
        );
        return Err(FieldError::new("images", problem));
    }
    let prompt = if extra.prompt_rendered {
        messages(get("prompt"))?
    } else {
        Vec::new()
    };
    let sample = Sample {
        id: extra.id,
        source,
        task: truth.task,
        images: paths
            .into_iter()
            .zip(truth.image_sizes)
            .map(|(path, [width, height])| ImageRef { path, width, height })
            .collect(),
        instruction: extra.instruction,
        targets: truth.targets,
        frame: truth.frame,
        none: truth.none,
        prompt,
        metadata: metadata(extra.metadata)?,
    };
    sample.validate()?;
    Ok(sample)
}

fn prefixed(prefix: &str, e: FieldError) -> FieldError {
    let field = if e.field == "record" {
        prefix.to_string()
    } else {
        format!("{prefix}.{}", e.field)
    };
    FieldError {
        field,
        problem: e.problem,
    }
}

/// `data_source` as a string, or a one-element list of one (as some exporters write it).
fn data_source(value: Value) -> Result<String, FieldError> {
    match &value {
        Value::String(s) => return Ok(s.clone()),
        Value::Array(items) => {
            if let [Value::String(s)] = items.as_slice() {
                return Ok(s.clone());
            }
        }
        _ => {}
    }
    Err(FieldError::new(
        "data_source",
        format!("expected a string, got {value}"),
    ))
}

/// Image paths from structs with `image` or `path`, or from plain strings.
fn image_paths(value: Value) -> Result<Vec<String>, FieldError> {
    let Value::Array(items) = value else {
        return Err(FieldError::new("images", format!("expected a list, got {value}")));
    };
    let path_of = |(i, item): (usize, Value)| {
        let path = match &item {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) => ["image", "path"]
                .iter()
                .find_map(|k| o.get(*k).and_then(Value::as_str).map(String::from)),
            _ => None,
        };
        path.ok_or_else(|| {
            let problem = if item.get("bytes").is_some_and(|b| !b.is_null()) {
                "embedded image bytes without a path: groundrl reads images from files".to_string()
            } else {
                format!("expected a path, {{\"image\": path}} or {{\"path\": path}}, got {item}")
            };
            FieldError::new(format!("images[{i}]"), problem)
        })
    };
    items.into_iter().enumerate().map(path_of).collect()
}

/// verl messages (a list, or a JSON string of one) to canonical messages. String contents are split
/// at `<image>` placeholders, numbered in order over the whole prompt.
fn messages(value: Value) -> Result<Vec<Message>, FieldError> {
    let value = match value {
        Value::String(text) => serde_json::from_str(&text)
            .map_err(|e| FieldError::new("prompt", format!("not a JSON list of messages: {e}")))?,
        other => other,
    };
    #[derive(Deserialize)]
    struct VerlMessage {
        role: String,
        content: Value,
    }
    let verl: Vec<VerlMessage> = from_json_value(value).map_err(|e| prefixed("prompt", e))?;
    let mut next_image = 0;
    let mut out = Vec::with_capacity(verl.len());
    for (m, message) in verl.into_iter().enumerate() {
        let content = message_content(message.content, &mut next_image)
            .map_err(|problem| FieldError::new(format!("prompt[{m}].content"), problem))?;
        out.push(Message {
            role: message.role,
            content,
        });
    }
    Ok(out)
}

/// One verl message's content as pieces; `Err` is the problem in words, which [`messages`] files
/// under the message's field.
fn message_content(content: Value, next_image: &mut usize) -> Result<Vec<Content>, String> {
    let mut image = || {
        *next_image += 1;
        Content::Image {
            image: *next_image - 1,
        }
    };
    match content {
        Value::String(text) => {
            let mut pieces = Vec::new();
            for (k, part) in text.split(IMAGE_PLACEHOLDER).enumerate() {
                if k > 0 {
                    pieces.push(image());
                }
                if !part.is_empty() {
                    pieces.push(Content::Text { text: part.to_string() });
                }
            }
            Ok(pieces)
        }
        Value::Array(items) => items
            .into_iter()
            .map(|item| match (item.get("type").and_then(Value::as_str), item.get("text")) {
                (Some("image"), _) => Ok(image()),
                (Some("text"), Some(Value::String(text))) => Ok(Content::Text { text: text.clone() }),
                _ => Err(format!("expected {{\"type\": \"text\", \"text\": ...}} or {{\"type\": \"image\"}}, got {item}")),
            })
            .collect(),
        other => Err(format!("expected a string or a list of pieces, got {other}")),
    }
}

/// `extra_info.metadata`: a JSON string of an object, an object, or absent.
fn metadata(value: Value) -> Result<BTreeMap<String, Value>, FieldError> {
    let value = match value {
        Value::Null => return Ok(Default::default()),
        Value::String(text) => serde_json::from_str(&text)
            .map_err(|e| FieldError::new("extra_info.metadata", format!("not a JSON object: {e}")))?,
        other => other,
    };
    from_json_value(value).map_err(|e| prefixed("extra_info.metadata", e))
}
