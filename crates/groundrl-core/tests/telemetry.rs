//! Telemetry: rollout statistics against hand-computed values, the step record and its JSONL log,
//! TensorBoard files read back byte by byte, and health alarms on synthetic histories.

use groundrl_core::telemetry::record::keys;
use groundrl_core::telemetry::stats::target_size;
use groundrl_core::telemetry::{
    Accuracy, Alarm, CompletionRecord, EventWriter, HealthConfig, HealthMonitor, JsonlLog, RolloutStats,
    Scalars, StepRecord, TelemetryError,
};
use groundrl_score::frame::Frame;

fn completion(group: usize, source: &str, reward: f64, components: [f64; 2]) -> CompletionRecord {
    CompletionRecord {
        group,
        source: source.into(),
        reward,
        components: components.to_vec(),
        correct: None,
        iou: None,
        response_tokens: 0,
        truncated: false,
        parse_ok: true,
        frame: None,
        confidence: None,
        ..Default::default()
    }
}

fn names() -> Vec<String> {
    vec!["iou".into(), "format".into()]
}

/// Five completions in three groups; the expected values below are worked out by hand.
fn five_completions() -> Vec<CompletionRecord> {
    let mut r = vec![
        completion(0, "refcoco", 1.0, [1.0, 0.0]),
        completion(0, "refcoco", 0.0, [0.0, 0.0]),
        completion(1, "screenspot", 0.5, [0.5, 0.0]),
        completion(1, "osworld", 0.5, [0.0, 1.0]),
        completion(2, "refcoco", 0.25, [0.25, 0.0]),
    ];
    let correct = [Some(true), Some(false), Some(true), None, Some(false)];
    let iou = [Some(0.8), Some(0.2), None, None, Some(0.3)];
    let tokens = [10, 20, 30, 40, 5];
    let frames = [
        Some(Frame::Pixel),
        Some(Frame::Resized),
        Some(Frame::Pixel),
        None,
        Some(Frame::Normalized),
    ];
    let confidence = [Some(0.9), Some(0.6), None, Some(0.5), Some(0.7)];
    for (i, c) in r.iter_mut().enumerate() {
        c.correct = correct[i];
        c.iou = iou[i];
        c.response_tokens = tokens[i];
        c.frame = frames[i];
        c.confidence = confidence[i];
    }
    r[2].truncated = true;
    r[3].parse_ok = false;
    r[4].excess_boxes = 3;
    r
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn rollout_stats_match_hand_computed_values() {
    let s = RolloutStats::compute(&five_completions(), &names()).unwrap();
    assert_eq!((s.completions, s.groups), (5, 3));
    // Rewards 1, 0, .5, .5, .25: mean .45, squared deviations sum to .55, population std sqrt(.11).
    assert!(close(s.reward.mean, 0.45));
    assert!(close(s.reward.std, 0.11f64.sqrt()));
    assert_eq!((s.reward.min, s.reward.max), (0.0, 1.0));
    // iou 1, 0, .5, 0, .25: mean .35, variance .7 / 5; format 0, 0, 0, 1, 0: mean .2, std .4.
    let iou = s.components["iou"];
    assert!(close(iou.mean, 0.35) && close(iou.std, 0.14f64.sqrt()));
    let format = s.components["format"];
    assert!(close(format.mean, 0.2) && close(format.std, 0.4));
    assert_eq!(
        s.accuracy,
        Accuracy {
            judged: 4,
            correct: 2,
            share: Some(0.5)
        }
    );
    assert!(close(s.mean_iou.unwrap(), 1.3 / 3.0));
    assert_eq!(
        (s.length.mean, s.length.max, s.length.truncated_share),
        (21.0, 40, 0.2)
    );
    assert_eq!(s.parse_failure_rate, 0.2);
    assert_eq!(s.excess_boxes_share, 0.2);
    let frames: Vec<(&str, usize)> = s.frames.iter().map(|(k, &v)| (k.as_str(), v)).collect();
    assert_eq!(
        frames,
        [
            ("none", 1),
            ("normalized", 1),
            ("pixel", 2),
            ("qwen1000", 0),
            ("resized", 1)
        ]
    );
    // Pairs (.9, 1), (.6, 0), (.7, 0): Sxy = 1/6, Sxx = 7/150, Syy = 2/3, r² = 25/28.
    assert_eq!(s.confidence.count, 3);
    assert!(close(s.confidence.pearson.unwrap(), (25.0f64 / 28.0).sqrt()));
    // Group 0 has rewards 1 and 0; group 1 has .5 twice; group 2 has one completion.
    assert!(close(s.zero_variance_group_share, 2.0 / 3.0));
    let refcoco = s.sources["refcoco"];
    assert_eq!((refcoco.judged, refcoco.correct), (3, 1));
    assert!(close(refcoco.share.unwrap(), 1.0 / 3.0));
    assert_eq!(s.sources["screenspot"].share, Some(1.0));
    assert_eq!(s.sources["osworld"], Accuracy::default());
}

#[test]
fn missing_statistics_are_null_never_nan() {
    // Nothing judged, no IoU, every stated confidence with a right answer (correctness constant).
    let mut records = vec![
        completion(0, "s", 0.0, [0.0, 0.0]),
        completion(0, "s", 0.0, [0.0, 0.0]),
    ];
    records[0].confidence = Some(0.3);
    let s = RolloutStats::compute(&records, &names()).unwrap();
    assert_eq!(
        (s.accuracy.share, s.mean_iou, s.confidence.pearson),
        (None, None, None)
    );
    assert_eq!(s.confidence.count, 0);
    records[0].correct = Some(true);
    records[1].correct = Some(true);
    records[1].confidence = Some(0.9);
    let s = RolloutStats::compute(&records, &names()).unwrap();
    assert_eq!((s.confidence.count, s.confidence.pearson), (2, None));
    let json = serde_json::to_value(step_record(1, s)).unwrap();
    assert_eq!(json["rollout"]["mean_iou"], serde_json::Value::Null);
    assert_eq!(json["rollout"]["confidence"]["pearson"], serde_json::Value::Null);
    assert!(!json.to_string().contains("NaN"));
}

#[test]
fn bad_input_is_refused_with_the_record_and_field_named() {
    let err = |records: &[CompletionRecord], names: &[String]| {
        RolloutStats::compute(records, names).unwrap_err().to_string()
    };
    assert_eq!(err(&[], &names()), "no completions to summarize");
    let mut records = five_completions();
    records[3].reward = f64::NAN;
    assert_eq!(err(&records, &names()), "records[3].reward: NaN is not finite");
    let mut records = five_completions();
    records[1].components.pop();
    assert_eq!(
        err(&records, &names()),
        "records[1].components: 1 values for 2 component names"
    );
    let mut records = five_completions();
    records[4].components[1] = f64::INFINITY;
    assert_eq!(
        err(&records, &names()),
        "records[4].components[1]: inf is not finite"
    );
    let mut records = five_completions();
    records[0].confidence = Some(f64::NAN);
    assert_eq!(
        err(&records, &names()),
        "records[0].confidence: NaN is not finite"
    );
    let twice = vec!["iou".to_string(), "iou".to_string()];
    assert_eq!(
        err(&five_completions(), &twice),
        "component_names: `iou` is named twice"
    );
}

/// `five_completions` where the first four called tools: calls 1, 2, 0 and 3, of which 1, 1, 0 and 0
/// ran; the last answer is right.
fn tool_completions() -> Vec<CompletionRecord> {
    let mut r = five_completions();
    r[4].correct = Some(true);
    // (calls, of which ran, the others by outcome) of the first four completions.
    let calls = [
        (1, 1, vec![]),
        (2, 1, vec![("malformed", 1)]),
        (0, 0, vec![]),
        (3, 0, vec![("turn_limit", 1), ("unknown_tool", 2)]),
    ];
    for (record, (calls, ok, failures)) in r.iter_mut().zip(calls) {
        record.tool_calls = calls;
        record.tool_calls_ok = ok;
        record.tool_call_failures = failures.into_iter().map(|(k, n)| (k.to_string(), n)).collect();
    }
    r
}

#[test]
fn tool_use_statistics_match_hand_computed_values() {
    let s = RolloutStats::compute(&tool_completions(), &names()).unwrap();
    // Completions 0 and 1 ran a call: 2 of 5. Calls 1 + 2 + 0 + 3 + 0 = 6 over 5 completions.
    assert_eq!(s.tool_use_rate, 0.4);
    assert!(close(s.tool_calls_per_sample, 1.2));
    assert_eq!(s.tool_calls, 6);
    let failures: Vec<(&str, u64)> = s
        .tool_call_failures
        .iter()
        .map(|(k, &v)| (k.as_str(), v))
        .collect();
    assert_eq!(
        failures,
        [("malformed", 1), ("turn_limit", 1), ("unknown_tool", 2)]
    );
    // With tools: completions 0 (right) and 1 (wrong). Without: 2 (right), 3 (not judged), 4 (right).
    assert_eq!(
        s.accuracy_with_tools,
        Accuracy {
            judged: 2,
            correct: 1,
            share: Some(0.5)
        }
    );
    assert_eq!(
        s.accuracy_without_tools,
        Accuracy {
            judged: 2,
            correct: 2,
            share: Some(1.0)
        }
    );
    let scalars = step_record(1, s.clone()).scalars();
    let get = |tag: &str| scalars.iter().find(|(t, _)| t == tag).map(|&(_, v)| v);
    assert_eq!(get("tools/use_rate"), Some(0.4));
    assert_eq!(get("tools/accuracy_with"), Some(0.5));
    assert_eq!(get("tools/accuracy_without"), Some(1.0));
    // Failed calls per completion: 1 / 5 and 2 / 5; no tag for an outcome that did not occur.
    assert_eq!(get("tools/failures/malformed"), Some(0.2));
    assert_eq!(get("tools/failures/unknown_tool"), Some(0.4));
    assert_eq!(get("tools/failures/failed"), None);
    // The step log keeps the totals.
    let json = serde_json::to_value(step_record(1, s)).unwrap();
    assert_eq!(json["rollout"]["tool_call_failures"]["unknown_tool"], 2);
    assert_eq!(json["rollout"]["accuracy_with_tools"]["correct"], 1);
}

#[test]
fn a_step_logged_before_tools_existed_reads_with_no_tool_use() {
    let s = RolloutStats::compute(&tool_completions(), &names()).unwrap();
    let mut json = serde_json::to_value(step_record(4, s)).unwrap();
    let rollout = json["rollout"].as_object_mut().unwrap();
    for field in [
        "tool_use_rate",
        "tool_calls_per_sample",
        "tool_calls",
        "tool_call_failures",
        "accuracy_with_tools",
        "accuracy_without_tools",
    ] {
        assert!(rollout.remove(field).is_some(), "{field}");
    }
    let old: StepRecord = serde_json::from_value(json).unwrap();
    let r = &old.rollout;
    assert_eq!(
        (r.tool_use_rate, r.tool_calls_per_sample, r.tool_calls),
        (0.0, 0.0, 0)
    );
    assert!(r.tool_call_failures.is_empty());
    assert_eq!(r.accuracy_with_tools, Accuracy::default());
    assert_eq!(r.reward.mean, 0.45);
}

#[test]
fn tool_counts_that_do_not_add_up_are_refused() {
    let err =
        |records: &[CompletionRecord]| RolloutStats::compute(records, &names()).unwrap_err().to_string();
    let mut records = tool_completions();
    records[0].tool_calls_ok = 2;
    assert_eq!(
        err(&records),
        "records[0].tool_calls: 1 calls, but 2 ok and 0 failed"
    );
    let mut records = tool_completions();
    records[3].tool_call_failures.insert("failed".into(), 1);
    assert_eq!(
        err(&records),
        "records[3].tool_calls: 3 calls, but 0 ok and 4 failed"
    );
    let mut records = tool_completions();
    records[2].confidence_before = Some(f64::NAN);
    assert_eq!(err(&records), "records[2].confidence_before: NaN is not finite");
    let mut records = tool_completions();
    records[1].target_size = Some(f64::INFINITY);
    assert_eq!(err(&records), "records[1].target_size: inf is not finite");
}

#[test]
fn target_size_is_the_largest_targets_smaller_side_over_the_images() {
    // A 40 x 20 box in a 200 x 100 image: 20 / 100.
    assert_eq!(target_size(&[[10.0, 20.0, 50.0, 40.0]], 200.0, 100.0), Some(0.2));
    // Of a 5 x 5 box (0.05) and a 30 x 20 one (0.2), the larger; corners in any order.
    assert_eq!(
        target_size(&[[0.0, 0.0, 5.0, 5.0], [40.0, 30.0, 10.0, 10.0]], 200.0, 100.0),
        Some(0.2)
    );
    assert_eq!(target_size(&[], 200.0, 100.0), None);
    assert_eq!(target_size(&[[0.0, 0.0, 5.0, 5.0]], 0.0, 100.0), None);
}

fn step_record(step: u64, rollout: RolloutStats) -> StepRecord {
    StepRecord {
        step,
        epoch: 0,
        rollout,
        train: Scalars::default(),
        alarms: Vec::new(),
    }
}

#[test]
fn scalars_refuse_non_finite_values() {
    let mut train = Scalars::default();
    train.insert(keys::KL, 0.01).unwrap();
    let err = train.insert(keys::LOSS, f64::NAN).unwrap_err();
    assert_eq!(err.to_string(), "train.loss: NaN is not finite");
    assert_eq!((train.get(keys::KL), train.get(keys::LOSS)), (Some(0.01), None));
}

#[test]
fn a_step_record_flattens_to_tagged_scalars() {
    let mut record = step_record(7, RolloutStats::compute(&five_completions(), &names()).unwrap());
    record.epoch = 2;
    record.train.insert(keys::KL, 0.125).unwrap();
    record.train.insert(keys::TIME_STEP, 3.5).unwrap();
    let scalars = record.scalars();
    let get = |tag: &str| scalars.iter().find(|(t, _)| t == tag).map(|&(_, v)| v);
    assert_eq!(get("epoch"), Some(2.0));
    assert_eq!(get("reward/max"), Some(1.0));
    assert_eq!(get("reward/iou/mean"), Some(0.35));
    assert!(close(get("reward/format/std").unwrap(), 0.4));
    assert_eq!(get("accuracy"), Some(0.5));
    assert_eq!(get("length/mean"), Some(21.0));
    assert_eq!(get("length/max"), Some(40.0));
    assert_eq!(get("parse/failure_rate"), Some(0.2));
    assert_eq!(get("parse/excess_boxes_share"), Some(0.2));
    assert_eq!(get("frame/pixel"), Some(0.4));
    assert_eq!(get("confidence/count"), Some(3.0));
    assert_eq!(get("source/screenspot/accuracy"), Some(1.0));
    assert_eq!(get("batch/groups"), Some(3.0));
    assert_eq!(get("train/kl"), Some(0.125));
    assert_eq!(get("train/time/step"), Some(3.5));
    // osworld judged nothing: no accuracy tag for it rather than a made-up number.
    assert_eq!(get("source/osworld/accuracy"), None);
    // No tool call: the rates are 0, no failure is listed and every judged answer is one without.
    assert_eq!(get("tools/use_rate"), Some(0.0));
    assert_eq!(get("tools/calls_per_sample"), Some(0.0));
    assert_eq!(get("tools/accuracy_without"), Some(0.5));
    assert_eq!(get("tools/accuracy_with"), None);
    // 1 epoch + 4 reward + 8 component + accuracy + iou + 3 length + 2 parse + 5 frames + 2 confidence
    // + zero-variance share + 2 sources + 3 tools + 2 batch + 2 train.
    assert_eq!(scalars.len(), 37);
    assert!(scalars.iter().all(|(_, v)| v.is_finite()));
}

#[test]
fn the_jsonl_log_appends_one_line_per_record_across_reopenings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("steps.jsonl");
    let rollout = RolloutStats::compute(&five_completions(), &names()).unwrap();
    let mut log = JsonlLog::open(&path).unwrap();
    log.append(&step_record(1, rollout.clone())).unwrap();
    log.append(&step_record(2, rollout.clone())).unwrap();
    drop(log);
    // A crash cut the next line short; the resumed run's first record must still get its own line.
    std::fs::write(
        &path,
        std::fs::read_to_string(&path).unwrap() + "{\"step\": 3, \"roll",
    )
    .unwrap();
    let mut log = JsonlLog::open(&path).unwrap();
    let mut resumed = step_record(3, rollout);
    resumed.train.insert(keys::GRAD_NORM, 0.5).unwrap();
    log.append(&resumed).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[2], "{\"step\": 3, \"roll");
    let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let last: serde_json::Value = serde_json::from_str(lines[3]).unwrap();
    assert_eq!(first["step"], 1);
    assert_eq!(first["rollout"]["reward"]["mean"], 0.45);
    assert_eq!(first["rollout"]["accuracy"]["share"], 0.5);
    assert_eq!(first["rollout"]["frames"]["pixel"], 2);
    assert_eq!(last["step"], 3);
    assert_eq!(last["train"]["grad_norm"], 0.5);
    assert!(text.ends_with('\n'));
}

#[test]
fn a_jsonl_log_in_a_missing_folder_is_an_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("steps.jsonl");
    let err = JsonlLog::open(&path).unwrap_err();
    assert!(matches!(err, TelemetryError::Io { .. }));
    assert!(err.to_string().starts_with(&path.display().to_string()));
}

/// A TFRecord reader written from the format's description, independent of the writer.
mod tfrecord {
    fn masked_crc(bytes: &[u8]) -> u32 {
        let c = crc32c::crc32c(bytes);
        c.rotate_right(15).wrapping_add(0xa282ead8)
    }

    fn u32_at(bytes: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
    }

    /// The records' data, checking both CRCs of each.
    pub fn records(mut bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let length = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            assert_eq!(u32_at(bytes, 8), masked_crc(&bytes[..8]), "length CRC");
            let data = &bytes[12..12 + length];
            assert_eq!(u32_at(bytes, 12 + length), masked_crc(data), "data CRC");
            out.push(data.to_vec());
            bytes = &bytes[16 + length..];
        }
        out
    }

    #[derive(Debug, Default)]
    pub struct Event {
        pub wall_time: f64,
        pub step: u64,
        pub file_version: Option<String>,
        pub values: Vec<(String, f32)>,
    }

    /// Protobuf fields of a message as (field number, payload); varints are returned as their value's
    /// little-endian bytes.
    fn fields(mut bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let key = varint(&mut bytes);
            let payload = match key & 7 {
                0 => varint(&mut bytes).to_le_bytes().to_vec(),
                1 => take(&mut bytes, 8),
                2 => {
                    let n = varint(&mut bytes) as usize;
                    take(&mut bytes, n)
                }
                5 => take(&mut bytes, 4),
                wire => panic!("unexpected wire type {wire}"),
            };
            out.push((key >> 3, payload));
        }
        out
    }

    fn varint(bytes: &mut &[u8]) -> u64 {
        let mut value = 0;
        for shift in (0..64).step_by(7) {
            let b = take(bytes, 1)[0];
            value |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
        }
        value
    }

    fn take(bytes: &mut &[u8], n: usize) -> Vec<u8> {
        let (head, tail) = bytes.split_at(n);
        *bytes = tail;
        head.to_vec()
    }

    pub fn event(data: &[u8]) -> Event {
        let mut e = Event::default();
        for (field, payload) in fields(data) {
            match field {
                1 => e.wall_time = f64::from_le_bytes(payload.try_into().unwrap()),
                2 => e.step = u64::from_le_bytes(payload.try_into().unwrap()),
                3 => e.file_version = Some(String::from_utf8(payload).unwrap()),
                5 => {
                    for (value_field, value) in fields(&payload) {
                        assert_eq!(value_field, 1, "Summary.value");
                        e.values.push(summary_value(&value));
                    }
                }
                other => panic!("unexpected Event field {other}"),
            }
        }
        e
    }

    fn summary_value(bytes: &[u8]) -> (String, f32) {
        let (mut tag, mut value) = (String::new(), f32::NAN);
        for (field, payload) in fields(bytes) {
            match field {
                1 => tag = String::from_utf8(payload).unwrap(),
                2 => value = f32::from_le_bytes(payload.try_into().unwrap()),
                other => panic!("unexpected Summary.Value field {other}"),
            }
        }
        (tag, value)
    }
}

#[test]
fn an_event_file_reads_back_as_tensorboard_expects() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("tb");
    let mut writer = EventWriter::create(&logs).unwrap();
    writer
        .add_scalars(1, &[("reward/mean", 0.45), ("train/kl", 0.001)])
        .unwrap();
    writer
        .add_scalars(300, &[("length/mean".to_string(), 21.0)])
        .unwrap();
    let name = writer.path().file_name().unwrap().to_str().unwrap().to_string();
    let parts: Vec<&str> = name.splitn(5, '.').collect();
    assert_eq!(parts[..3], ["events", "out", "tfevents"]);
    let secs: u64 = parts[3].parse().unwrap();
    assert!(!parts[4].is_empty(), "host name");
    assert_eq!(writer.path().parent(), Some(logs.as_path()));

    let bytes = std::fs::read(writer.path()).unwrap();
    let records = tfrecord::records(&bytes);
    assert_eq!(records.len(), 3);
    let events: Vec<_> = records.iter().map(|r| tfrecord::event(r)).collect();
    assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"));
    assert_eq!((events[0].step, events[0].values.len()), (0, 0));
    assert_eq!(events[0].wall_time as u64, secs);
    assert_eq!(events[1].step, 1);
    assert_eq!(
        events[1].values,
        [
            ("reward/mean".to_string(), 0.45f32),
            ("train/kl".to_string(), 0.001f32)
        ]
    );
    assert_eq!(events[2].step, 300);
    assert_eq!(events[2].values, [("length/mean".to_string(), 21.0f32)]);
    assert!(events[1].wall_time >= events[0].wall_time && events[2].wall_time >= events[1].wall_time);
    assert!(events.iter().skip(1).all(|e| e.file_version.is_none()));
    // The version event is 9 bytes of wall_time (key + 8) and 15 of file_version (key, length and
    // "brain.Event:2"): 24 bytes.
    assert_eq!(records[0].len(), 24);
    assert_eq!(u64::from_le_bytes(bytes[..8].try_into().unwrap()), 24);
}

/// The shape of one synthetic step: ten completions alike, except the first `truncated` are cut
/// and the first `failed` unparsable.
#[derive(Clone, Copy)]
struct Shape {
    length: usize,
    reward: f64,
    truncated: usize,
    failed: usize,
    entropy: Option<f64>,
}

const HEALTHY: Shape = Shape {
    length: 100,
    reward: 0.5,
    truncated: 0,
    failed: 0,
    entropy: Some(1.0),
};

fn shaped_record(step: u64, s: Shape) -> StepRecord {
    let records: Vec<CompletionRecord> = (0..10)
        .map(|i| CompletionRecord {
            response_tokens: s.length,
            truncated: i < s.truncated,
            parse_ok: i >= s.failed,
            ..completion(i / 5, "s", s.reward, [s.reward, 1.0])
        })
        .collect();
    let mut record = step_record(step, RolloutStats::compute(&records, &names()).unwrap());
    if let Some(entropy) = s.entropy {
        record.train.insert(keys::ENTROPY, entropy).unwrap();
    }
    record
}

/// Every alarm raised over a history whose steps are numbered from 1.
fn alarms(config: HealthConfig, history: &[Shape]) -> Vec<Alarm> {
    let mut monitor = HealthMonitor::new(config).unwrap();
    (1..)
        .zip(history)
        .flat_map(|(step, &shape)| monitor.observe(&shaped_record(step, shape)))
        .collect()
}

#[test]
fn a_healthy_history_raises_no_alarm() {
    // Sixty steps that wobble: length 90-110, reward rising 0.3 -> 0.6 with noise, a truncation or a
    // parse failure now and then, entropy drifting down.
    let history: Vec<Shape> = (0..60)
        .map(|i| Shape {
            length: 90 + (i * 7) % 21,
            reward: 0.3 + 0.005 * i as f64 + 0.05 * ((i % 3) as f64 - 1.0),
            truncated: usize::from(i % 5 == 0),
            failed: usize::from(i % 4 == 0),
            entropy: Some(1.2 - 0.01 * i as f64),
        })
        .collect();
    assert_eq!(alarms(HealthConfig::default(), &history), []);
}

#[test]
fn length_explosion_fires_once_per_episode() {
    let config = HealthConfig {
        baseline_steps: 3,
        length_factor: 3.0,
        ..HealthConfig::default()
    };
    // Baseline 100 over steps 1-3; 300 is not above 3 x 100; 301 starts an episode that 400
    // continues; 100 ends it; 350 starts another.
    let lengths = [100, 100, 100, 300, 301, 400, 100, 350];
    let history: Vec<Shape> = lengths
        .iter()
        .map(|&length| Shape { length, ..HEALTHY })
        .collect();
    let explosion = |step, mean_length| Alarm::LengthExplosion {
        step,
        mean_length,
        baseline: 100.0,
        factor: 3.0,
    };
    assert_eq!(
        alarms(config, &history),
        [explosion(5, 301.0), explosion(8, 350.0)]
    );
}

#[test]
fn truncation_fires_above_the_share_not_at_it() {
    let history: Vec<Shape> = [0, 2, 3, 3, 0, 5]
        .iter()
        .map(|&truncated| Shape { truncated, ..HEALTHY })
        .collect();
    let truncation = |step, share| Alarm::Truncation {
        step,
        share,
        max: 0.2,
    };
    assert_eq!(
        alarms(HealthConfig::default(), &history),
        [truncation(3, 0.3), truncation(6, 0.5)]
    );
}

#[test]
fn reward_collapse_fires_below_half_the_best_moving_average() {
    let config = HealthConfig {
        window: 2,
        warmup_steps: 3,
        collapse_fraction: 0.5,
        collapse_steps: 1,
        ..HealthConfig::default()
    };
    // Moving averages from step 4 (after warm-up): .625, .75, .75, .625, .375, .25, .375, .375.
    // Best .75; step 8's .25 < .375 starts an episode, step 9 continues it, step 10 (.5) ends it.
    let rewards = [0.25, 0.5, 0.5, 0.75, 0.75, 0.75, 0.5, 0.25, 0.25, 0.5, 0.25];
    let history: Vec<Shape> = rewards
        .iter()
        .map(|&reward| Shape { reward, ..HEALTHY })
        .collect();
    let collapse = |step| Alarm::RewardCollapse {
        step,
        reward: 0.25,
        best_average: 0.75,
        fraction: 0.5,
    };
    assert_eq!(alarms(config, &history), [collapse(8), collapse(11)]);
}

#[test]
fn one_unlucky_step_is_not_a_collapse_but_a_lasting_fall_is() {
    let config = HealthConfig {
        window: 4,
        warmup_steps: 0,
        collapse_fraction: 0.5,
        collapse_steps: 3,
        ..HealthConfig::default()
    };
    // Best moving average .5 (steps 1-4); step 5's lone .1 keeps the mean of the last 3 steps at
    // (.5 + .5 + .1) / 3 = .367, above .25, and so does step 8's first .1 of three. At step 9 the
    // mean of the last 3 is (.5 + .1 + .1) / 3 = .233 < .25: one alarm, which step 10 continues.
    let rewards = [0.5, 0.5, 0.5, 0.5, 0.1, 0.5, 0.5, 0.1, 0.1, 0.1];
    let history: Vec<Shape> = rewards
        .iter()
        .map(|&reward| Shape { reward, ..HEALTHY })
        .collect();
    let fired = alarms(config, &history);
    assert_eq!(fired.len(), 1, "{fired:?}");
    match &fired[0] {
        Alarm::RewardCollapse {
            step,
            reward,
            best_average,
            ..
        } => {
            assert_eq!((*step, *best_average), (9, 0.5));
            assert!((reward - 0.7 / 3.0).abs() < 1e-12, "{reward}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn warm_up_rewards_do_not_set_the_bar() {
    // High rewards during warm-up, then a steady lower level.
    let history: Vec<Shape> = [0.75, 0.75, 0.75, 0.25, 0.25, 0.25]
        .iter()
        .map(|&reward| Shape { reward, ..HEALTHY })
        .collect();
    let config = |warmup_steps| HealthConfig {
        window: 2,
        warmup_steps,
        collapse_steps: 1,
        ..HealthConfig::default()
    };
    // After a warm-up of 3 steps the best average is (.75 + .25) / 2 = .5, and .25 is not below .25.
    assert_eq!(alarms(config(3), &history), []);
    // Without warm-up the best is .75 and step 4 collapses.
    let collapse = Alarm::RewardCollapse {
        step: 4,
        reward: 0.25,
        best_average: 0.75,
        fraction: 0.5,
    };
    assert_eq!(alarms(config(0), &history), [collapse]);
}

#[test]
fn parse_failures_fire_above_the_rate() {
    let history: Vec<Shape> = [5, 6, 0]
        .iter()
        .map(|&failed| Shape { failed, ..HEALTHY })
        .collect();
    let alarm = Alarm::ParseFailures {
        step: 2,
        rate: 0.6,
        max: 0.5,
    };
    assert_eq!(
        alarms(HealthConfig::default(), &history),
        std::slice::from_ref(&alarm)
    );
    assert_eq!(
        alarm.to_string(),
        "step 2: 60.0% of answers unparsable (max 50.0%)"
    );
}

#[test]
fn entropy_blow_up_uses_the_steps_that_report_entropy() {
    let config = HealthConfig {
        baseline_steps: 3,
        entropy_factor: 2.0,
        ..HealthConfig::default()
    };
    // Steps 1 and 4 report no entropy, so the baseline is the mean of steps 2, 3 and 5: 1.0 (step 5's
    // 2.0 makes the baseline and is not checked against it); step 6 is the first above 2 x 1.0.
    let entropies = [None, Some(0.5), Some(0.5), None, Some(2.0), Some(2.5), Some(1.0)];
    let history: Vec<Shape> = entropies
        .iter()
        .map(|&entropy| Shape { entropy, ..HEALTHY })
        .collect();
    let alarm = Alarm::EntropyBlowUp {
        step: 6,
        entropy: 2.5,
        baseline: 1.0,
        factor: 2.0,
    };
    assert_eq!(alarms(config, &history), std::slice::from_ref(&alarm));
    assert_eq!(
        alarm.to_string(),
        "step 6: entropy blow-up: 2.5000 > 2 x baseline 1.0000"
    );
}

#[test]
fn the_health_section_has_defaults_and_refuses_typos_and_bad_values() {
    let config: HealthConfig = toml::from_str("window = 5").unwrap();
    assert_eq!(
        config,
        HealthConfig {
            window: 5,
            ..HealthConfig::default()
        }
    );
    let typo = toml::from_str::<HealthConfig>("windw = 5")
        .unwrap_err()
        .to_string();
    assert!(typo.contains("unknown field `windw`"), "{typo}");
    let refused = |config: HealthConfig| HealthMonitor::new(config).unwrap_err().to_string();
    let default = HealthConfig::default;
    assert_eq!(
        refused(HealthConfig {
            window: 0,
            ..default()
        }),
        "health.window: must be at least 1"
    );
    assert_eq!(
        refused(HealthConfig {
            entropy_factor: f64::NAN,
            ..default()
        }),
        "health.entropy_factor: must be a positive number"
    );
    assert_eq!(
        refused(HealthConfig {
            collapse_fraction: 1.5,
            ..default()
        }),
        "health.collapse_fraction: must be in (0, 1]"
    );
    assert_eq!(
        refused(HealthConfig {
            max_truncated_share: -0.1,
            ..default()
        }),
        "health.max_truncated_share: must be in [0, 1]"
    );
}
