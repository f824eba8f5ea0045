//! Deliberate crashes, for the fault-injection test of resuming (`crates/groundrl/tests/cli_train.rs`).
//!
//! With `GROUNDRL_FAULT=POINT:N` in the environment, the process kills itself with SIGKILL the N-th
//! time (1-based) it reaches the named point, as an out-of-memory kill or a pre-empted machine would:
//! no destructor runs and nothing is flushed. `POINT:N@R` arms it in the process whose `RANK` is R
//! only (one worker of a data-parallel run; `crates/groundrl/tests/cli_train_data_parallel.rs`).
//! Without the variable every point does nothing beyond reading a cached `None`. The points are
//! where a crash would hurt most:
//!
//! - [`WARM_UP`]: a warm-up step logged, the warm-up unfinished (no checkpoint yet);
//! - [`STEP`]: a GRPO step's rollouts drawn and their ledger entries written, its update not done;
//! - [`SAVE`]: a checkpoint's weights written into its temporary folder, the rest not;
//! - [`EVAL`]: a held-out evaluation's first batch answered, its file not written.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable naming the point and count, `POINT:N`.
pub const VARIABLE: &str = "GROUNDRL_FAULT";
pub const WARM_UP: &str = "warm-up";
pub const STEP: &str = "step";
pub const SAVE: &str = "save";
pub const EVAL: &str = "eval";

/// The point and count of [`VARIABLE`], read once; `None` in a process of another rank than the one
/// it names.
fn armed() -> Option<&'static (String, u64)> {
    static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let text = std::env::var(VARIABLE).ok()?;
            let Some((point, n, rank)) = parse(&text) else {
                eprintln!("{VARIABLE}={text:?} ignored: expected POINT:N or POINT:N@RANK, e.g. save:2");
                return None;
            };
            let here = std::env::var("RANK").ok();
            match rank {
                Some(rank) if here.as_deref() != Some(rank) => None,
                _ => Some((point.to_string(), n)),
            }
        })
        .as_ref()
}

/// `POINT:N` or `POINT:N@RANK` as its parts.
fn parse(text: &str) -> Option<(&str, u64, Option<&str>)> {
    let (point, rest) = text.split_once(':')?;
    let (n, rank) = match rest.split_once('@') {
        Some((n, rank)) => (n, Some(rank)),
        None => (rest, None),
    };
    Some((point, n.parse().ok()?, rank))
}

/// Kills the process with SIGKILL when `point` is the armed one and this is its N-th passage.
pub fn point(point: &str) {
    static PASSED: AtomicU64 = AtomicU64::new(0);
    let Some((armed, n)) = armed() else {
        return;
    };
    if armed == point && PASSED.fetch_add(1, Ordering::SeqCst) + 1 == *n {
        eprintln!("{VARIABLE}: killed at {point} {n}");
        // SAFETY: kill(2) on this process's own id with a constant signal; it does not return.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_fault_names_its_point_count_and_perhaps_a_rank() {
        assert_eq!(parse("save:2"), Some(("save", 2, None)));
        assert_eq!(parse("step:3@1"), Some(("step", 3, Some("1"))));
        assert_eq!(parse("step"), None);
        assert_eq!(parse("step:x@1"), None);
    }
}
