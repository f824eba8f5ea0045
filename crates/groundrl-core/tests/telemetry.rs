//! Telemetry: rollout statistics against hand-computed values, the step record and its JSONL log, and
//! TensorBoard files read back byte by byte.

use groundrl_core::frame::Frame;
use groundrl_core::telemetry::record::keys;
use groundrl_core::telemetry::{
    Accuracy, CompletionRecord, EventWriter, JsonlLog, RolloutStats, Scalars, StepRecord, TelemetryError,
};

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

fn step_record(step: u64, rollout: RolloutStats) -> StepRecord {
    StepRecord {
        step,
        epoch: 0,
        rollout,
        train: Scalars::default(),
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
    assert_eq!(get("frame/pixel"), Some(0.4));
    assert_eq!(get("confidence/count"), Some(3.0));
    assert_eq!(get("source/screenspot/accuracy"), Some(1.0));
    assert_eq!(get("batch/groups"), Some(3.0));
    assert_eq!(get("train/kl"), Some(0.125));
    assert_eq!(get("train/time/step"), Some(3.5));
    // osworld judged nothing: no accuracy tag for it rather than a made-up number.
    assert_eq!(get("source/osworld/accuracy"), None);
    // 1 epoch + 4 reward + 8 component + accuracy + iou + 3 length + parse + 5 frames + 2 confidence
    // + zero-variance share + 2 sources + 2 batch + 2 train.
    assert_eq!(scalars.len(), 33);
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
