//! `groundrl bench attention`: one layer's attention in one decoding step, in isolation, at the 3B
//! text model's head shape (8 query heads per KV head, head dim 128): libtorch's SDPA (cuDNN on the
//! GPU), the decoding-attention CUDA kernel at several split counts, and a plain read of the same
//! keys and values (a reduction over them) as the bandwidth the kernel can hope for.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::bail;
use groundrl_tensor::bench::synchronize;
use groundrl_tensor::rollout::kv_cache::attend_cached;
use groundrl_tensor::tch::{Device, Kind, Tensor};
use groundrl_tensor::{fused, profiler};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// Rows (sequences) decoding together.
    #[arg(long, default_value_t = 64)]
    rows: i64,
    /// Keys each row attends to (prompt and tokens so far; 1,326 is the middle of a 128-token
    /// rollout after a 1,262-token prompt).
    #[arg(long, default_value_t = 1326)]
    keys: i64,
    /// Cache columns (the engine's: prompt + new tokens, rounded up to a multiple of 64).
    #[arg(long, default_value_t = 1408)]
    capacity: i64,
    /// KV heads (the 3B model's 2).
    #[arg(long, default_value_t = 2)]
    kv_heads: i64,
    /// Calls per timing (after one warm-up call).
    #[arg(long, default_value_t = 200)]
    iters: usize,
    /// Split counts to time besides the automatic one (0).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2,3,4,6,8")]
    splits: Vec<i64>,
    /// Samples per prompt: rows r - r % N .. r - r % N + N - 1 hold the same first --prompt-keys
    /// columns, which the kernel then reads once for up to 8 rows (the rollouts' shared prompts);
    /// 1: every row its own.
    #[arg(long, default_value_t = 1)]
    samples: i64,
    /// With --samples above 1: the columns each prompt's rows share.
    #[arg(long, default_value_t = 1262)]
    prompt_keys: i64,
    /// Device memory bandwidth in GB/s (H200: 4800, H100 SXM: 3350).
    #[arg(long, default_value_t = 4800.0)]
    bandwidth_gbs: f64,
    /// Also record each timing's calls with libtorch's profiler into this folder (`read.json`,
    /// `sdpa.json`, `kernel-S.json`), for the kernels' device times (scripts/bench/kernel_table.py):
    /// the timings printed are per call from the host, launch costs included.
    #[arg(long)]
    profile: Option<PathBuf>,
}

#[derive(Serialize)]
struct Line {
    what: &'static str,
    /// The kernel's blocks per row and KV head (0: chosen to fill the GPU).
    splits: Option<i64>,
    microseconds: f64,
    /// Key and value bytes attended per microsecond, in GB/s (every row's counted, shared prompt
    /// columns too).
    gbs: f64,
    bandwidth_fraction: f64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let device = Device::cuda_if_available();
    if !fused::active(device) {
        bail!("bench attention times a CUDA kernel: it needs the cuda build and a GPU");
    }
    if args.keys < 1 || args.keys > args.capacity {
        bail!("--keys must be between 1 and --capacity ({})", args.capacity);
    }
    if args.samples < 1 {
        bail!("--samples must be at least 1");
    }
    if args.samples > 1 && (args.prompt_keys < 1 || args.prompt_keys > args.keys) {
        bail!("--prompt-keys must be between 1 and --keys ({})", args.keys);
    }
    let _guard = groundrl_tensor::tch::no_grad_guard();
    let (rows, heads, capacity) = (args.rows, args.kv_heads, args.capacity);
    let random = |size: &[i64]| Tensor::randn(size, (Kind::Float, device)).to_kind(Kind::BFloat16);
    let q = random(&[rows, heads, 8, 128]);
    let (keys, values) = (
        random(&[rows, heads, capacity, 128]),
        random(&[rows, heads, capacity, 128]),
    );
    let leaders: Vec<i64> = (0..rows).map(|r| r - r % args.samples).collect();
    let leader = Tensor::from_slice(&leaders).to_device(device);
    for t in [&keys, &values] {
        let shared = t.narrow(2, 0, args.prompt_keys).index_select(0, &leader);
        t.narrow(2, 0, args.prompt_keys).copy_(&shared);
    }
    let chunks = fused::prompt_chunks_tensor(&leaders, device);
    let prompt_columns = Tensor::from_slice(&[args.prompt_keys]).to_device(device);
    let shared = (args.samples > 1).then_some(fused::SharedPrompts {
        leader: &leader,
        chunks: &chunks,
        columns: &prompt_columns,
    });
    let hidden = Tensor::arange(capacity, (Kind::Int64, device)).ge(args.keys);
    let mask = Tensor::zeros([rows, capacity], (Kind::BFloat16, device))
        .masked_fill(&hidden.view([1, capacity]), f64::NEG_INFINITY)
        .view([rows, 1, 1, capacity]);
    let column = Tensor::from_slice(&[args.keys - 1]).to_device(device);
    let bytes = (rows * heads * args.keys * 128 * 2 * 2) as f64;
    let report = |what, splits, microseconds: f64| {
        let gbs = bytes / microseconds / 1e3;
        let line = Line {
            what,
            splits,
            microseconds,
            gbs,
            bandwidth_fraction: gbs / args.bandwidth_gbs,
        };
        println!("{}", serde_json::to_string(&line).expect("a report serializes"));
    };
    let iters = args.iters.max(1);
    let time = |label: &str, f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<f64> {
        f()?;
        synchronize(device);
        let start = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        synchronize(device);
        let microseconds = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
        if let Some(dir) = &args.profile {
            std::fs::create_dir_all(dir)?;
            profiler::trace(&dir.join(format!("{label}.json")), || -> anyhow::Result<()> {
                for _ in 0..iters {
                    f()?;
                }
                synchronize(device);
                Ok(())
            })??;
        }
        Ok(microseconds)
    };
    // A whole-tensor reduction reads contiguous memory at close to the device's best rate; scaled
    // to the bytes the attention reads.
    let whole = (rows * heads * capacity * 128 * 2 * 2) as f64 / bytes;
    let read_us = time("read", &mut || {
        let _ = (keys.sum(Kind::Float), values.sum(Kind::Float));
        Ok(())
    })?;
    report("read", None, read_us / whole);
    report(
        "sdpa",
        None,
        time("sdpa", &mut || {
            let _ = attend_cached(&q, &keys, &values, &mask);
            Ok(())
        })?,
    );
    let want = attend_cached(&q, &keys, &values, &mask).to_kind(Kind::Float);
    for &splits in &args.splits {
        let run = || fused::decode_attention(&q, (&keys, &values), &mask, &column, shared, splits);
        let got = run()?.ok_or_else(|| anyhow::anyhow!("the kernel does not apply to this shape"))?;
        let diff = (got.to_kind(Kind::Float) - &want).abs().max().double_value(&[]);
        if diff.is_nan() || diff >= 1e-2 {
            bail!("the kernel at {splits} splits differs from SDPA by {diff}");
        }
        report(
            "kernel",
            Some(splits),
            time(&format!("kernel-{splits}"), &mut || {
                run().map(drop).map_err(Into::into)
            })?,
        );
    }
    Ok(ExitCode::SUCCESS)
}
