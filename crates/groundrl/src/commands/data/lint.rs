//! `groundrl data lint`: text problems in instructions and prompts (missing space after a sentence,
//! doubled spaces, unbalanced tags, unfilled template variables, a prompt asking for another answer
//! format than expected) and targets lying wholly outside their image. Prints each finding with its
//! sample id; exits 1 if there is any.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use groundrl_core::data::lint::lint;

use super::{read_samples, report_skipped};

#[derive(clap::Args)]
pub struct Args {
    /// Sample file (.jsonl or .parquet).
    #[arg(long)]
    input: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let loaded = read_samples(&args.input)?;
    report_skipped(&loaded.skipped, false)?;
    let findings = lint(&loaded.samples);
    let mut per_rule: BTreeMap<&str, usize> = BTreeMap::new();
    for finding in &findings {
        println!("{finding}");
        *per_rule.entry(finding.rule.name()).or_default() += 1;
    }
    println!(
        "linted {} samples from {}: {} findings, {} unreadable records",
        loaded.samples.len(),
        args.input.display(),
        findings.len(),
        loaded.skipped.len()
    );
    for (rule, count) in per_rule {
        println!("  {rule}: {count}");
    }
    let clean = findings.is_empty() && loaded.skipped.is_empty();
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
