//! `groundrl train`: GRPO from a TOML config (with dotted overrides), or `--resume RUN_DIR`. Runs the
//! memory pre-flight first on a GPU, shows a progress bar with the step's reward and accuracy, and
//! says why the run ended.
//!
//! Data-parallel: `--nproc-per-node N` starts N workers of the same command on this machine
//! ([`super::launch`]); a process started with torchrun's variables and `WORLD_SIZE` > 1 (by that
//! launcher, by torchrun or by a Slurm script on several machines) joins their process group and
//! trains as one rank (docs/distributed.md).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use groundrl_core::telemetry::StepRecord;
use groundrl_train::config::{DeviceKind, TrainConfig};
use groundrl_train::data_parallel::DataParallel;
use groundrl_train::plan::{self, PlanExtras};
use groundrl_train::run_folder::CONFIG_FILE;
use groundrl_train::trainer::{Ending, Trainer};
use indicatif::{ProgressBar, ProgressStyle};

use super::launch;

#[derive(clap::Args)]
pub struct Args {
    /// Training config (TOML); see configs/.
    config: Option<PathBuf>,
    /// Config keys to override, `dotted.key=value`, e.g. `rollout.n=8 optim.lr=1e-6`. With --resume
    /// only how long the run goes on, how often it validates and saves, and how many checkpoints it
    /// keeps may change (e.g. `trainer.max_steps=600` extends a finished run).
    overrides: Vec<String>,
    /// Continue the run in this folder from its latest checkpoint (its own config.toml is used,
    /// with the overrides given).
    #[arg(long)]
    resume: Option<PathBuf>,
    /// With --resume: when the latest checkpoint does not match its manifest (a file damaged or
    /// missing), resume from the newest that does; the ones passed over are renamed
    /// `damaged-step-N` and named. Without it such a resume is refused.
    #[arg(long, requires = "resume")]
    fall_back: bool,
    /// GPU memory for the pre-flight check of a CUDA config, as `groundrl plan` takes it (80GiB,
    /// 141GB, ...); the run is refused when the plan does not fit. Default: the smallest visible
    /// GPU's memory as `nvidia-smi` reports it, else 80GiB.
    #[arg(long, value_parser = super::plan::parse_size)]
    gpu_memory: Option<u64>,
    /// Data-parallel workers to start on this machine, each with torchrun's variables (1: this
    /// process trains alone, or as the rank its environment names).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    nproc_per_node: u32,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.nproc_per_node > 1 {
        if args.resume.is_none() && args.config.is_none() {
            bail!("give a config file or --resume RUN_DIR");
        }
        return launch::launch(args.nproc_per_node as usize);
    }
    let mut trainer = match (&args.resume, &args.config) {
        (Some(dir), config) => {
            // With --resume every positional argument is an override: the first lands in `config`.
            let overrides: Vec<String> = config
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .chain(args.overrides.iter().cloned())
                .collect();
            let cfg = TrainConfig::load(&dir.join(CONFIG_FILE), &[])
                .with_context(|| format!("resuming {}", dir.display()))?;
            let dp = join_group(&cfg)?;
            Trainer::resume_data_parallel(dir, dp, args.fall_back, &overrides)
                .with_context(|| format!("resuming {}", dir.display()))?
        }
        (None, Some(path)) => {
            let mut cfg = TrainConfig::load(path, &args.overrides)
                .with_context(|| format!("config {}", path.display()))?;
            cfg.validate()
                .with_context(|| format!("config {}", path.display()))?;
            preflight(&mut cfg, args.gpu_memory)?;
            let dp = join_group(&cfg)?;
            Trainer::new_data_parallel(cfg, dp)?
        }
        (None, None) => bail!("give a config file or --resume RUN_DIR"),
    };
    let ending = match trainer.world_size() {
        1 => train_with_progress(&mut trainer)?,
        _ => train_with_lines(&mut trainer)?,
    };
    Ok(report_ending(&trainer, ending))
}

/// This process's rank in the group of torchrun's variables, when they name more than one process.
pub fn join_group(cfg: &TrainConfig) -> anyhow::Result<Option<DataParallel>> {
    if cfg.model.device == DeviceKind::Cuda {
        pin_local_gpu()?;
    }
    DataParallel::from_env(&cfg.distributed, cfg.model.device.device())
        .context("joining the data-parallel process group")
}

/// Makes a data-parallel worker on CUDA see the GPU of its `LOCAL_RANK` alone, as its device 0,
/// before CUDA starts: the model, the rollout engine's graphs and kernels and the NCCL group then
/// all use device 0 without naming an index.
fn pin_local_gpu() -> anyhow::Result<()> {
    let var = |name: &str| std::env::var(name).ok();
    let number = |name: &str| var(name).and_then(|v| v.trim().parse::<usize>().ok());
    let (Some(world), Some(local), Some(local_world)) = (
        number("WORLD_SIZE"),
        number("LOCAL_RANK"),
        number("LOCAL_WORLD_SIZE"),
    ) else {
        return Ok(()); // one process, or joining the group names the missing variable
    };
    if let Some(device) = local_gpu(world, local, local_world, var("CUDA_VISIBLE_DEVICES").as_deref())? {
        // SAFETY: called before the trainer starts any thread or CUDA; no other thread reads the
        // environment meanwhile.
        unsafe { std::env::set_var("CUDA_VISIBLE_DEVICES", device) };
    }
    Ok(())
}

/// The one GPU a worker should see, from `CUDA_VISIBLE_DEVICES` (`visible`; unset: the machine's
/// first `local_world` GPUs). `None` when nothing is to change: one process, or this process
/// already sees one GPU (a launcher or Slurm gave each task its own).
fn local_gpu(
    world: usize,
    local: usize,
    local_world: usize,
    visible: Option<&str>,
) -> anyhow::Result<Option<String>> {
    if world <= 1 {
        return Ok(None);
    }
    let devices: Vec<String> = match visible {
        Some(list) => (list.split(','))
            .map(|d| d.trim().to_string())
            .filter(|d| !d.is_empty())
            .collect(),
        None => (0..local_world).map(|d| d.to_string()).collect(),
    };
    if devices.len() == 1 {
        return Ok(None);
    }
    match devices.get(local) {
        Some(device) => Ok(Some(device.clone())),
        None => bail!(
            "LOCAL_RANK {local} has no GPU: this process sees {} ({})",
            devices.len(),
            devices.join(",")
        ),
    }
}

/// Runs a data-parallel rank: rank 0 says each step in a line (its output is a launcher's, not a
/// terminal's), the others train silently.
pub fn train_with_lines(trainer: &mut Trainer) -> anyhow::Result<Ending> {
    let writes = trainer.writes();
    Ok(trainer.run(|record| {
        if writes {
            eprintln!("{}", step_line(record));
        }
    })?)
}

/// A step's progress: its reward, accuracy and completion length.
fn step_line(record: &StepRecord) -> String {
    let accuracy = record.rollout.accuracy.share.unwrap_or(0.0);
    format!(
        "step {} epoch {}: reward {:.3}, accuracy {:.3}, length {:.1}",
        record.step, record.epoch, record.rollout.reward.mean, accuracy, record.rollout.length.mean
    )
}

/// A spinner with the elapsed time and a message.
pub fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix} {elapsed} {msg}") {
        bar.set_style(style);
    }
    bar
}

/// Runs the trainer (warm-up included) with a progress line per step.
pub fn train_with_progress(trainer: &mut Trainer) -> anyhow::Result<Ending> {
    train_with_bar(trainer, &progress_bar())
}

/// Runs the trainer (warm-up included), showing each step on `bar`; when stderr is not a terminal
/// (a log file, a pipe: the spinner is not drawn there) each step is said in a line of its own.
pub fn train_with_bar(trainer: &mut Trainer, bar: &ProgressBar) -> anyhow::Result<Ending> {
    let lines = !std::io::stderr().is_terminal();
    let show = |message: String| match lines {
        true => eprintln!("{message}"),
        false => {
            bar.set_message(message);
            bar.tick();
        }
    };
    trainer.warm_up(|r| show(format!("warm-up step {}: loss {:.3}", r.step, r.loss)))?;
    let ending = trainer.run(|record| show(step_line(record)))?;
    bar.finish_and_clear();
    Ok(ending)
}

/// Says why the run ended (and how many samples were skipped); the exit code: 3 for a run stopped by
/// non-finite gradients. Of a data-parallel run's ranks, rank 0 says it.
pub fn report_ending(trainer: &Trainer, ending: Ending) -> ExitCode {
    if !trainer.writes() {
        return match ending {
            Ending::NonFinite { .. } => ExitCode::from(3),
            _ => ExitCode::SUCCESS,
        };
    }
    let dir = trainer.run_dir().display();
    let bad = trainer.state.bad_samples;
    match ending {
        Ending::Finished => eprintln!("finished after {} steps; run folder {dir}", trainer.state.step),
        Ending::EarlyStopped { metric, best } => {
            eprintln!(
                "early stop at step {}: {metric} best {best:.4}; run folder {dir}",
                trainer.state.step
            )
        }
        Ending::NonFinite { steps } => {
            eprintln!(
                "stopped: {steps} optimizer steps in a row had non-finite gradients (lower optim.lr, \
                 check the data); the last checkpoint in {dir} is usable with --resume"
            );
            return ExitCode::from(3);
        }
    }
    if bad > 0 {
        eprintln!("{bad} sample(s) could not be encoded or scored and were skipped (listed above)");
    }
    let records = trainer.bad_records();
    if records > 0 {
        eprintln!(
            "{records} bad record(s) of the data files were skipped when they were read (listed at the start)"
        );
    }
    ExitCode::SUCCESS
}

/// Refuses a CUDA config whose memory plan does not fit, naming the knob to turn; decides
/// `model.gradient_checkpointing = "auto"` from the plan (the config the run keeps says which).
fn preflight(cfg: &mut TrainConfig, gpu_memory: Option<u64>) -> anyhow::Result<()> {
    if cfg.model.device != DeviceKind::Cuda {
        return Ok(());
    }
    let gpu_bytes = super::plan::gpu_memory_or_detected(gpu_memory);
    let model = cfg.model.architecture()?;
    // A worker plans its own GPU, of the world its launcher named (joining the group checks it).
    let world = std::env::var("WORLD_SIZE")
        .ok()
        .and_then(|w| w.trim().parse::<u64>().ok())
        .unwrap_or(1);
    let extras = PlanExtras::of(cfg, world);
    if let Some(choice) = plan::decide_checkpointing(cfg, &model, extras, gpu_bytes) {
        eprintln!("{choice}");
    }
    let plan = plan::estimate(cfg, &model, extras);
    plan.check(gpu_bytes)
        .context("memory pre-flight (groundrl plan shows the whole estimate)")?;
    if plan::close_fit(plan.total(), gpu_bytes) && std::env::var_os(ALLOC_CONF).is_none() {
        // SAFETY: called before the trainer starts any thread or CUDA; no other thread reads the
        // environment meanwhile (as in `pin_local_gpu`).
        unsafe { std::env::set_var(ALLOC_CONF, EXPANDABLE) };
        eprintln!(
            "the plan fills over {}% of the GPU's memory: libtorch's allocator grows \
             its blocks in place ({ALLOC_CONF}={EXPANDABLE}), so that memory it holds in pieces stays usable",
            plan::CLOSE_FIT_PERCENT
        );
    }
    Ok(())
}

/// libtorch's allocator settings, read when CUDA starts.
const ALLOC_CONF: &str = "PYTORCH_CUDA_ALLOC_CONF";
const EXPANDABLE: &str = "expandable_segments:True";
#[cfg(test)]
mod tests {
    use super::local_gpu;

    #[test]
    fn a_worker_sees_the_gpu_of_its_local_rank() {
        // torchrun on a 4-GPU machine, nothing hidden: worker 2 takes GPU 2.
        assert_eq!(local_gpu(4, 2, 4, None).unwrap().as_deref(), Some("2"));
        // The user hid some GPUs: the LOCAL_RANK-th of those left.
        assert_eq!(local_gpu(2, 1, 2, Some("3, 5")).unwrap().as_deref(), Some("5"));
        // One process, or a task that already sees one GPU: nothing changes.
        assert_eq!(local_gpu(1, 0, 1, None).unwrap(), None);
        assert_eq!(local_gpu(8, 3, 4, Some("6")).unwrap(), None);
        // More workers than GPUs: named.
        let err = local_gpu(4, 3, 4, Some("0,1")).unwrap_err().to_string();
        assert_eq!(err, "LOCAL_RANK 3 has no GPU: this process sees 2 (0,1)");
    }
}
