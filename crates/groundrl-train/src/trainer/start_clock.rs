//! How long a run took to reach its first step, and where that time went: said once, in a line, when
//! the first GRPO step of this process begins (a resumed run's too), so a slow start shows which part
//! to look at (the data files, the model's weights, the optimizer's state, the warm-up).

use std::time::Instant;

/// The start's clock: when the trainer began and the parts timed since.
#[derive(Debug)]
pub(super) struct StartClock {
    began: Instant,
    parts: Vec<(&'static str, f64)>,
    said: bool,
}

impl StartClock {
    pub fn new(began: Instant) -> Self {
        Self {
            began,
            parts: Vec::new(),
            said: false,
        }
    }

    /// Runs `work` and counts its time as the part `name`.
    pub fn time<T>(&mut self, name: &'static str, work: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let value = work();
        self.parts.push((name, start.elapsed().as_secs_f64()));
        value
    }

    /// Moves the start back to `began` (the moment the command asked for the trainer, before the
    /// run folder's lock and config were read).
    pub fn began_at(&mut self, began: Instant) {
        self.began = began.min(self.began);
    }

    /// The line to say when the first step begins, once: `None` after the first call.
    pub fn first_step_line(&mut self) -> Option<String> {
        if std::mem::replace(&mut self.said, true) {
            return None;
        }
        Some(line(self.began.elapsed().as_secs_f64(), &self.parts))
    }
}

/// "first step begins 12.3 s after the start (data 0.1 s, model 8.2 s, ..., the rest 2.9 s)".
fn line(total: f64, parts: &[(&'static str, f64)]) -> String {
    let timed: f64 = parts.iter().map(|(_, s)| s).sum();
    let mut shown: Vec<String> = parts.iter().map(|(n, s)| format!("{n} {s:.1} s")).collect();
    shown.push(format!("the rest {:.1} s", (total - timed).max(0.0)));
    format!(
        "first step begins {total:.1} s after the start ({})",
        shown.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_each_part_and_the_rest() {
        let parts = [("data", 0.04), ("model", 8.26)];
        assert_eq!(
            line(12.3, &parts),
            "first step begins 12.3 s after the start (data 0.0 s, model 8.3 s, the rest 4.0 s)"
        );
    }

    #[test]
    fn the_line_is_said_once() {
        let mut clock = StartClock::new(Instant::now());
        let x = clock.time("model", || 7);
        assert_eq!(x, 7);
        let first = clock.first_step_line().unwrap();
        assert!(first.starts_with("first step begins "), "{first}");
        assert!(first.contains("model 0.0 s"), "{first}");
        assert_eq!(clock.first_step_line(), None);
    }
}
