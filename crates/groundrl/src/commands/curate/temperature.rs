//! `groundrl curate temperature`: rollouts of a validation set at several temperatures, accuracy at
//! each, and the highest temperature within `--tolerance` of the best (semantics:
//! `groundrl_core::curriculum::temperature`). Writes `DIR/temperature.json` and `DIR/temperature.svg`
//! (accuracy against temperature, the pick marked).
//!
//! Every temperature samples with the same seeds, so the accuracies differ by the temperature and not
//! by the luck of the draw.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use groundrl_core::curriculum::{Sweep, SweepPoint, pick_temperature};
use groundrl_tensor::hf_folder::HfModel;
use serde::Serialize;

use super::{percent, write_output};
use crate::commands::data::{read_samples, report_skipped};
use crate::commands::predict::ModelArgs;
use crate::commands::rollout::{Judge, RuleArgs, SamplingArgs, load_model, progress, roll_out};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Validation samples (.jsonl or .parquet).
    #[arg(long)]
    data: PathBuf,
    /// Temperatures to try (comma-separated), e.g. 1.0,1.4,1.7,2.0.
    #[arg(long, value_delimiter = ',', required = true)]
    temps: Vec<f64>,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// The reward spec (TOML) that scores completions.
    #[arg(long)]
    reward: PathBuf,
    #[command(flatten)]
    rule: RuleArgs,
    /// Accept an accuracy this far below the best (absolute: 0.01 is one point).
    #[arg(long, default_value_t = 0.01)]
    tolerance: f64,
    /// Output folder for temperature.json and temperature.svg.
    #[arg(long)]
    out: PathBuf,
}

/// `temperature.json`.
#[derive(Serialize)]
struct Report<'a> {
    model: &'a Path,
    data: &'a Path,
    rule: &'a str,
    /// Completions per sample.
    n: usize,
    /// Samples rolled out and scored at every temperature.
    samples: usize,
    #[serde(flatten)]
    sweep: &'a Sweep,
}

/// Samples that could not be used at one temperature.
#[derive(Default)]
struct Skipped {
    unencoded: usize,
    unscored: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let hf = load_model(&args.model)?;
    let judge = Judge::load(&args.reward, &args.rule)?;
    let loaded = read_samples(&args.data)?;
    report_skipped(&loaded.skipped, false)?;
    let mut points = Vec::new();
    let mut skipped = Skipped::default();
    for &temperature in &args.temps {
        let (point, at_this) = sweep_point(&hf, &judge, &args, &loaded.samples, temperature)?;
        eprintln!(
            "temperature {temperature}: accuracy {}",
            percent(Some(point.accuracy()))
        );
        points.push(point);
        // The same samples fail at every temperature: encoding and targets do not depend on it.
        skipped = at_this;
    }
    let sweep = pick_temperature(points, args.tolerance)?;
    print!("{}", table(&sweep));
    if sweep.best_accuracy == 0.0 {
        eprintln!("warning: no completion was correct at any temperature; the pick says nothing");
    }
    let report = Report {
        model: &args.model.model,
        data: &args.data,
        rule: &judge.rule,
        n: args.sampling.n,
        samples: loaded.samples.len() - skipped.unencoded - skipped.unscored,
        sweep: &sweep,
    };
    write_output(
        &args.out,
        "temperature.json",
        &serde_json::to_string_pretty(&report)?,
    )?;
    write_output(&args.out, "temperature.svg", &sweep.line_chart().svg())?;
    let bad = skipped.unencoded + skipped.unscored + loaded.skipped.len();
    if bad > 0 {
        eprintln!(
            "{} sample(s) could not be rolled out and {} not scored (listed above), {} bad record(s) in the data",
            skipped.unencoded,
            skipped.unscored,
            loaded.skipped.len()
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Rolls out and scores every sample at one temperature.
fn sweep_point(
    hf: &HfModel,
    judge: &Judge,
    args: &Args,
    samples: &[groundrl_score::data::Sample],
    temperature: f64,
) -> anyhow::Result<(SweepPoint, Skipped)> {
    let bar = progress(samples.len());
    let mut point = SweepPoint {
        temperature,
        correct: 0,
        total: 0,
        mean_reward: 0.0,
    };
    let mut reward_sum = 0.0;
    let mut skipped = Skipped::default();
    skipped.unencoded = roll_out(
        hf,
        samples,
        &args.data,
        &args.sampling,
        temperature,
        &bar,
        |rolled| {
            for r in rolled {
                match judge.score(r) {
                    Ok(records) => {
                        point.total += records.len() as u64;
                        point.correct += records.iter().filter(|c| c.correct == Some(true)).count() as u64;
                        reward_sum += records.iter().map(|c| c.reward).sum::<f64>();
                    }
                    Err(e) => {
                        bar.suspend(|| eprintln!("{}: {e}", args.data.display()));
                        skipped.unscored += 1;
                    }
                }
            }
            Ok(())
        },
    )?;
    bar.finish_and_clear();
    point.mean_reward = reward_sum / point.total.max(1) as f64;
    Ok((point, skipped))
}

fn table(sweep: &Sweep) -> String {
    let mut text = format!(
        "{:>11} {:>9} {:>9} {:>11}\n",
        "temperature", "accuracy", "correct", "mean reward"
    );
    for p in &sweep.points {
        let mark = if p.temperature == sweep.picked {
            "  <- picked"
        } else {
            ""
        };
        text += &format!(
            "{:>11} {:>9} {:>9} {:>11.4}{mark}\n",
            p.temperature,
            percent(Some(p.accuracy())),
            format!("{}/{}", p.correct, p.total),
            p.mean_reward
        );
    }
    text += &format!(
        "picked {}: the highest temperature within {} of the best accuracy ({})\n",
        sweep.picked,
        sweep.tolerance,
        percent(Some(sweep.best_accuracy))
    );
    text
}
