//! `--nproc-per-node N`: N workers of this same command on this machine, with the variables torchrun
//! gives each worker (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR` on the
//! loopback, `MASTER_PORT` a port the OS reported free). Their output is forwarded line by line,
//! prefixed with the rank. Unless `OMP_NUM_THREADS` is set, each worker gets an equal share of the
//! machine's cores for libtorch's CPU threads (torchrun sets it to 1), so that N workers do not each
//! start a thread per core and fight over them. When a worker fails the others are killed and the launch fails, naming
//! the rank and how it ended; it succeeds when every worker does.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, bail};

/// The flag this module reads, removed from the workers' command line.
pub const FLAG: &str = "--nproc-per-node";

/// How often the workers are polled for their exit.
const POLL: Duration = Duration::from_millis(50);

/// Runs this program's command line (without [`FLAG`]) as `workers` ranks and waits for them.
pub fn launch(workers: usize) -> anyhow::Result<ExitCode> {
    launch_with(worker_args(std::env::args_os().skip(1)), workers)
}

/// Runs this program with `args` as `workers` ranks and waits for them.
pub fn launch_with(args: Vec<OsString>, workers: usize) -> anyhow::Result<ExitCode> {
    let port = free_port()?;
    let mut children = Vec::with_capacity(workers);
    let mut readers = Vec::new();
    for rank in 0..workers {
        let mut child = this_program()?
            .args(&args)
            .envs(worker_env(rank, workers, port))
            .envs(threads(workers))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting rank {rank}"))?;
        if let Some(out) = child.stdout.take() {
            readers.push(forward(out, rank, false));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(forward(err, rank, true));
        }
        children.push(Some(child));
    }
    let failures = wait_all(&mut children)?;
    for reader in readers {
        let _ = reader.join();
    }
    if failures.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let said: Vec<String> = failures
        .iter()
        .map(|(rank, status)| failure(*rank, *status))
        .collect();
    bail!(
        "{} of {workers} workers failed: {}; the other workers were stopped",
        failures.len(),
        said.join("; ")
    )
}

/// A command that starts this program again (a worker, a demo's seed process). On Linux it names
/// the running executable itself (`/proc/self/exe`), which stays startable when the file at the
/// program's path was replaced or removed meanwhile (a rebuild or reinstall during a long run: its
/// later workers would otherwise fail to start, or start another build).
pub fn this_program() -> anyhow::Result<Command> {
    let running = std::path::Path::new("/proc/self/exe");
    if running.exists() {
        let mut command = Command::new(running);
        if let Some(name) = std::env::args_os().next() {
            std::os::unix::process::CommandExt::arg0(&mut command, name);
        }
        return Ok(command);
    }
    let path = std::env::current_exe().context("finding this program to start it again")?;
    Ok(Command::new(path))
}

/// The command line without [`FLAG`] and its value (`--nproc-per-node N` or `--nproc-per-node=N`).
fn worker_args(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for arg in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        match arg.to_str() {
            Some(a) if a == FLAG => skip_value = true,
            Some(a) if a.starts_with(&format!("{FLAG}=")) => {}
            _ => out.push(arg),
        }
    }
    out
}

/// torchrun's variables for worker `rank` of `world` on this one machine.
fn worker_env(rank: usize, world: usize, port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", world.to_string()),
        ("LOCAL_RANK", rank.to_string()),
        ("LOCAL_WORLD_SIZE", world.to_string()),
        ("MASTER_ADDR", "127.0.0.1".to_string()),
        ("MASTER_PORT", port.to_string()),
    ]
}

/// `OMP_NUM_THREADS` for each of `workers` workers, unless it is set already: the cores shared out.
fn threads(workers: usize) -> Option<(&'static str, String)> {
    if std::env::var_os("OMP_NUM_THREADS").is_some() {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    Some(("OMP_NUM_THREADS", (cores / workers).max(1).to_string()))
}

/// A port on the loopback the OS reported free (bound to port 0, then released for rank 0's store;
/// another process could take it in between, and the workers' rendezvous would then fail).
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port for the rendezvous")?;
    Ok(listener.local_addr()?.port())
}

/// Copies a worker's output to ours, each line prefixed with its rank.
fn forward(stream: impl Read + Send + 'static, rank: usize, to_stderr: bool) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            // A line a progress bar redrew in place: its last state.
            let line = line.rsplit('\r').next().unwrap_or_default();
            let _ = match to_stderr {
                true => writeln!(std::io::stderr(), "[rank {rank}] {line}"),
                false => writeln!(std::io::stdout(), "[rank {rank}] {line}"),
            };
        }
    })
}

/// Waits until every worker succeeded or one failed; then kills the others and returns the ranks
/// that had failed by then, with their statuses.
fn wait_all(children: &mut [Option<Child>]) -> anyhow::Result<Vec<(usize, ExitStatus)>> {
    loop {
        let mut failures = Vec::new();
        for (rank, slot) in children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            if let Some(status) = child.try_wait()? {
                *slot = None;
                if !status.success() {
                    failures.push((rank, status));
                }
            }
        }
        if !failures.is_empty() {
            for child in children.iter_mut().flatten() {
                let _ = child.kill();
                let _ = child.wait();
            }
            return Ok(failures);
        }
        if children.iter().all(Option::is_none) {
            return Ok(failures);
        }
        std::thread::sleep(POLL);
    }
}

/// How a worker ended, in words.
fn failure(rank: usize, status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("rank {rank} exited with status {code}"),
        (None, Some(9)) => format!("rank {rank} was killed by signal 9 (SIGKILL)"),
        (None, Some(signal)) => format!("rank {rank} was killed by signal {signal}"),
        _ => format!("rank {rank} ended with {status}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_and_its_value_are_left_out_of_the_workers_arguments() {
        let args = ["train", "c.toml", FLAG, "2", "rollout.n=4", "--nproc-per-node=3"];
        let out = worker_args(args.iter().map(OsString::from));
        assert_eq!(out, ["train", "c.toml", "rollout.n=4"].map(OsString::from));
    }

    #[test]
    fn a_worker_gets_torchruns_six_variables() {
        let env = worker_env(1, 2, 29500);
        let names: Vec<&str> = env.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "RANK",
                "WORLD_SIZE",
                "LOCAL_RANK",
                "LOCAL_WORLD_SIZE",
                "MASTER_ADDR",
                "MASTER_PORT"
            ]
        );
        let values: Vec<&str> = env.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(values, ["1", "2", "1", "2", "127.0.0.1", "29500"]);
    }

    #[test]
    fn failures_are_named_with_their_status() {
        assert_eq!(
            failure(1, ExitStatus::from_raw(9)),
            "rank 1 was killed by signal 9 (SIGKILL)"
        );
        assert_eq!(
            failure(0, ExitStatus::from_raw(2 << 8)),
            "rank 0 exited with status 2"
        );
    }
}
