//! Rewards per second on the benchmark batch that `scripts/bench/rewards.sh` writes (10k detection
//! samples): IoU, weighted_sum and per-sample AP, each parsing its completions as part of the work,
//! on all cores and on one thread. The script compares the result with the same batch scored in
//! Python; run it rather than this bench alone.
//!
//! Inputs: `GROUNDRL_REWARD_BATCH` (the JSONL batch) and `GROUNDRL_REWARD_SPECS` (the folder of
//! `iou.toml`, `weighted_sum.toml`, `ap.toml`).

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, Throughput};
use groundrl_score::reward::{RewardInput, RewardSpec, score_batch};

const REWARDS: [&str; 3] = ["iou", "weighted_sum", "ap"];

fn load_batch(path: &str) -> Vec<RewardInput> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let value: serde_json::Value = serde_json::from_str(line).expect("batch line is JSON");
            let object = value.as_object().expect("batch line is an object");
            RewardInput::from_json_object(object).unwrap_or_else(|e| panic!("line {}: {e:?}", i + 1))
        })
        .collect()
}

fn main() {
    let (Ok(batch), Ok(specs)) = (
        std::env::var("GROUNDRL_REWARD_BATCH"),
        std::env::var("GROUNDRL_REWARD_SPECS"),
    ) else {
        eprintln!(
            "rewards bench: set GROUNDRL_REWARD_BATCH and GROUNDRL_REWARD_SPECS (scripts/bench/rewards.sh does)"
        );
        return;
    };
    let inputs = load_batch(&batch);
    let one_thread = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("thread pool");
    let mut criterion = Criterion::default().configure_from_args().sample_size(10);
    let mut group = criterion.benchmark_group("rewards");
    group.throughput(Throughput::Elements(inputs.len() as u64));
    for name in REWARDS {
        let spec = RewardSpec::load(&PathBuf::from(&specs).join(format!("{name}.toml"))).expect("spec");
        group.bench_function(format!("{name}/all_cores"), |b| {
            b.iter(|| black_box(score_batch(&spec, &inputs)))
        });
        group.bench_function(format!("{name}/one_thread"), |b| {
            b.iter(|| one_thread.install(|| black_box(score_batch(&spec, &inputs))))
        });
    }
    group.finish();
    criterion.final_summary();
}
