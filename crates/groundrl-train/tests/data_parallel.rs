//! Data-parallel updates on the CPU (Gloo on 127.0.0.1): 2 processes with half a batch each give
//! the weights, loss and gradient norm of 1 process with the whole batch, for the policy update
//! and for a step of the supervised warm-up.
//!
//! The test is at the update level: the same fixed rows and advantages, split over the ranks the
//! way the trainer splits them (the global mini-batch `m` is every rank's `m`-th), so that nothing
//! depends on sampling. Each rank is a copy of this test binary running the ignored `rank` test with
//! torchrun's variables; it writes its weights to a file, which the parent compares with its own
//! one-process run.
//!
//! Tolerance: the sum over the ranks adds the gradients in another order than one process's
//! accumulation over micro-batches ((g1 + g2) + (g3 + g4) against ((g1 + g2) + g3) + g4), so an
//! entry differs by about an f32 rounding of its largest term, 1e-7 relative to the terms. Where
//! the terms cancel that is a large share of a small entry, and AdamW's step `lr · m / (√v + eps)`
//! scales every entry to about `lr` whatever its size: the step of an entry moves by up to
//! `lr · δg / eps`. With torch's `eps` of 1e-8 that is about 1e-4 here, which is what the weights
//! then differ by (measured 9e-5 on ~5% of the entries after 4 steps). The test takes `eps` 1e-4,
//! bounding it by `lr · δg / eps` ≈ 1e-2 · 1e-10 / 1e-4 = 1e-8 a step, and allows 1e-6 absolute
//! on the weights; the gradient norm (the global gradient's, which the clipping uses) must agree
//! to 1e-5 relative.
//!
//! The warm-up test holds its step to the same tolerance. Each rank's half of the rows is one
//! micro-batch, one process's first or second, so the summed gradient ought to be one process's to
//! the bit (`g1 + g2` either way); measured, a few entries of the weights differ by one f32 rounding
//! (1.2e-7 on a norm weight near 1) while the loss and the gradient norm agree to the bit, so the
//! gradients that reach AdamW are not bit-equal, and the test does not claim it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use groundrl_dist::{GroupOptions, ProcessGroup, Rendezvous};
use groundrl_tensor::hf_folder::tiny_ids;
use groundrl_tensor::model::Recompute;
use groundrl_tensor::processor::Processor;
use groundrl_tensor::processor::chat_template::ChatTemplate;
use groundrl_tensor::processor::image::ImageProcessor;
use groundrl_tensor::processor::tiny_tokenizer::{VOCAB_SIZE, tiny_tokenizer};
use groundrl_tensor::processor::{Encoded, tokenizer::Tokenizer};
use groundrl_tensor::qwen2_5_vl::{Qwen25Vl, presets};
use groundrl_train::config::DistributedConfig;
use groundrl_train::data_parallel::{DataParallel, DataParallelError, checksum};
use groundrl_train::loss::LossConfig;
use groundrl_train::optim::{AdamW, OptimConfig};
use groundrl_train::update::{
    Row, SftReport, SftSettings, UpdateReport, UpdateSettings, sft_step, text_response, update,
};
use tch::{Device, Kind, Tensor};

const SCENARIO: &str = "GROUNDRL_DP_SCENARIO";
const OUT: &str = "GROUNDRL_DP_OUT";
const PASSED: &str = "data-parallel scenario passed:";
/// Rows of the whole batch, rows of a mini-batch (two optimizer steps), and ranks.
const ROWS: usize = 8;
const MINI: usize = 4;
const WORLD: usize = 2;
const TOLERANCE: f64 = 1e-6;

fn tiny() -> (Qwen25Vl, Processor) {
    let config = presets::tiny(i64::from(VOCAB_SIZE), &tiny_ids());
    let processor = Processor {
        tokenizer: tiny_tokenizer().unwrap(),
        template: ChatTemplate::qwen2_5_vl(),
        image: ImageProcessor::default(),
        files: Default::default(),
    };
    (Qwen25Vl::new(&config, Device::Cpu, Kind::Float, 7), processor)
}

/// The model's trained tensors, sorted by name (the trainer's order).
fn trained(model: &Qwen25Vl) -> Vec<(String, Tensor)> {
    let mut params: Vec<(String, Tensor)> = model
        .var_store()
        .variables()
        .into_iter()
        .filter(|(_, t)| t.requires_grad())
        .collect();
    params.sort_by(|a, b| a.0.cmp(&b.0));
    params
}

fn ids(tokenizer: &Tokenizer, text: &str) -> Vec<i64> {
    tokenizer
        .encode(text)
        .unwrap()
        .into_iter()
        .map(i64::from)
        .collect()
}

/// Text-only prompts and answers of different lengths, two groups of four.
fn examples(p: &Processor) -> Vec<(Encoded, Encoded, f64)> {
    (0..ROWS)
        .map(|i| {
            let prompt = format!(
                "<|im_start|>user\nClick the button {}.<|im_end|>\n<|im_start|>assistant\n",
                i / 4
            );
            let answer = format!("({}, {}){}<|im_end|>", 10 * i, 3 + i * i, " ok".repeat(i % 3));
            let prompt = Encoded {
                input_ids: ids(&p.tokenizer, &prompt),
                pixel_values: None,
                image_grids: Vec::new(),
            };
            let advantage = [1.0, -0.5, 0.25, -0.75][i % 4] * if i < 4 { 1.0 } else { -1.3 };
            (prompt, text_response(ids(&p.tokenizer, &answer)), advantage)
        })
        .collect()
}

fn rows(examples: &[(Encoded, Encoded, f64)]) -> Vec<Row<'_>> {
    examples
        .iter()
        .map(|(prompt, response, advantage)| Row {
            prompt,
            response,
            generated: &[],
            advantage: *advantage,
            counts: true,
            prompt_features: None,
        })
        .collect()
}

/// Rank `rank`'s rows: its half of each global mini-batch, in order.
fn rank_rows<'a>(all: &[Row<'a>], rank: usize) -> Vec<Row<'a>> {
    let half = MINI / WORLD;
    all.chunks(MINI)
        .flat_map(|mini| &mini[rank * half..(rank + 1) * half])
        .map(|r| Row { ..*r })
        .collect()
}

fn optim() -> OptimConfig {
    OptimConfig {
        lr: 1e-2,
        // Small enough to clip: the clipping must see the global gradient's norm.
        grad_clip: 0.05,
        eps: 1e-4,
        ..OptimConfig::default()
    }
}

/// One update of `rows` on a fresh tiny model, mini-batches of `mini` rows, one row a micro-batch;
/// the weights after it, sorted by name.
fn run_update(
    rows_of: impl for<'a> Fn(&[Row<'a>]) -> Vec<Row<'a>>,
    mini: usize,
    dp: Option<&mut DataParallel>,
) -> (UpdateReport, Vec<Tensor>) {
    run_update_with(rows_of, mini, false, dp)
}

/// [`run_update`] with gradient checkpointing on or off.
fn run_update_with(
    rows_of: impl for<'a> Fn(&[Row<'a>]) -> Vec<Row<'a>>,
    mini: usize,
    checkpoint: bool,
    dp: Option<&mut DataParallel>,
) -> (UpdateReport, Vec<Tensor>) {
    let loss = LossConfig::default();
    let settings = UpdateSettings {
        loss: &loss,
        ppo_epochs: 2,
        mini_batch_size: mini,
        micro_batch_size: 1,
        recompute: checkpoint.into(),
        logprob_chunk: 16,
        temperature: 1.0,
        response_budget: 32,
        lr: 1e-2,
        shared_prefix: false,
    };
    train_once(rows_of, |model, p, optimizer, rows| {
        update(model, None, p, optimizer, rows, &settings, dp).unwrap()
    })
}

/// One warm-up step on the rows `rows_of` picks, on a fresh tiny model, in micro-batches of `MINI`
/// rows; the weights after it, sorted by name.
fn run_warm_up(
    rows_of: impl for<'a> Fn(&[Row<'a>]) -> Vec<Row<'a>>,
    dp: Option<&mut DataParallel>,
) -> (SftReport, Vec<Tensor>) {
    let settings = SftSettings {
        micro_batch_size: MINI,
        recompute: Recompute::Off,
        logprob_chunk: 16,
        lr: 1e-2,
    };
    train_once(rows_of, |model, p, optimizer, rows| {
        sft_step(model, p, optimizer, rows, &settings, dp).unwrap()
    })
}

/// Runs `train` once on a fresh tiny model, with AdamW over its trained tensors, on the rows
/// `rows_of` picks of [`examples`]; its report and the weights after it, sorted by name.
fn train_once<R>(
    rows_of: impl for<'a> Fn(&[Row<'a>]) -> Vec<Row<'a>>,
    train: impl FnOnce(&Qwen25Vl, &Processor, &mut AdamW, &[Row]) -> R,
) -> (R, Vec<Tensor>) {
    let (model, p) = tiny();
    let examples = examples(&p);
    let all = rows(&examples);
    let rows = rows_of(&all);
    let params = trained(&model);
    let shared = params
        .iter()
        .map(|(n, t)| (n.clone(), t.shallow_clone()))
        .collect();
    let mut optimizer = AdamW::new(shared, &optim()).unwrap();
    let report = train(&model, &p, &mut optimizer, &rows);
    (
        report,
        params.into_iter().map(|(_, t)| t.detach().copy()).collect(),
    )
}

/// The name the test harness gives [`rank`]: its module path in the test binary (without the
/// crate's name), then `rank`.
fn rank_test() -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::rank"),
        None => "rank".to_string(),
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Runs `scenario` on `WORLD` ranks writing under `out`; their outputs in rank order.
fn launch(scenario: &str, out: &Path) -> Vec<Output> {
    let port = free_port().to_string();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WORLD)
        .map(|rank| {
            Command::new(&exe)
                .args([rank_test().as_str(), "--exact", "--ignored", "--nocapture"])
                .env(SCENARIO, scenario)
                .env(OUT, out)
                .env("RANK", rank.to_string())
                .env("WORLD_SIZE", WORLD.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("LOCAL_WORLD_SIZE", WORLD.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .env("OMP_NUM_THREADS", "1")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

fn assert_passed(outputs: &[Output], scenario: &str) -> Vec<String> {
    let said = |out: &Output| {
        format!(
            "{}\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let all: Vec<String> = outputs.iter().map(said).collect();
    outputs
        .iter()
        .enumerate()
        .map(|(rank, out)| {
            let stdout = String::from_utf8_lossy(&out.stdout);
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&format!("{PASSED} {scenario} rank {rank}")));
            assert!(
                out.status.success() && line.is_some(),
                "rank {rank} of {scenario} failed; every rank:\n{}",
                all.join("\n=====\n")
            );
            line.unwrap_or_default().to_string()
        })
        .collect()
}

fn weights_file(out: &Path, rank: usize) -> PathBuf {
    out.join(format!("weights-{rank}.pt"))
}

/// Checks that every rank holds the same `weights`, then writes this rank's to `path` for the
/// parent to compare with one process's.
fn save_checked(dp: &mut DataParallel, weights: Vec<Tensor>, path: &Path) {
    dp.check_replicas(&weights, 1).unwrap();
    let named: Vec<(String, Tensor)> = weights
        .into_iter()
        .enumerate()
        .map(|(i, t)| (format!("{i:04}"), t))
        .collect();
    Tensor::save_multi(&named, path).unwrap();
}

/// The number after `key=` in a rank's line.
fn number(line: &str, key: &str) -> f64 {
    let start = line.find(&format!("{key}=")).unwrap() + key.len() + 1;
    line[start..].split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn two_ranks_with_half_the_rows_each_update_as_one_process_with_all() {
    let dir = tempfile::tempdir().unwrap();
    let lines = assert_passed(&launch("equivalence", dir.path()), "equivalence");
    let (report, single) = run_update(|all| all.iter().map(|r| Row { ..*r }).collect(), MINI, None);
    assert_eq!(report.optimizer_steps, 4, "2 PPO epochs x 2 mini-batches");
    for (rank, line) in lines.iter().enumerate() {
        let mut loaded = Tensor::load_multi(weights_file(dir.path(), rank)).unwrap();
        loaded.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(loaded.len(), single.len());
        let mut worst = 0f64;
        for ((_, got), want) in loaded.iter().zip(&single) {
            let diff = (got - want).abs().max().double_value(&[]);
            worst = worst.max(diff);
        }
        println!("rank {rank}: largest weight difference from one process {worst:e}");
        assert!(worst <= TOLERANCE, "rank {rank}: weights differ by {worst:e}");
        let moved = (&loaded[0].1 - &tiny_param0()).abs().max().double_value(&[]);
        assert!(
            moved > 1e-4,
            "the update moved nothing ({moved:e}): the comparison shows nothing"
        );
        // The global gradient's norm, the same on every rank.
        let got = number(line, "grad_norm");
        let want = report.grad_norm;
        assert!(
            (got - want).abs() <= 1e-5 * want,
            "rank {rank}: grad_norm {got} vs {want}"
        );
    }
    // Each rank's loss is its share of the global mini-batch's: they add up to one process's.
    let loss: f64 = lines.iter().map(|l| number(l, "loss")).sum();
    assert!(
        (loss - report.loss).abs() <= 1e-5 * report.loss.abs(),
        "summed loss {loss} vs {}",
        report.loss
    );
    assert!(
        report.loss.abs() > 1e-3,
        "a loss of {} shows nothing",
        report.loss
    );
    // So are their model FLOPs (the trainer's `update/model_flops`).
    let flops: f64 = lines.iter().map(|l| number(l, "model_flops")).sum();
    assert!(report.model_flops > 0.0);
    assert_eq!(flops, report.model_flops);
}

/// The warm-up's two splits: each rank its contiguous share of the rows (as the trainer takes its
/// share of a warm-up batch), and rank 0 all of them with rank 1 none (a rank whose share is empty,
/// or whose samples were all skipped). Both give one process's step: its weights within the
/// tolerance of the update test, its loss and gradient norm to 1e-5 relative, its token counts
/// exactly.
#[test]
fn two_ranks_warm_up_as_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let lines = assert_passed(&launch("warm-up", dir.path()), "warm-up");
    let (report, single) = run_warm_up(|all| all.iter().map(|r| Row { ..*r }).collect(), None);
    assert!(report.applied && report.loss > 1.0, "{report:?}");
    let moved = (&single[0] - &tiny_param0()).abs().max().double_value(&[]);
    assert!(
        moved > 1e-4,
        "the step moved nothing ({moved:e}): the comparison shows nothing"
    );
    let close = |got: f64, want: f64| (got - want).abs() <= 1e-5 * want.abs();
    for split in WARM_UP_SPLITS {
        for (rank, line) in lines.iter().enumerate() {
            let mut loaded = Tensor::load_multi(out_file(dir.path(), split, rank)).unwrap();
            loaded.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(loaded.len(), single.len());
            let worst = loaded
                .iter()
                .zip(&single)
                .map(|((_, got), want)| (got - want).abs().max().double_value(&[]))
                .fold(0f64, f64::max);
            println!("{split}, rank {rank}: largest weight difference from one process {worst:e}");
            assert!(
                worst <= TOLERANCE,
                "{split}, rank {rank}: weights differ by {worst:e}"
            );
            let got = |key: &str| number(line, &format!("{split}/{key}"));
            assert!(close(got("loss"), report.loss), "{split}, rank {rank}: {line}");
            assert!(
                close(got("grad_norm"), report.grad_norm),
                "{split}, rank {rank}: {line}"
            );
            assert_eq!(got("tokens"), report.tokens as f64, "{split}, rank {rank}");
            assert_eq!(
                got("answer_tokens"),
                report.answer_tokens as f64,
                "{split}, rank {rank}"
            );
        }
    }
}

/// The splits of the warm-up test, by name.
const WARM_UP_SPLITS: [&str; 2] = ["shares", "rank-0-alone"];

fn out_file(out: &Path, split: &str, rank: usize) -> PathBuf {
    out.join(format!("{split}-{rank}.pt"))
}

/// One rank of the warm-up test: a step of each split, its weights written to a file.
fn warm_up(dp: &mut DataParallel, out: &Path) -> String {
    let rank = dp.rank();
    let mut said = Vec::new();
    for split in WARM_UP_SPLITS {
        let mine = match split {
            "shares" => dp.share(ROWS),
            _ if rank == 0 => 0..ROWS,
            _ => 0..0,
        };
        let (report, weights) = run_warm_up(
            |all| all[mine.clone()].iter().map(|r| Row { ..*r }).collect(),
            Some(dp),
        );
        save_checked(dp, weights, &out_file(out, split, rank));
        said.push(format!(
            "{split}/loss={} {split}/grad_norm={} {split}/tokens={} {split}/answer_tokens={}",
            report.loss, report.grad_norm, report.tokens, report.answer_tokens
        ));
    }
    said.join(" ")
}

/// The first trained parameter of a fresh tiny model (to show the update moved the weights).
fn tiny_param0() -> Tensor {
    let (model, _) = tiny();
    let params = trained(&model);
    params[0].1.detach().copy()
}

#[test]
fn uneven_ranks_take_the_same_steps_and_a_diverged_replica_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let lines = assert_passed(&launch("uneven", dir.path()), "uneven");
    for line in &lines {
        // Rank 1 has one mini-batch of rows, rank 0 two: both step twice per PPO epoch.
        assert_eq!(number(line, "steps"), 4.0, "{line}");
    }
}

/// `distributed.overlap_backward` on and off give the same weights to the bit, over updates of 2 and
/// of 4 micro-batches a mini-batch, with and without gradient checkpointing; and the same gradients
/// for parameters that one rank reached, or none. Each gradient sum adds the same two values per
/// entry either way (rank 0's and rank 1's, or zero for a rank without one), and a sum of two floats
/// does not depend on the order of its terms, so nothing is left to a tolerance.
#[test]
fn overlapping_the_backward_pass_changes_no_bit() {
    let dir = tempfile::tempdir().unwrap();
    assert_passed(&launch("overlap", dir.path()), "overlap");
}

/// One rank of the overlap test: each comparison on its own weights, in process.
fn overlap(dp: &mut DataParallel) {
    // Two micro-batches a mini-batch without checkpointing, four with it (a backward pass of several
    // autograd calls, the tied embedding reached in the last).
    for (mini, checkpoint) in [(MINI / WORLD, false), (MINI, true)] {
        let what = format!("{mini} micro-batches, checkpointing {checkpoint}");
        let after = update_overlapping(dp, false, mini, checkpoint);
        let before = dp.overlapped();
        let overlapped = update_overlapping(dp, true, mini, checkpoint);
        // The armed passes started buckets: after the first sum laid them out in the order backward
        // reaches the parameters, all but those of the vision tower (no text-only row reaches it).
        let sums = dp.overlapped();
        assert!(sums.overlapped > before.overlapped, "{what}: {sums:?}");
        println!("{what}: {sums:?}");
        assert_eq!(after.0.optimizer_steps, overlapped.0.optimizer_steps, "{what}");
        assert_eq!(after.0.grad_norm, overlapped.0.grad_norm, "{what}");
        assert_eq!(after.0.loss, overlapped.0.loss, "{what}");
        for (i, (a, b)) in after.1.iter().zip(&overlapped.1).enumerate() {
            assert!(a.equal(b), "{what}: weight {i} differs");
        }
    }
    let after = reached_by_some(dp, false);
    let overlapped = reached_by_some(dp, true);
    for (i, (a, b)) in after.iter().zip(&overlapped).enumerate() {
        assert_eq!(a.defined(), b.defined(), "parameter {i}");
        assert!(!a.defined() || a.equal(b), "parameter {i}: {a} != {b}");
    }
}

/// This rank's update of its half of the rows with the overlap `on` or off.
fn update_overlapping(
    dp: &mut DataParallel,
    on: bool,
    mini: usize,
    checkpoint: bool,
) -> (UpdateReport, Vec<Tensor>) {
    dp.set_overlap_backward(on);
    let rank = dp.rank();
    run_update_with(|all| rank_rows(all, rank), mini, checkpoint, Some(dp))
}

/// Three parameters, of which every rank reaches the first, rank 0 alone the second and no rank the
/// third, summed with the overlap `on` or off: their gradients after the sum.
fn reached_by_some(dp: &mut DataParallel, on: bool) -> Vec<Tensor> {
    dp.set_overlap_backward(on);
    let params: Vec<Tensor> = [&[3i64][..], &[2, 2], &[5]]
        .iter()
        .map(|shape| Tensor::zeros(*shape, (Kind::Float, Device::Cpu)).set_requires_grad(true))
        .collect();
    dp.before_last_backward(&params).unwrap();
    let factor = Tensor::from_slice(&[0.1f32, 0.2, 0.3]) * (dp.rank() as f64 + 1.0);
    let mut loss = (&params[0] * factor).sum(Kind::Float);
    if dp.rank() == 0 {
        loss += (&params[1] * 0.7).sum(Kind::Float);
    }
    loss.backward();
    dp.sum_gradients(&params).unwrap();
    let grads: Vec<Tensor> = params.iter().map(Tensor::grad).collect();
    let want = Tensor::from_slice(&[0.1f32, 0.2, 0.3]) + Tensor::from_slice(&[0.2f32, 0.4, 0.6]);
    assert!(
        grads[0].equal(&want),
        "reached by both, overlap {on}: {}",
        grads[0]
    );
    assert!(grads[1].equal(&Tensor::full([2, 2], 0.7, (Kind::Float, Device::Cpu))));
    assert!(!grads[2].defined(), "reached by no rank, overlap {on}");
    grads
}

/// One rank of a scenario (run by `launch` only).
#[test]
#[ignore = "a rank of the multi-process tests above, started by them"]
fn rank() {
    let scenario = std::env::var(SCENARIO).unwrap();
    let out = PathBuf::from(std::env::var(OUT).unwrap());
    let rendezvous = Rendezvous::from_env().unwrap();
    let options = GroupOptions {
        timeout: Duration::from_secs(60),
        // The tiny model's gradients (about 5 MB) in several buckets, as a large model's fill them.
        bucket_bytes: 1 << 20,
        ..GroupOptions::default()
    };
    let group = ProcessGroup::new(&rendezvous, options).unwrap();
    let cfg = DistributedConfig {
        checksum_every: 1,
        ..DistributedConfig::default()
    };
    let mut dp = DataParallel::new(group, Device::Cpu, &cfg);
    let rank = dp.rank();
    match scenario.as_str() {
        "equivalence" => {
            let (report, weights) = run_update(|all| rank_rows(all, rank), MINI / WORLD, Some(&mut dp));
            save_checked(&mut dp, weights, &weights_file(&out, rank));
            println!(
                "{PASSED} equivalence rank {rank} grad_norm={} loss={} model_flops={}",
                report.grad_norm, report.loss, report.model_flops
            );
        }
        "uneven" => {
            // Rank 0 trains on 4 rows (two mini-batches of 2), rank 1 on 2 (one).
            let take = if rank == 0 { 4 } else { 2 };
            let (report, weights) = run_update(
                |all| all[..take].iter().map(|r| Row { ..*r }).collect(),
                2,
                Some(&mut dp),
            );
            dp.check_replicas(&weights, 1).unwrap();
            // A replica that went out of step is named by the check.
            let changed = weights;
            if rank == 1 {
                let _ = changed[0].get(0).f_add_scalar_(1.0);
            }
            let Err(DataParallelError::Diverged { ranks, step, .. }) = dp.check_replicas(&changed, 9) else {
                panic!("a changed replica was not found");
            };
            assert_eq!((ranks, step), (vec![1], 9));
            assert_ne!(checksum(&changed[..1]), 0);
            println!(
                "{PASSED} uneven rank {rank} steps={}",
                report.optimizer_steps + report.skipped_steps
            );
        }
        "warm-up" => {
            let said = warm_up(&mut dp, &out);
            println!("{PASSED} warm-up rank {rank} {said}");
        }
        "overlap" => {
            overlap(&mut dp);
            println!("{PASSED} overlap rank {rank}");
        }
        other => panic!("unknown scenario {other}"),
    }
}
