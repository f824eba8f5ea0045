//! Every file format the CLI reads, mutated from committed examples (see `common/mutate.rs`):
//! reward records (JSONL) scored against the example spec, reward specs (TOML), COCO ground truth
//! and detections (JSON), COCO instances through the importer, and sample files (JSONL and
//! Parquet). None may panic; each bad input must be an error that names its file (and its record
//! and field where it has them), and what is accepted must be usable: rewards finite, samples
//! valid.

#[path = "common/mutate.rs"]
mod mutate;

use std::path::{Path, PathBuf};

use groundrl_core::data::{jsonl, parquet};

use groundrl_score::data::{DataError, Loaded, RecordError};
use groundrl_score::metrics::coco::{evaluate, parse_detections, parse_ground_truth};
use groundrl_score::reward::{RewardInput, RewardSpec, score_one};
use mutate::fuzz;

fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(relative)
}

fn read(relative: &str) -> Vec<u8> {
    std::fs::read(repo(relative)).unwrap()
}

fn fixture(relative: &str) -> String {
    format!("crates/groundrl-core/tests/fixtures/{relative}")
}

#[test]
fn reward_records() {
    let spec = RewardSpec::load(&repo("examples/reward/spec.toml")).unwrap();
    fuzz(
        "reward JSONL",
        1,
        4000,
        &[read("examples/reward/input.jsonl")],
        |bytes| {
            for line in bytes.split(|&b| b == b'\n') {
                let Ok(Ok(serde_json::Value::Object(fields))) =
                    std::str::from_utf8(line).map(serde_json::from_str)
                else {
                    continue;
                };
                let input = match RewardInput::from_json_object(&fields) {
                    Ok(input) => input,
                    Err(e) if e.field.is_empty() || e.problem.is_empty() => {
                        return Err(format!("unnamed error {e:?}"));
                    }
                    Err(_) => continue,
                };
                match score_one(&spec, &input) {
                    Ok(s) if !s.total.is_finite() || s.components.iter().any(|v| !v.is_finite()) => {
                        return Err(format!("scored {:?}", s.components));
                    }
                    Err(e) if e.field.is_empty() || e.problem.is_empty() => {
                        return Err(format!("unnamed error {e:?}"));
                    }
                    _ => {}
                }
            }
            Ok(())
        },
    );
}

#[test]
fn reward_specs() {
    let examples = [
        read("examples/reward/spec.toml"),
        read("configs/rewards/tool-gated.toml"),
    ];
    fuzz("reward spec TOML", 2, 4000, &examples, |bytes| {
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Ok(());
        };
        match RewardSpec::from_toml(text) {
            Ok(spec) if spec.components().iter().any(|c| !c.weight.is_finite()) => {
                Err("a weight that is not finite was accepted".into())
            }
            Err(e) if !e.to_string().starts_with("reward spec") => Err(format!("error without context: {e}")),
            _ => Ok(()),
        }
    });
}

#[test]
fn coco_ground_truth_and_detections() {
    let (gt_bytes, dt_bytes) = (
        read("crates/groundrl-score/tests/fixtures/coco-parity/gt.json"),
        read("crates/groundrl-score/tests/fixtures/coco-parity/dt.json"),
    );
    let gt = parse_ground_truth(&gt_bytes).unwrap();
    let dt = parse_detections(&dt_bytes).unwrap();
    fuzz(
        "COCO JSON",
        3,
        3000,
        &[gt_bytes.clone(), dt_bytes.clone()],
        |bytes| {
            let named = |e: &dyn std::fmt::Display| match e.to_string().is_empty() {
                true => Err("an empty error".to_string()),
                false => Ok(()),
            };
            match parse_ground_truth(bytes) {
                Ok(mutated) => {
                    if let Err(e) = evaluate(&mutated, &dt) {
                        named(&e)?;
                    }
                }
                Err(e) => named(&e)?,
            }
            match parse_detections(bytes) {
                Ok(mutated) => {
                    if let Err(e) = evaluate(&gt, &mutated) {
                        named(&e)?;
                    }
                }
                Err(e) => named(&e)?,
            }
            Ok(())
        },
    );
}

/// Writes each mutated file to `dir/name` and hands its path to `read`.
fn through_file(
    dir: &Path,
    name: &str,
    read: impl Fn(&Path) -> Result<Loaded, DataError>,
) -> impl Fn(&[u8]) -> Result<(), String> {
    let path = dir.join(name);
    move |bytes| {
        std::fs::write(&path, bytes).unwrap();
        match read(&path) {
            Ok(loaded) => loaded_is_sound(&path, &loaded),
            Err(e) if !e.to_string().starts_with(&path.display().to_string()) => {
                Err(format!("error without the file: {e}"))
            }
            Err(_) => Ok(()),
        }
    }
}

/// Every skipped record names file, record and field; every kept sample is valid.
fn loaded_is_sound(path: &Path, loaded: &Loaded) -> Result<(), String> {
    let unnamed = |e: &&RecordError| {
        e.file != path.display().to_string()
            || e.record.is_empty()
            || e.field.is_empty()
            || e.problem.is_empty()
    };
    if let Some(e) = loaded.skipped.iter().find(unnamed) {
        return Err(format!("skipped without a name: {e:?}"));
    }
    match loaded.samples.iter().find_map(|s| s.validate().err()) {
        Some(e) => Err(format!("an invalid sample was kept: {e:?}")),
        None => Ok(()),
    }
}

#[test]
fn coco_instances_through_the_importer() {
    use groundrl_core::data::import::coco::{Mode, Subset, import};
    let dir = tempfile::tempdir().unwrap();
    let examples = [read(&fixture("data/coco/instances_val2017.json"))];
    let check = through_file(dir.path(), "instances_val2017.json", |path| {
        import(path, None, Subset::Full, Mode::All).map(|(loaded, _)| loaded)
    });
    fuzz("COCO instances", 4, 1500, &examples, check);
}

#[test]
fn sample_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let examples = [
        read(&fixture("grounding/screenspot_samples.jsonl")),
        read(&fixture("grounding/osworld_g_samples.jsonl")),
    ];
    fuzz(
        "sample JSONL",
        5,
        1500,
        &examples,
        through_file(dir.path(), "s.jsonl", jsonl::read_jsonl),
    );
}

#[test]
fn sample_parquet() {
    let dir = tempfile::tempdir().unwrap();
    let source = jsonl::read_jsonl(&repo(&fixture("grounding/screenspot_samples.jsonl"))).unwrap();
    let example = dir.path().join("example.parquet");
    parquet::write_parquet(&example, &source.samples, "test").unwrap();
    let examples = [std::fs::read(&example).unwrap()];
    fuzz(
        "sample Parquet",
        6,
        1500,
        &examples,
        through_file(dir.path(), "s.parquet", parquet::read_parquet),
    );
}
