use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use groundrl_score::metrics::coco::{self, CocoEval, Counts};

#[derive(clap::Args)]
pub struct Args {
    /// Ground truth: COCO JSON with `images`, `annotations`, `categories`.
    #[arg(long)]
    gt: PathBuf,
    /// Results: a JSON list of `{image_id, category_id, bbox: [x, y, w, h], score}`.
    #[arg(long)]
    dt: PathBuf,
    /// Print only one JSON object with the 12 stats (AP, AP50, AP75, APs, APm, APl, AR1, AR10, AR100,
    /// ARs, ARm, ARl), at full precision; -1 where pycocotools has -1. With --per-category the
    /// object is `{"stats": {...}, "per_category": [...]}`.
    #[arg(long)]
    json: bool,
    /// Also print a table of AP, AP50, precision and recall at IoU 0.5 for each category (null or
    /// "-" where undefined).
    #[arg(long)]
    per_category: bool,
    /// Print on stderr the seconds spent loading the JSON files and evaluating.
    #[arg(long)]
    timing: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let gt =
        coco::load_ground_truth(&args.gt).with_context(|| format!("ground truth {}", args.gt.display()))?;
    let dt = coco::load_detections(&args.dt).with_context(|| format!("results {}", args.dt.display()))?;
    let loaded = Instant::now();
    let eval = coco::evaluate(&gt, &dt)
        .with_context(|| format!("{} against {}", args.dt.display(), args.gt.display()))?;
    if args.timing {
        let (load, evaluate) = (loaded - start, loaded.elapsed());
        eprintln!(
            "timing: load {:.3} s, evaluate {:.3} s",
            load.as_secs_f64(),
            evaluate.as_secs_f64()
        );
    }
    if args.json {
        let json = match args.per_category {
            true => serde_json::json!({"stats": eval.stats, "per_category": per_category_json(&eval)}),
            false => serde_json::to_value(eval.stats)?,
        };
        println!("{json}");
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", eval.stats);
    println!();
    print_at50(&eval.at50);
    if args.per_category {
        println!();
        print_per_category(&eval);
    }
    Ok(ExitCode::SUCCESS)
}

/// Precision and recall at IoU 0.5 over all categories (definition: `groundrl_score::metrics::coco` docs).
pub(super) fn print_at50(c: &Counts) {
    let tp = c.true_positives;
    let setting = "@[ IoU=0.50      | area=   all | maxDets=100 ]";
    println!(
        " Precision {setting} = {}  ({tp} TP of {} detections)",
        fixed(c.precision()),
        tp + c.false_positives
    );
    println!(
        " Recall    {setting} = {}  ({tp} TP of {} ground truths)",
        fixed(c.recall()),
        c.ground_truths
    );
}

pub(super) fn print_per_category(eval: &CocoEval) {
    println!(
        "{:>11}  {:<20} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7}",
        "category_id", "name", "AP", "AP50", "P@.5", "R@.5", "GT", "det"
    );
    for c in &eval.per_category {
        let dets = c.at50.true_positives + c.at50.false_positives;
        println!(
            "{:>11}  {:<20} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7}",
            c.category_id,
            c.name,
            fixed(c.ap),
            fixed(c.ap50),
            fixed(c.at50.precision()),
            fixed(c.at50.recall()),
            c.at50.ground_truths,
            dets
        );
    }
}

/// The per-category table's rows as JSON objects, at full precision (null where undefined).
fn per_category_json(eval: &CocoEval) -> Vec<serde_json::Value> {
    eval.per_category
        .iter()
        .map(|c| {
            serde_json::json!({
                "category_id": c.category_id,
                "name": c.name,
                "ap": c.ap,
                "ap50": c.ap50,
                "precision_at50": c.at50.precision(),
                "recall_at50": c.at50.recall(),
                "ground_truths": c.at50.ground_truths,
                "detections": c.at50.true_positives + c.at50.false_positives,
            })
        })
        .collect()
}

/// Three decimals, or "-" where the value is undefined.
fn fixed(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"))
}
