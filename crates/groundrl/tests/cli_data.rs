//! `groundrl data` end to end on the core crate's fixtures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../groundrl-core/tests/fixtures/data").join(relative)
}

fn groundrl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_groundrl")).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ids(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn convert_reports_skipped_records_and_per_source_counts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ss.jsonl");
    let input = fixture("screenspot/screenspot_mobile.json");
    let images = fixture("screenspot/images");
    let o = groundrl(&[
        "data", "convert", "--from", "screenspot", "--input", input.to_str().unwrap(), "--images",
        images.to_str().unwrap(), "--output", out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(stdout.contains("4 records from"), "{stdout}");
    assert!(stdout.contains(": 2 samples, 2 skipped"), "{stdout}");
    assert!(stdout.contains("  screenspot/mobile: 2"), "{stdout}");
    let stderr = text(&o.stderr);
    assert!(stderr.contains("screenspot_mobile.json: record 2: img_filename: cannot read the size"), "{stderr}");
    assert!(stderr.contains("record 3: bbox:"), "{stderr}");
    assert_eq!(ids(&out), ["screenspot/mobile/0", "screenspot/mobile/1"]);

    let strict = groundrl(&[
        "data", "convert", "--from", "screenspot", "--input", input.to_str().unwrap(), "--images",
        images.to_str().unwrap(), "--output", out.to_str().unwrap(), "--strict",
    ]);
    assert!(!strict.status.success());
    assert!(text(&strict.stderr).contains("--strict"), "{}", text(&strict.stderr));
}

#[test]
fn coco_through_parquet_matches_direct_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("coco/instances_val2017.json");
    let (direct, parquet, back) =
        (dir.path().join("d.jsonl"), dir.path().join("val.parquet"), dir.path().join("b.jsonl"));
    for (from, input, output) in [
        ("coco", input.as_path(), direct.as_path()),
        ("coco", input.as_path(), parquet.as_path()),
        ("parquet", parquet.as_path(), back.as_path()),
    ] {
        let o = groundrl(&[
            "data", "convert", "--from", from, "--input", input.to_str().unwrap(), "--output",
            output.to_str().unwrap(), "--subset", "pos_3", "--mode", "positive",
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    assert_eq!(std::fs::read_to_string(&direct).unwrap(), std::fs::read_to_string(&back).unwrap());
    assert_eq!(ids(&direct), ["coco/val2017/2", "coco/val2017/3", "coco/val2017/5"]);
}

#[test]
fn split_and_sample_are_seeded() {
    let dir = tempfile::tempdir().unwrap();
    let all = dir.path().join("all.jsonl");
    let input = fixture("coco/instances_val2017.json");
    let o = groundrl(&["data", "convert", "--from", "coco", "--input", input.to_str().unwrap(), "--output", all.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));

    let parts = dir.path().join("parts");
    let o = groundrl(&[
        "data", "split", "--input", all.to_str().unwrap(), "--out-dir", parts.to_str().unwrap(), "--ratios",
        "train=0.6,val=0.4", "--seed", "3",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (train, val) = (ids(&parts.join("train.jsonl")), ids(&parts.join("val.jsonl")));
    assert_eq!((train.len(), val.len()), (3, 2));
    assert!(train.iter().all(|id| !val.contains(id)));

    let sample = |n: &str, out: &str| {
        let path = dir.path().join(out);
        let o = groundrl(&[
            "data", "sample", "--input", all.to_str().unwrap(), "--n", n, "--seed", "9", "--output",
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        ids(&path)
    };
    let (two, two_again, four) = (sample("2", "a.jsonl"), sample("2", "b.jsonl"), sample("4", "c.jsonl"));
    assert_eq!(two, two_again);
    assert_eq!(four.len(), 4);
    assert!(two.iter().all(|id| four.contains(id)));

    let bad = groundrl(&["data", "split", "--input", all.to_str().unwrap(), "--out-dir", "x", "--ratios", "a=0.5", "--seed", "1"]);
    assert!(!bad.status.success());
    assert!(text(&bad.stderr).contains("ratios sum to 0.5"), "{}", text(&bad.stderr));
}
