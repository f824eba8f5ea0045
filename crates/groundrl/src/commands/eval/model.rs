//! `groundrl eval model`: a model's answers on a sample file and their metrics in one command. The
//! model is an HF folder or a training run's checkpoint, asked and read as the run's held-out
//! evaluation asks and reads (`groundrl_train::inference`); grounding samples are scored as
//! `eval grounding` scores them (the same report, slices included), detection samples as `eval coco`
//! scores them (one image a sample, its targets the ground truth: `metrics::coco::evaluate_answers`).
//! A sample that cannot be asked (a missing image, a path out of the data file's folder, a declared
//! size that is not the image's) is skipped, named, counted, and makes the exit code 1.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use groundrl_core::telemetry::{EvalRecord, SampledAnswers};
use groundrl_score::data::{Sample, Task};
use groundrl_score::frame::Frame;
use groundrl_score::geometry::{BBox, LabeledBox};
use groundrl_score::metrics::coco::{AnsweredImage, AnswersEval, evaluate_answers};
use groundrl_score::metrics::grounding::{
    EvalOptions, GroundingReport, ItemResult, Outcome, PredictionLine, score_items,
};
use groundrl_score::resize::PixelBudget;
use groundrl_tensor::rollout::Trajectory;
use groundrl_train::inference::{Inference, Prompt, finish_name, generated_tokens};
use serde::Serialize;

use super::coco::{print_at50, print_per_category};
use crate::commands::data::{ImageArgs, read_samples, report_skipped};
use crate::commands::predict::AskArgs;
use crate::commands::rollout::progress;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    ask: AskArgs,
    /// Samples (.jsonl or .parquet). Samples without a prompt of their own are asked in their
    /// task's prompt preset (see --prompt, --reasoning, --answer-frame: the model's frame by
    /// default).
    #[arg(long)]
    data: PathBuf,
    #[command(flatten)]
    images: ImageArgs,
    /// Evaluate the first N samples only (0: all).
    #[arg(long, default_value_t = 0)]
    n: usize,
    /// Sampling temperature; 0 (the default) is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Completions per sample (above 1 only with --temperature above 0). The metrics score the
    /// first; with more, pass@K (a sample with any correct) and the share of correct ones among all
    /// are added for grounding samples.
    #[arg(long, default_value_t = 1)]
    samples: usize,
    /// Seeds sample i's completions together with i.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Samples per generation call.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Write one JSON line per evaluated sample: its answer in original pixels, the verdict and
    /// what the report counts it under (see `Item`). Its grounding lines are a predictions file
    /// for `eval grounding`, which reads them by their answer in pixels.
    #[arg(long)]
    items: Option<PathBuf>,
    /// Also print AP, AP50, precision and recall at IoU 0.5 per category of the detection samples.
    #[arg(long)]
    per_category: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// One line of `--items`. Geometry is in original-image pixels.
#[derive(Serialize)]
struct Item {
    #[serde(flatten)]
    record: ItemRecord,
    task: Task,
    /// Tokens the model wrote, and why it stopped (`eos`, `stop`, `length`).
    tokens: usize,
    finish_reason: &'static str,
    /// Grounding samples: what the report counts (`clicked`, `refused`, `parse_failure` with the
    /// reason), the frame the answer was read in and the IoU of an answered box.
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<Outcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    answer_frame: Option<Frame>,
    #[serde(skip_serializing_if = "Option::is_none")]
    iou: Option<f64>,
    /// Detection samples: every answered box with its label.
    #[serde(skip_serializing_if = "Option::is_none")]
    boxes: Option<Vec<LabeledXyxy>>,
}

/// The fields of a held-out evaluation record (`eval/after.jsonl`) that `eval model` knows: the
/// reward and the tool use are the trainer's.
#[derive(Serialize)]
struct ItemRecord {
    id: String,
    source: String,
    image: String,
    width: u32,
    height: u32,
    instruction: String,
    targets: Vec<[f64; 4]>,
    completion: String,
    point: Option<[f64; 2]>,
    pred_box: Option<[f64; 4]>,
    /// The grounding verdict (ScreenSpot's click-in-target rule); `null` for a detection sample.
    correct: Option<bool>,
    target_size: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sampled: Option<SampledAnswers>,
}

impl ItemRecord {
    fn of(r: EvalRecord) -> Self {
        Self {
            id: r.id,
            source: r.source,
            image: r.image,
            width: r.width,
            height: r.height,
            instruction: r.instruction,
            targets: r.targets,
            completion: r.completion,
            point: r.point,
            pred_box: r.pred_box,
            correct: None,
            target_size: r.target_size,
            sampled: None,
        }
    }
}

#[derive(Serialize)]
struct LabeledXyxy {
    bbox: [f64; 4],
    label: String,
}

/// A sample the model answered.
struct Answered<'a> {
    sample: &'a Sample,
    prompt: Prompt,
    trajectories: Vec<Trajectory>,
}

/// The `--json` output.
#[derive(Serialize)]
struct Summary<'a> {
    model: String,
    data: String,
    /// Samples evaluated, and those skipped (bad records of the file and samples that could not be
    /// asked).
    evaluated: usize,
    skipped: usize,
    temperature: f64,
    samples_per_item: usize,
    /// The frame prompts asked answers in and they were read in (`--answer-frame`, `auto` settled
    /// for the model).
    model_frame: Frame,
    grounding: Option<&'a GroundingReport>,
    sampled: Option<Sampled>,
    coco: Option<CocoSummary<'a>>,
}

/// Grounding accuracy over every completion of `--samples K`.
#[derive(Clone, Copy, Serialize)]
struct Sampled {
    k: usize,
    items: usize,
    pass_at_k: usize,
    correct: usize,
    completions: usize,
}

#[derive(Serialize)]
struct CocoSummary<'a> {
    images: usize,
    stats: &'a groundrl_score::metrics::coco::Stats,
    at50: groundrl_score::metrics::coco::Counts,
    unknown_labels: usize,
    non_finite: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.samples == 0 {
        bail!("--samples must be at least 1");
    }
    if args.samples > 1 && args.temperature <= 0.0 {
        bail!(
            "--samples {} asks for several completions, which greedy decoding makes equal: give --temperature above 0",
            args.samples
        );
    }
    if !args.temperature.is_finite() || args.temperature < 0.0 {
        bail!(
            "--temperature must be 0 (greedy) or above, got {}",
            args.temperature
        );
    }
    let loaded = read_samples(&args.data).with_context(|| format!("data {}", args.data.display()))?;
    report_skipped(&loaded.skipped, false)?;
    let mut samples = loaded.samples;
    if args.n > 0 {
        samples.truncate(args.n);
    }
    let mut asker = args.ask.load()?;
    asker.loaded.hf.processor.files = args.images.limits();
    let base = args.data.parent().unwrap_or(Path::new(""));
    let bar = progress(samples.len());
    let mut answered: Vec<Answered> = Vec::with_capacity(samples.len());
    let mut unanswerable = 0;
    let hf = &asker.loaded.hf;
    let inference = &asker.inference;
    let batch = args.batch.max(1);
    for (chunk_index, chunk) in samples.chunks(batch).enumerate() {
        let mut prompts = Vec::new();
        for (i, sample) in chunk.iter().enumerate() {
            let style = asker.style.for_task(sample.task);
            match inference.encode(&hf.processor, sample, base, Some(&style)) {
                Ok(prompt) => prompts.push((sample, prompt, chunk_index * batch + i)),
                Err(e) => {
                    unanswerable += 1;
                    bar.suspend(|| eprintln!("skipped: {}: {e}", args.data.display()));
                }
            }
        }
        if !prompts.is_empty() {
            let seeded: Vec<(&Prompt, u64)> = prompts
                .iter()
                .map(|(_, p, position)| (p, groundrl_core::rng::keyed(args.seed, &position.to_string())))
                .collect();
            let mut trajectories: Vec<Vec<Trajectory>> = prompts.iter().map(|_| Vec::new()).collect();
            for t in inference.generate(hf, &seeded, args.samples, args.temperature)? {
                let index = t.prompt_index;
                trajectories[index].push(t);
            }
            for ((sample, prompt, _), trajectories) in prompts.into_iter().zip(trajectories) {
                answered.push(Answered {
                    sample,
                    prompt,
                    trajectories,
                });
            }
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    if answered.is_empty() {
        bail!(
            "{}: no sample could be evaluated ({} bad records, {unanswerable} samples that could not be asked; listed above)",
            args.data.display(),
            loaded.skipped.len()
        );
    }
    let budget = PixelBudget {
        min_pixels: hf.processor.image.min_pixels,
        max_pixels: hf.processor.image.max_pixels,
    };
    let options = EvalOptions {
        model_frame: inference.model_frame,
        detect_frame: inference.detect_frame,
        budget,
    };
    let (grounding, detection): (Vec<&Answered>, Vec<&Answered>) =
        answered.iter().partition(|a| a.sample.task != Task::Detection);
    let scored = score_grounding(&grounding, inference, &options)?;
    let coco = match detection.is_empty() {
        true => None,
        false => Some(evaluate_answers(&detected(&detection, inference))?),
    };
    let mut items: Vec<Item> = Vec::new();
    if let Some(path) = &args.items {
        items = item_lines(&answered, base, inference, &scored);
        write_items(path, &items)?;
    }
    let skipped = loaded.skipped.len() + unanswerable;
    let summary = Summary {
        model: asker.loaded.describe(),
        data: args.data.display().to_string(),
        evaluated: answered.len(),
        skipped,
        temperature: args.temperature,
        samples_per_item: args.samples,
        model_frame: inference.model_frame,
        grounding: scored.report.as_ref(),
        sampled: scored.sampled,
        coco: coco.as_ref().map(|c| CocoSummary {
            images: detection.len(),
            stats: &c.eval.stats,
            at50: c.eval.at50,
            unknown_labels: c.unknown_labels,
            non_finite: c.non_finite,
        }),
    };
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print_text(&summary, coco.as_ref(), args.per_category);
    }
    if let Some(path) = &args.items {
        eprintln!("{} items written to {}", items.len(), path.display());
    }
    if skipped > 0 {
        eprintln!(
            "{skipped} sample(s) skipped and left out of the metrics: {} bad record(s) in the file, \
             {unanswerable} that could not be asked (listed above; images are read inside the data \
             file's folder unless --allow-outside-paths is given)",
            loaded.skipped.len()
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The grounding report of the first completions, each sample's verdict, and with several
/// completions per sample the verdicts of all of them.
struct Scored {
    report: Option<GroundingReport>,
    /// Per grounding sample, in order: the first completion's verdict.
    items: Vec<ItemResult>,
    /// Per grounding sample: how many of its completions were correct.
    correct: Vec<usize>,
    sampled: Option<Sampled>,
}

/// Scores the grounding samples as `eval grounding` scores a predictions file of their completions.
fn score_grounding(
    answered: &[&Answered],
    inference: &Inference,
    options: &EvalOptions,
) -> anyhow::Result<Scored> {
    if answered.is_empty() {
        return Ok(Scored {
            report: None,
            items: Vec::new(),
            correct: Vec::new(),
            sampled: None,
        });
    }
    let samples: Vec<Sample> = answered.iter().map(|a| a.sample.clone()).collect();
    let k = answered.iter().map(|a| a.trajectories.len()).max().unwrap_or(0);
    let mut correct = vec![0; answered.len()];
    let mut items = Vec::new();
    for draw in 0..k {
        let predictions: Vec<PredictionLine> = answered
            .iter()
            .enumerate()
            .filter_map(|(i, a)| {
                a.trajectories.get(draw).map(|t| PredictionLine {
                    id: a.sample.id.clone(),
                    line: i + 1,
                    answer: inference.raw_answer(t, &a.prompt.view),
                })
            })
            .collect();
        let verdicts = score_items(&samples, &predictions, options)?;
        for (count, verdict) in correct.iter_mut().zip(&verdicts) {
            *count += usize::from(verdict.correct);
        }
        if draw == 0 {
            items = verdicts;
        }
    }
    let sampled = (k > 1).then(|| Sampled {
        k,
        items: answered.len(),
        pass_at_k: correct.iter().filter(|&&c| c > 0).count(),
        correct: correct.iter().sum(),
        completions: answered.iter().map(|a| a.trajectories.len()).sum(),
    });
    Ok(Scored {
        report: Some(GroundingReport::build(&samples, &items, options.model_frame)),
        items,
        correct,
        sampled,
    })
}

/// The detection samples' targets and first answers' boxes, in original pixels.
fn detected(answered: &[&Answered], inference: &Inference) -> Vec<AnsweredImage> {
    answered
        .iter()
        .map(|a| AnsweredImage {
            targets: target_boxes(a),
            answers: a
                .trajectories
                .first()
                .and_then(|t| inference.read(t, &a.prompt.view).ok())
                .map(|answer| answer.boxes)
                .unwrap_or_default(),
        })
        .collect()
}

/// A sample's targets in original pixels with their labels (`""` when unlabeled).
fn target_boxes(a: &Answered) -> Vec<LabeledBox> {
    let boxes = groundrl_train::inference::pixel_boxes(a.sample, a.prompt.view.frames);
    boxes
        .into_iter()
        .zip(&a.sample.targets)
        .map(|(xyxy, t)| LabeledBox {
            bbox: BBox::from_xyxy(xyxy),
            label: t.label.clone().unwrap_or_default(),
        })
        .collect()
}

fn item_lines(answered: &[Answered], base: &Path, inference: &Inference, scored: &Scored) -> Vec<Item> {
    let mut grounding = scored.items.iter().zip(&scored.correct);
    answered
        .iter()
        .filter_map(|a| {
            let first = a.trajectories.first()?;
            let mut record = ItemRecord::of(inference.eval_record(a.sample, base, &a.prompt, first));
            let (mut outcome, mut answer_frame, mut iou, mut boxes) = (None, None, None, None);
            if a.sample.task == Task::Detection {
                let read = inference.read(first, &a.prompt.view);
                let answered = read.map(|r| r.boxes).unwrap_or_default();
                boxes = Some(
                    answered
                        .into_iter()
                        .map(|b| LabeledXyxy {
                            bbox: b.bbox.xyxy(),
                            label: b.label,
                        })
                        .collect(),
                );
            } else if let Some((verdict, &correct)) = grounding.next() {
                record.correct = Some(verdict.correct);
                if a.trajectories.len() > 1 {
                    record.sampled = Some(SampledAnswers {
                        n: a.trajectories.len() as u32,
                        correct: correct as u32,
                    });
                }
                outcome = Some(verdict.outcome.clone());
                answer_frame = verdict.answer_frame;
                iou = verdict.iou;
            }
            Some(Item {
                record,
                task: a.sample.task,
                tokens: generated_tokens(first),
                finish_reason: finish_name(first.finish),
                outcome,
                answer_frame,
                iou,
                boxes,
            })
        })
        .collect()
}

fn write_items(path: &Path, items: &[Item]) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("--items {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    for item in items {
        serde_json::to_writer(&mut out, item)?;
        out.write_all(b"\n")?;
    }
    out.flush().with_context(|| format!("--items {}", path.display()))
}

fn print_text(summary: &Summary, coco: Option<&AnswersEval>, per_category: bool) {
    println!("model: {}", summary.model);
    println!("model frame: {} (asked for and read in)", summary.model_frame);
    let how = match summary.temperature {
        0.0 => "greedy".to_string(),
        t => format!("sampled at temperature {t}"),
    };
    println!(
        "{}: {} samples evaluated ({how}), {} skipped",
        summary.data, summary.evaluated, summary.skipped
    );
    if let Some(report) = summary.grounding {
        println!();
        print!("{}", report.to_text());
    }
    if let Some(s) = summary.sampled {
        println!(
            "{} completions per sample: pass@{} {}/{} ({:.1}%), {:.1}% of all {} correct",
            s.k,
            s.k,
            s.pass_at_k,
            s.items,
            100.0 * s.pass_at_k as f64 / s.items.max(1) as f64,
            100.0 * s.correct as f64 / s.completions.max(1) as f64,
            s.completions
        );
    }
    if let (Some(c), Some(answers)) = (&summary.coco, coco) {
        println!();
        println!(
            "detection samples: {} (COCO bbox evaluation, each sample one image)",
            c.images
        );
        print!("{}", answers.eval.stats);
        println!();
        print_at50(&answers.eval.at50);
        if c.unknown_labels + c.non_finite > 0 {
            println!(
                "answered boxes left out: {} with a label no target has, {} with a coordinate that is not finite",
                c.unknown_labels, c.non_finite
            );
        }
        if per_category {
            println!();
            print_per_category(&answers.eval);
        }
    }
}
