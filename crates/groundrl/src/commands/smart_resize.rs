use std::process::ExitCode;

use groundrl_score::resize::{DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, PixelBudget, smart_resize};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// Original image height in pixels.
    #[arg(long)]
    height: u64,
    /// Original image width in pixels.
    #[arg(long)]
    width: u64,
    /// Lower bound on resized pixels (preprocessor_config.json `min_pixels`).
    #[arg(long, default_value_t = DEFAULT_MIN_PIXELS)]
    min_pixels: u64,
    /// Upper bound on resized pixels (preprocessor_config.json `max_pixels`).
    #[arg(long, default_value_t = DEFAULT_MAX_PIXELS)]
    max_pixels: u64,
}

/// The printed object, fields in the documented order.
#[derive(Serialize)]
struct Output {
    height: u32,
    width: u32,
    grid: [u32; 3],
    image_tokens: u64,
}

/// Prints `{"height", "width", "grid", "image_tokens"}`; a refused size exits with code 2.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let budget = PixelBudget {
        min_pixels: args.min_pixels,
        max_pixels: args.max_pixels,
    };
    match smart_resize(args.height, args.width, budget) {
        Ok(r) => {
            let out = Output {
                height: r.height,
                width: r.width,
                grid: r.grid(),
                image_tokens: r.image_tokens(),
            };
            println!("{}", serde_json::to_string(&out)?);
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            eprintln!("error: cannot resize: {err}");
            Ok(ExitCode::from(2))
        }
    }
}
