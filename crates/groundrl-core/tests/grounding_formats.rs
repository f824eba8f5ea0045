//! The benchmarks' own files, read by the data importers, give the same accuracy as the sample
//! fixtures `grounding_eval.rs` checks by hand: the importers keep every field a slice needs.

use std::path::{Path, PathBuf};

use groundrl_core::data::import::{osworld_g, screenspot, screenspot_pro};
use groundrl_score::data::Sample;
use groundrl_score::frame::Frame;
use groundrl_score::metrics::grounding::{EvalOptions, GroundingReport, evaluate, read_predictions};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/grounding")
}

fn report(samples: &[Sample], benchmark: &str) -> GroundingReport {
    let text = std::fs::read_to_string(dir().join(format!("{benchmark}_predictions.jsonl"))).unwrap();
    evaluate(
        samples,
        &read_predictions(&text).unwrap(),
        &EvalOptions::new(Frame::Resized),
    )
    .unwrap()
}

fn fixture_samples(benchmark: &str) -> Vec<Sample> {
    let text = std::fs::read_to_string(dir().join(format!("{benchmark}_samples.jsonl"))).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn screenspot_files_match_the_sample_fixture() {
    let mut samples = Vec::new();
    for split in ["mobile", "web"] {
        let path = dir().join(format!("own/screenspot_{split}.json"));
        samples.extend(screenspot::import(&path, None).unwrap().strict().unwrap());
    }
    let r = report(&samples, "screenspot");
    assert_eq!(r, report(&fixture_samples("screenspot"), "screenspot"));
    assert_eq!((r.overall.n, r.overall.correct), (6, 3));
}

#[test]
fn screenspot_pro_file_matches_the_sample_fixture() {
    let samples = screenspot_pro::import(&dir().join("own/screenspot_pro.json"), None)
        .unwrap()
        .strict()
        .unwrap();
    let r = report(&samples, "screenspot_pro");
    assert_eq!(r, report(&fixture_samples("screenspot_pro"), "screenspot_pro"));
    assert_eq!((r.overall.n, r.overall.correct), (4, 1));
}

#[test]
fn osworld_g_file_matches_the_sample_fixture() {
    let samples = osworld_g::import(&dir().join("own/OSWorld-G.json"), None)
        .unwrap()
        .strict()
        .unwrap();
    let r = report(&samples, "osworld_g");
    assert_eq!(r, report(&fixture_samples("osworld_g"), "osworld_g"));
    assert_eq!((r.overall.n, r.overall.correct), (5, 3));
}
