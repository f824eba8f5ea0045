//! Deliberate crashes, for the fault-injection test of resuming (`crates/groundrl/tests/cli_train.rs`).
//!
//! With `GROUNDRL_FAULT=POINT:N` in the environment, the process kills itself with SIGKILL the N-th
//! time (1-based) it reaches the named point, as an out-of-memory kill or a pre-empted machine would:
//! no destructor runs and nothing is flushed. Without the variable every point does nothing beyond
//! reading a cached `None`. The points are where a crash would hurt most:
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

/// The point and count of [`VARIABLE`], read once.
fn armed() -> Option<&'static (String, u64)> {
    static ARMED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let text = std::env::var(VARIABLE).ok()?;
            let parsed = text
                .split_once(':')
                .and_then(|(point, n)| Some((point.to_string(), n.parse().ok()?)));
            if parsed.is_none() {
                eprintln!("{VARIABLE}={text:?} ignored: expected POINT:N, e.g. save:2");
            }
            parsed
        })
        .as_ref()
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
