//! `groundrl plan`: the memory pre-flight of a training config, for one GPU of `--nproc-per-node`
//! data-parallel ranks. Prints one line per part (GiB), the peak, the GPU's memory and what is left; exits with code 2 and the knob to turn when the config
//! does not fit, and with code 1 when the config itself is refused (unknown key, bad value).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use groundrl_train::config::{DeviceKind, TrainConfig};
use groundrl_train::plan::{self, MemoryPlan, PlanExtras};

#[derive(clap::Args)]
pub struct Args {
    /// Training config (TOML).
    config: PathBuf,
    /// Config keys to override, `dotted.key=value`, e.g. `rollout.n=16 model.dtype=bf16`.
    overrides: Vec<String>,
    /// Device memory to plan for: a number with GiB, GB, MiB or MB, or plain bytes. Default: the
    /// smallest visible GPU's memory as `nvidia-smi` reports it, else 80GiB.
    #[arg(long, value_parser = parse_size)]
    gpu_memory: Option<u64>,
    /// Data-parallel ranks (one a GPU) to plan one GPU of: each rolls out its share of a step's
    /// prompts and, with `distributed.zero_stage = 1`, keeps its share of the optimizer state.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    nproc_per_node: u32,
    /// Plan with the largest `trainer.micro_batch_size` that fits `--gpu-memory` (among the divisors
    /// of one GPU's share of a mini-batch) instead of the config's, and say which it is.
    #[arg(long)]
    largest_micro_batch: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut cfg = TrainConfig::load(&args.config, &args.overrides)
        .with_context(|| format!("config {}", args.config.display()))?;
    cfg.validate()
        .with_context(|| format!("config {}", args.config.display()))?;
    let world = args.nproc_per_node;
    cfg.validate_world_size(world as usize)
        .with_context(|| format!("config {}", args.config.display()))?;
    let model = cfg.model.architecture()?;
    let extras = PlanExtras::of(&cfg, u64::from(world));
    let on_gpu = cfg.model.device == DeviceKind::Cuda;
    let gpu_memory = match on_gpu {
        true => gpu_memory_or_detected(args.gpu_memory),
        false => args.gpu_memory.unwrap_or(UNDETECTED_GPU_BYTES),
    };
    let config_micro = cfg.trainer.micro_batch_size;
    let mut fitted = None;
    if args.largest_micro_batch
        && let Some((micro, _)) = plan::largest_micro_batch(&cfg, &model, extras, gpu_memory)
    {
        cfg.trainer.micro_batch_size = micro;
        fitted = Some(micro);
    }
    // Decided for the micro-batch planned, as `train` decides for the one it runs.
    let checkpointing = match on_gpu {
        true => plan::decide_checkpointing(&mut cfg, &model, extras, gpu_memory),
        false => None,
    };
    let plan = plan::estimate(&cfg, &model, extras);
    println!(
        "{}: {} parameters, {} trainable, {} on {}; {}, {}",
        args.config.display(),
        count(model.parameters as u64),
        count(plan::trainable_parameters(&cfg.model, &model)),
        cfg.model.dtype.name(),
        cfg.model.device.name(),
        if extras.reference_model {
            "a reference model"
        } else {
            "no reference model"
        },
        if extras.fp32_master {
            "f32 master weights"
        } else {
            "no master weights"
        },
    );
    if world > 1 {
        let optimizer = match cfg.distributed.zero_stage {
            0 => "the whole optimizer state on each (distributed.zero_stage = 0)".to_string(),
            _ => format!("1/{world} of the optimizer state on each (distributed.zero_stage = 1)"),
        };
        println!("one GPU of {world}: 1/{world} of each step's prompts and {optimizer}");
    }
    if let Some(choice) = checkpointing {
        println!("{choice}");
    }
    print!("{}", table(&plan, on_gpu.then_some(gpu_memory)));
    if !on_gpu {
        println!(
            "the config trains on the {}: no GPU memory to check (--gpu-memory applies to CUDA configs)",
            cfg.model.device.name()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(micro) = fitted {
        println!(
            "trainer.micro_batch_size = {micro} is the largest that fits (the config has \
             {config_micro}): override it with trainer.micro_batch_size={micro}"
        );
    }
    match plan.check(gpu_memory) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(err) => {
            eprintln!("error: {err}");
            Ok(ExitCode::from(2))
        }
    }
}

/// The parts, the peak and, with the GPU's memory (`gpu_bytes`), the headroom, in GiB with three
/// decimals.
fn table(plan: &MemoryPlan, gpu_bytes: Option<u64>) -> String {
    let gib = |bytes: f64| format!("{:>9.3}", bytes / (1u64 << 30) as f64);
    let mut out = format!("{:<30}{:<10}{:>9}\n", "part", "phase", "GiB");
    for part in &plan.parts {
        out += &format!(
            "{:<30}{:<10}{}\n",
            part.name,
            part.phase.name(),
            gib(part.bytes as f64)
        );
    }
    let peak = format!("peak (resident + {})", plan.peak_phase().name());
    let total = plan.total();
    out += &format!("{peak:<40}{}\n", gib(total as f64));
    if let Some(gpu_bytes) = gpu_bytes {
        out += &format!("{:<40}{}\n", "GPU", gib(gpu_bytes as f64));
        out += &format!("{:<40}{}\n", "free", gib(gpu_bytes as f64 - total as f64));
    }
    out
}

/// A parameter count in millions or billions, e.g. `1.21M`, `3.75B`.
fn count(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.2}B", n as f64 / 1e9)
    } else {
        format!("{:.2}M", n as f64 / 1e6)
    }
}

/// What `--gpu-memory` plans for where no GPU's memory can be read: an 80 GB card's.
const UNDETECTED_GPU_BYTES: u64 = 80 << 30;

/// The memory `plan` and `train` plan a CUDA config for: `given` (`--gpu-memory`), else the smallest
/// visible GPU's as `nvidia-smi` reports it (a run trains on one of them; without `nvidia-smi`'s
/// view the plan of an H200 would keep checkpointing on as for an 80 GB card), else 80 GiB. Which
/// one is said on stderr when not given.
pub fn gpu_memory_or_detected(given: Option<u64>) -> u64 {
    if let Some(bytes) = given {
        return bytes;
    }
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let listed = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=index,uuid,memory.total",
            "--format=csv,noheader,nounits",
        ])
        .output()
        .ok()
        .filter(|out| out.status.success());
    let detected =
        listed.and_then(|out| smallest_visible(&String::from_utf8_lossy(&out.stdout), visible.as_deref()));
    match detected {
        Some(bytes) => {
            eprintln!(
                "planning for the GPU's {} (nvidia-smi; --gpu-memory sets another size)",
                plan::gib(bytes)
            );
            bytes
        }
        None => {
            eprintln!("planning for 80 GiB: no GPU memory read from nvidia-smi (--gpu-memory sets it)");
            UNDETECTED_GPU_BYTES
        }
    }
}

/// The smallest memory in bytes among the GPUs of `nvidia-smi`'s `index, uuid, memory.total` lines
/// (MiB) that `visible` (`CUDA_VISIBLE_DEVICES`: indices or UUIDs, comma-separated) names, or of all
/// of them when it is unset or names none of them; `None` when no line reads.
fn smallest_visible(listing: &str, visible: Option<&str>) -> Option<u64> {
    let gpus: Vec<(&str, &str, u64)> = listing
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(',').map(str::trim);
            let (index, uuid, mib) = (fields.next()?, fields.next()?, fields.next()?);
            Some((index, uuid, mib.parse::<u64>().ok()? << 20))
        })
        .collect();
    let named: Vec<&str> = visible.map_or(Vec::new(), |v| v.split(',').map(str::trim).collect());
    let chosen = |(index, uuid, _): &&(&str, &str, u64)| named.iter().any(|n| n == index || n == uuid);
    let picked: Vec<u64> = gpus.iter().filter(chosen).map(|g| g.2).collect();
    let all = || gpus.iter().map(|g| g.2).min();
    picked.into_iter().min().or_else(all)
}

/// `80GiB`, `141GB`, `512 MiB`, `85899345920`: a size in bytes. The error is clap's message for
/// `--gpu-memory` of `plan` and `train` (a `value_parser` returns it as text, and clap prints it).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let unit_at = text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(text.len());
    let (number, unit) = text.split_at(unit_at);
    let scale: f64 = match unit {
        "" | "B" => 1.0,
        "MiB" => (1u64 << 20) as f64,
        "GiB" => (1u64 << 30) as f64,
        "MB" => 1e6,
        "GB" => 1e9,
        other => return Err(format!("unknown unit {other:?}: use GiB, GB, MiB, MB or bytes")),
    };
    match number.trim().parse::<f64>() {
        Ok(n) if n.is_finite() && n >= 0.0 => Ok((n * scale).round() as u64),
        _ => Err(format!("{text:?} is not a size such as 80GiB")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200_AND_H100: &str = "0, GPU-1f2e, 143771\n1, GPU-9a8b, 81559\n";

    /// The smallest GPU among those `CUDA_VISIBLE_DEVICES` names (by index or UUID), or among all
    /// when it is unset or names none listed; nothing from output without a readable line.
    #[test]
    fn the_smallest_visible_gpu_is_planned_for() {
        let mib = |n: u64| Some(n << 20);
        assert_eq!(smallest_visible(H200_AND_H100, None), mib(81_559));
        assert_eq!(smallest_visible(H200_AND_H100, Some("0")), mib(143_771));
        assert_eq!(smallest_visible(H200_AND_H100, Some("GPU-9a8b")), mib(81_559));
        assert_eq!(smallest_visible(H200_AND_H100, Some("1, 0")), mib(81_559));
        assert_eq!(smallest_visible(H200_AND_H100, Some("MIG-77")), mib(81_559));
        assert_eq!(smallest_visible("No devices were found\n", None), None);
        assert_eq!(smallest_visible("", Some("0")), None);
    }
}
