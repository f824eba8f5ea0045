use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum EvalCommand {}

pub fn run(cmd: EvalCommand) -> anyhow::Result<ExitCode> {
    match cmd {}
}
